"""What the worker prepares at start-up and hands to each engine child.

Theory of operation. Everything that can be checked before a script runs is checked here, in
the worker, at start-up, so that a mistake stops the worker (exit 2, the problem named) instead
of denying every request later: the policy file is read and loaded (a module that does not parse
names its file, line and column), the CA file is read and parsed, and every credential value is
resolved from its environment variable and checked (credentials.py). The result is a value the
engine can send to its children as JSON over their stdin: the children's environment is scrubbed
and must stay so.

The JSON document holds the credential values, so it is the one place they leave the worker
process. It is never logged: ``EgressHandoff`` does not print its values (``Secret``), and the
document is built only by ``to_child_json()`` for the child's stdin frame. The policy is sent as
its text (the child compiles it again), never as a file name to re-read, so every child decides
with the module that was checked at start-up.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from appliance.config.egress import EGRESS_RULE, EgressSettings
from appliance.config.urls import parse_origin
from appliance.core.errors import InvalidConfig
from appliance.core.schema import INVALID, validate
from appliance.egress.credentials import EgressCredential, resolve_egress_credentials
from appliance.egress.policy import POLICY_BYTES_MAX, PolicyLoadError, RegoPolicy
from appliance.secret import Secret

HANDOFF_VERSION: Final = 1
CA_FILE_BYTES_MAX: Final = 1024 * 1024


@dataclass(frozen=True, repr=False)
class EgressHandoff:
    settings: EgressSettings
    policy_source: str | None  # the Rego module's text; None with opa_url
    ca_pem: str | None
    credentials: tuple[EgressCredential, ...]

    def __repr__(self) -> str:
        names = ", ".join(credential.name for credential in self.credentials)
        return f"EgressHandoff(policy_file={self.settings.policy_file!r}, credentials=[{names}])"

    def to_child_json(self) -> dict[str, Any]:
        """The document for the engine child's stdin. It holds credential values: never log
        it, never put it in argv or an environment."""
        return {
            "v": HANDOFF_VERSION,
            "settings": settings_json(self.settings),
            "policy_source": self.policy_source,
            "ca_pem": self.ca_pem,
            "credential_values": [credential.value.reveal() for credential in self.credentials],
        }

    @classmethod
    def from_child_json(cls, document: Mapping[str, Any]) -> EgressHandoff:
        if document.get("v") != HANDOFF_VERSION:
            raise ValueError(f"egress handoff version {document.get('v')!r} is not understood")
        settings, problems = validate(EGRESS_RULE, document.get("settings"), "egress")
        if settings is INVALID:
            raise InvalidConfig(problems)
        values = document.get("credential_values")
        if not isinstance(values, list) or len(values) != len(settings.credentials):
            raise ValueError("egress handoff: credential_values does not match the credentials")
        credentials = tuple(
            EgressCredential(rule, Secret(str(value)))
            for rule, value in zip(settings.credentials, values, strict=True)
        )
        return cls(settings, document.get("policy_source"), document.get("ca_pem"), credentials)


def settings_json(settings: EgressSettings) -> dict[str, Any]:
    """The settings as the config section they came from (EGRESS_RULE parses it back)."""
    document: dict[str, Any] = {
        "credentials": [
            {
                "origin": credential.origin.url,
                "header": credential.header,
                "value_env": credential.value_env,
                "path_prefix": credential.path_prefix,
            }
            for credential in settings.credentials
        ],
        "max_requests": settings.max_requests,
        "max_request_bytes": settings.max_request_bytes,
        "max_response_bytes": settings.max_response_bytes,
        "request_timeout_ms": settings.request_timeout_ms,
        "policy_timeout_ms": settings.policy_timeout_ms,
        "max_redirects": settings.max_redirects,
    }
    if settings.policy_file is not None:
        document["policy_file"] = settings.policy_file
    if settings.opa_url is not None:
        document["opa_url"] = settings.opa_url.url
    if settings.ca_file is not None:
        document["ca_file"] = settings.ca_file
    return document


def prepare_egress(
    settings: EgressSettings, environ: Mapping[str, str], own_credentials: Iterable[Secret]
) -> EgressHandoff:
    """Load and check everything (module doc); InvalidConfig lists every problem."""
    problems: list[tuple[str, str]] = []
    source = None
    if settings.policy_file is not None:
        try:
            source = _read_text(settings.policy_file, POLICY_BYTES_MAX)
            RegoPolicy.load(source, settings.policy_file)
        except PolicyLoadError as exc:
            problems.append(("egress.policy_file", f"the policy does not load: {exc}"))
    elif settings.opa_url is not None:
        parse_origin(settings.opa_url.url)  # parsed already; a cheap guard for hand-built ones
    ca_pem = None
    if settings.ca_file is not None:
        try:
            ca_pem = _read_text(settings.ca_file, CA_FILE_BYTES_MAX)
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=ca_pem)
        except PolicyLoadError as exc:
            problems.append(("egress.ca_file", str(exc)))
        except (ssl.SSLError, ValueError) as exc:
            problems.append(
                ("egress.ca_file", f"{settings.ca_file}: not a PEM certificate bundle ({exc})")
            )
    try:
        credentials = resolve_egress_credentials(settings.credentials, environ, own_credentials)
    except InvalidConfig as exc:
        problems.extend(exc.problems)
        credentials = ()
    if problems:
        raise InvalidConfig(problems)
    return EgressHandoff(settings, source, ca_pem, credentials)


def _read_text(path: str, bytes_max: int) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(bytes_max + 1)
    except OSError as exc:
        raise PolicyLoadError(path, f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > bytes_max:
        raise PolicyLoadError(path, f"is larger than {bytes_max} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyLoadError(path, f"is not UTF-8 ({exc.reason} at byte {exc.start})") from None
