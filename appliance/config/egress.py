"""The worker config's ``egress`` section (issue 32): what opens ``fetch()`` to scripts.

Theory of operation: without an ``egress`` section scripts have no ``fetch`` at all. With one,
every request is decided by exactly one policy — a Rego module the worker evaluates itself
(``policy_file``) or an external OPA server's data API (``opa_url``) — and bounded by the limits
below. ``credentials`` name environment variables whose values the worker attaches to matching
requests; the values are resolved at start-up (appliance/egress/handoff.py), never here, so a
parsed config holds no secret and may be compared, printed and logged.

Paths (``policy_file``, ``ca_file``) are relative to the config file's directory; a config that
came from ``MCP_SCHEDULED_WORKER_CONFIG`` has no directory, so it must give absolute paths
(``resolve_egress_paths``). Every limit is a named constant with its range, checked at the
boundary by tests/config/test_egress_config.py.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from appliance.config.common import ENV_NAME
from appliance.config.urls import Origin, origin_rule
from appliance.core.errors import InvalidConfig
from appliance.core.schema import (
    CrossCheck,
    Custom,
    Field,
    Integer,
    ListOf,
    Obj,
    Problems,
    Text,
    join,
    show,
)

KIB: Final = 1024
MIB: Final = 1024 * KIB

MAX_REQUESTS_DEFAULT: Final = 32
MAX_REQUESTS_RANGE: Final = (1, 256)  # every request is a record in the attempt's report
MAX_REQUEST_BYTES_DEFAULT: Final = 256 * KIB
MAX_REQUEST_BYTES_RANGE: Final = (0, 16 * MIB)
MAX_RESPONSE_BYTES_DEFAULT: Final = 1 * MIB
MAX_RESPONSE_BYTES_RANGE: Final = (0, 64 * MIB)  # the body is handed to the script's V8 heap
REQUEST_TIMEOUT_MS_DEFAULT: Final = 30_000
REQUEST_TIMEOUT_MS_RANGE: Final = (100, 600_000)
POLICY_TIMEOUT_MS_DEFAULT: Final = 1_000
POLICY_TIMEOUT_MS_RANGE: Final = (10, 60_000)
MAX_REDIRECTS_DEFAULT: Final = 5
MAX_REDIRECTS_RANGE: Final = (0, 20)
CREDENTIALS_MAX: Final = 32
PATH_PREFIX_BYTES_MAX: Final = 1024
HEADER_NAME_BYTES_MAX: Final = 128
FILE_PATH_BYTES_MAX: Final = 4096

# RFC 9110 token characters: what a header name may be made of.
HEADER_NAME_PATTERN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Headers a credential may never set: the framing and routing of the request itself, and the
# fencing headers the worker always sends (a credential cannot pose as them).
CREDENTIAL_HEADERS_REFUSED: Final = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "expect",
        "idempotency-key",
        "appliance-invocation",
        "appliance-ownership-epoch",
    }
)
_PATH_PREFIX: Final = re.compile(r"/[\x21-\x7e]*")
_DOT_SEGMENT: Final = re.compile(r"(^|/)(\.|%2e){1,2}(/|$)", re.IGNORECASE)


@dataclass(frozen=True)
class CredentialRule:
    """One credential the worker attaches: ``header: <value of value_env>`` on requests to
    exactly ``origin`` whose path starts with ``path_prefix`` at a segment boundary."""

    origin: Origin
    header: str  # lower-case
    value_env: str
    path_prefix: str = "/"

    @property
    def name(self) -> str:
        """How the policy input, the records and the logs name it: never by its value."""
        return self.value_env


@dataclass(frozen=True)
class EgressSettings:
    policy_file: str | None = None
    opa_url: Origin | None = None
    credentials: tuple[CredentialRule, ...] = ()
    max_requests: int = MAX_REQUESTS_DEFAULT
    max_request_bytes: int = MAX_REQUEST_BYTES_DEFAULT
    max_response_bytes: int = MAX_RESPONSE_BYTES_DEFAULT
    request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT
    policy_timeout_ms: int = POLICY_TIMEOUT_MS_DEFAULT
    max_redirects: int = MAX_REDIRECTS_DEFAULT
    ca_file: str | None = None  # PEM bundle trusted instead of the system's roots


def _header_name(value: object, path: str, problems: Problems) -> Any:
    if not isinstance(value, str) or not value:
        return problems.add(path, f"must be a header name, got {show(value)}")
    if len(value.encode("utf-8", "replace")) > HEADER_NAME_BYTES_MAX:
        return problems.add(path, f"must be at most {HEADER_NAME_BYTES_MAX} bytes")
    if not HEADER_NAME_PATTERN.fullmatch(value):
        return problems.add(path, f"must be an HTTP header name (a token), got {show(value)}")
    lowered = value.lower()
    if lowered in CREDENTIAL_HEADERS_REFUSED or lowered.startswith("proxy-"):
        return problems.add(path, f"{show(value)} cannot carry a credential")
    return lowered


def _path_prefix(value: object, path: str, problems: Problems) -> Any:
    if not isinstance(value, str):
        return problems.add(path, f"must be a path string, got {show(value)}")
    if len(value.encode("utf-8", "replace")) > PATH_PREFIX_BYTES_MAX:
        return problems.add(path, f"must be at most {PATH_PREFIX_BYTES_MAX} bytes")
    if not _PATH_PREFIX.fullmatch(value):
        return problems.add(
            path, f"must start with '/' and hold visible ASCII only, got {show(value)}"
        )
    if "?" in value or "#" in value:
        return problems.add(path, "must not hold a query or fragment")
    if _DOT_SEGMENT.search(value):
        return problems.add(path, "must not hold '.' or '..' segments")
    return value


CREDENTIAL_RULE: Final = Obj(
    fields={
        "origin": Field(Custom(origin_rule), doc="exact scheme://host[:port]"),
        "header": Field(Custom(_header_name), doc="the header the worker sets"),
        "value_env": Field(ENV_NAME, doc="the variable holding the header's value"),
        "path_prefix": Field(Custom(_path_prefix), required=False, default="/"),
    },
    build=CredentialRule,
)


def _exactly_one_policy(values: dict[str, Any], path: str, problems: Problems) -> None:
    given = [name for name in ("policy_file", "opa_url") if values[name] is not None]
    if len(given) != 1:
        problems.add(
            path or "egress",
            "must name exactly one policy: policy_file (a Rego module) or opa_url (an OPA "
            f"server), got {' and '.join(given) if given else 'neither'}",
        )


def _credential_identity(rule: CredentialRule) -> tuple[Origin, str, str]:
    return (rule.origin, rule.path_prefix, rule.header)


FILE_PATH: Final = Text(FILE_PATH_BYTES_MAX, 1, re.compile(r"[^\x00]+"), "a path without NUL bytes")


def _between(bounds: tuple[int, int], default: int) -> Field:
    return Field(Integer(*bounds), required=False, default=default)


EGRESS_RULE: Final = Obj(
    fields={
        "policy_file": Field(FILE_PATH, required=False, default=None),
        "opa_url": Field(Custom(origin_rule), required=False, default=None),
        "credentials": Field(
            ListOf(
                CREDENTIAL_RULE,
                max_items=CREDENTIALS_MAX,
                unique=_credential_identity,
                unique_says="the same origin, path_prefix and header as",
            ),
            required=False,
            default=(),
        ),
        "max_requests": _between(MAX_REQUESTS_RANGE, MAX_REQUESTS_DEFAULT),
        "max_request_bytes": _between(MAX_REQUEST_BYTES_RANGE, MAX_REQUEST_BYTES_DEFAULT),
        "max_response_bytes": _between(MAX_RESPONSE_BYTES_RANGE, MAX_RESPONSE_BYTES_DEFAULT),
        "request_timeout_ms": _between(REQUEST_TIMEOUT_MS_RANGE, REQUEST_TIMEOUT_MS_DEFAULT),
        "policy_timeout_ms": _between(POLICY_TIMEOUT_MS_RANGE, POLICY_TIMEOUT_MS_DEFAULT),
        "max_redirects": _between(MAX_REDIRECTS_RANGE, MAX_REDIRECTS_DEFAULT),
        "ca_file": Field(FILE_PATH, required=False, default=None),
    },
    build=EgressSettings,
    checks=(CrossCheck(("policy_file", "opa_url"), _exactly_one_policy),),
)


def resolve_egress_paths(
    settings: EgressSettings, config_path: str | Path | None
) -> EgressSettings:
    """``policy_file`` and ``ca_file`` made absolute against the config file's directory;
    InvalidConfig when a path is relative and there is no file to be relative to."""
    problems: list[tuple[str, str]] = []
    resolved: dict[str, str] = {}
    for name in ("policy_file", "ca_file"):
        value = getattr(settings, name)
        if value is None or Path(value).is_absolute():
            continue
        if config_path is None:
            problems.append(
                (
                    join("egress", name),
                    "must be an absolute path when the config comes from "
                    f"MCP_SCHEDULED_WORKER_CONFIG (there is no config file to be relative to), "
                    f"got {show(value)}",
                )
            )
            continue
        resolved[name] = str(Path(config_path).resolve().parent / value)
    if problems:
        raise InvalidConfig(problems)
    return dataclasses.replace(settings, **resolved) if resolved else settings
