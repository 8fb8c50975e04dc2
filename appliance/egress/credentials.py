"""Egress credentials: resolved once at start-up, matched per request, never shown.

Theory of operation: a credential is a header the worker attaches for the script (``Authorization:
Bearer …`` to one API), so the script can use an API without ever holding its secret. Its value
comes from a named environment variable of the worker, resolved at start-up and refused when it
is empty, too long, holds CR or LF (it would split the request: header injection) or any other
control character, or contains one of the worker's own credentials (an egress credential must
never carry the authority to reach the worker or the admission route). Values are held as
``Secret`` (appliance/secret.py): they never print.

Matching is exact on the origin (scheme, host, port after normalization) and on the path at a
segment boundary: ``/hooks`` matches ``/hooks`` and ``/hooks/x``, not ``/hooksx``; ``/hooks/``
matches ``/hooks/`` and below. The path is the normalized one (target.py), and a path holding an
encoded slash or backslash (``%2f``, ``%5c``) never gets a credential: a server that decodes
them before routing could otherwise be walked out of the prefix. When several credentials set
the same header for one request, the longest prefix wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from appliance.config.egress import CredentialRule
from appliance.core.errors import InvalidConfig
from appliance.egress.target import Target
from appliance.secret import Secret

CREDENTIAL_VALUE_BYTES_MAX: Final = 4096
_VISIBLE_AND_SPACES: Final = re.compile(r"[\x20-\x7e\t]+")
_ENCODED_SEPARATOR: Final = re.compile(r"%2f|%5c", re.IGNORECASE)
# Pieces of a value at least this long are looked for in responses (an echo of "Bearer x" may
# show only "x"); shorter pieces would match by chance.
ECHO_PIECE_CHARS_MIN: Final = 8


@dataclass(frozen=True)
class EgressCredential:
    rule: CredentialRule
    value: Secret

    @property
    def name(self) -> str:
        return self.rule.name

    @property
    def header(self) -> str:
        return self.rule.header

    def applies_to(self, target: Target) -> bool:
        origin = self.rule.origin
        if (target.scheme, target.host, target.port) != (origin.scheme, origin.host, origin.port):
            return False
        if _ENCODED_SEPARATOR.search(target.path):
            return False
        return path_has_prefix(target.path, self.rule.path_prefix)

    def echo_pieces(self) -> tuple[bytes, ...]:
        """Byte strings whose presence in a response means the value was echoed back."""
        value = self.value.reveal()
        pieces = {value}
        pieces.update(part for part in value.split() if len(part) >= ECHO_PIECE_CHARS_MIN)
        return tuple(piece.encode("latin-1") for piece in pieces)


def path_has_prefix(path: str, prefix: str) -> bool:
    """``prefix`` matches ``path`` at a segment boundary."""
    if prefix == "/" or path == prefix:
        return True
    if not path.startswith(prefix):
        return False
    return prefix.endswith("/") or path[len(prefix)] == "/"


def for_request(
    credentials: Iterable[EgressCredential], target: Target
) -> dict[str, EgressCredential]:
    """header → the credential attached to a request to ``target`` (longest prefix wins)."""
    chosen: dict[str, EgressCredential] = {}
    for credential in credentials:
        if not credential.applies_to(target):
            continue
        current = chosen.get(credential.header)
        if current is None or len(credential.rule.path_prefix) > len(current.rule.path_prefix):
            chosen[credential.header] = credential
    return chosen


def resolve_egress_credentials(
    rules: Iterable[CredentialRule], environ: Mapping[str, str], own: Iterable[Secret]
) -> tuple[EgressCredential, ...]:
    """Every rule's value from the environment, checked; InvalidConfig lists every problem and
    never shows a value."""
    own_values = [secret.reveal() for secret in own]
    problems: list[tuple[str, str]] = []
    resolved: list[EgressCredential] = []
    for i, rule in enumerate(rules):
        path = f"egress.credentials[{i}].value_env"
        problem = _value_problem(rule.value_env, environ.get(rule.value_env), own_values)
        if problem is not None:
            problems.append((path, problem))
            continue
        resolved.append(EgressCredential(rule, Secret(environ[rule.value_env])))
    if problems:
        raise InvalidConfig(problems)
    return tuple(resolved)


def _value_problem(variable: str, value: str | None, own_values: list[str]) -> str | None:
    if value is None:
        return f"environment variable {variable} is not set"
    if value == "":
        return f"environment variable {variable} is empty"
    if "\r" in value or "\n" in value:
        return f"environment variable {variable} holds CR or LF (it would split the request)"
    if len(value.encode("utf-8", "surrogateescape")) > CREDENTIAL_VALUE_BYTES_MAX:
        return f"environment variable {variable} is longer than {CREDENTIAL_VALUE_BYTES_MAX} bytes"
    if not _VISIBLE_AND_SPACES.fullmatch(value):
        return (
            f"environment variable {variable} must hold visible ASCII and spaces only "
            "(no control characters)"
        )
    if value.strip() != value:
        return f"environment variable {variable} starts or ends with whitespace"
    if any(mine in value for mine in own_values):
        return (
            f"environment variable {variable} holds one of the worker's own credentials "
            "(bearer_env or admission_bearer_env): an egress credential must differ"
        )
    return None
