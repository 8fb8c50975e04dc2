"""Bearer authentication as Falcon middleware, decided before any byte of the body is touched.

Theory of operation. The surface is given a table of every credential the process knows, role →
token (e.g. ``{"operator": …, "recovery": …, "worker": …, "cluster": …}``), and the set of roles
it accepts. ``process_request`` runs before routing and before any responder, so the body stream is
never read for a refused request:

- no ``Authorization: Bearer <token>`` header, or a token matching no known credential → 401;
- a token matching a KNOWN role that this surface does not accept (a worker credential presented
  to management, a cluster credential presented to the worker…) → the same 401, so a leaked
  credential of one role never learns more than a guess would;
- otherwise the role is recorded in ``req.context.auth_role``.

A resource may narrow the accepted roles further with an ``accepted_roles`` attribute (a set of
role names, or a mapping HTTP method → set); ``process_resource`` enforces it, still before the
responder runs.

Comparison is constant time in the token value: both sides are hashed with SHA-256 (equal lengths,
so ``hmac.compare_digest`` does not even leak the length) and the presented token is compared
with EVERY known credential, without an early exit. Tokens never appear in logs, errors or reprs:
the 401 body is fixed text and the log line names only the role or the reason.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

import falcon

from appliance.http.errors import ApiError
from appliance.secret import Secret

log = logging.getLogger("appliance.http.auth")

AUTH_HEADER_BYTES_MAX = 8192
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
_WHITESPACE = re.compile(r"\s")  # the characters str.isspace() accepts


def _digest(token: str | bytes) -> bytes:
    raw = token.encode("utf-8", "surrogateescape") if isinstance(token, str) else token
    return hashlib.sha256(raw).digest()


class CredentialTable:
    """Known credentials by role; never shows a value (only role names) in its repr."""

    __slots__ = ("_digests",)

    def __init__(self, credentials: Mapping[str, Secret | str | None]) -> None:
        digests: list[tuple[str, bytes]] = []
        for role, credential in credentials.items():
            if credential is None:
                continue  # an optional role that is not configured (e.g. recovery)
            value = credential.reveal() if isinstance(credential, Secret) else credential
            if not isinstance(value, str) or not value:
                raise ValueError(f"credential for role {role!r} must be a non-empty string")
            digest = _digest(value)
            for other_role, other in digests:
                if hmac.compare_digest(other, digest):
                    raise ValueError(
                        f"the {role} credential equals the {other_role} credential; "
                        "every credential must differ"
                    )
            digests.append((role, digest))
        self._digests = tuple(digests)

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(role for role, _ in self._digests)

    def role_of(self, presented: str | bytes) -> str | None:
        """The role whose credential equals ``presented``, compared with every entry."""
        digest = _digest(presented)
        found: str | None = None
        for role, known in self._digests:
            if hmac.compare_digest(known, digest) and found is None:
                found = role
        return found

    def __repr__(self) -> str:
        return f"CredentialTable(roles={sorted(self.roles)!r})"


def parse_bearer(header: str | None) -> str | None:
    """The token of ``Bearer <token>`` (scheme case-insensitive), or None if absent/malformed."""
    if header is None or len(header) > AUTH_HEADER_BYTES_MAX:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or _WHITESPACE.search(token):
        return None
    return token


def unauthorized(message: str = "a valid bearer credential is required") -> ApiError:
    return ApiError(401, "unauthorized", message, headers=_CHALLENGE)


class BearerAuth:
    """Falcon middleware: 401 unless the bearer belongs to an accepted role (see module doc)."""

    def __init__(
        self,
        credentials: CredentialTable | Mapping[str, Secret | str | None],
        accepted_roles: Iterable[str],
        *,
        surface: str = "http",
    ) -> None:
        self._table = (
            credentials
            if isinstance(credentials, CredentialTable)
            else CredentialTable(credentials)
        )
        self._accepted = frozenset(accepted_roles)
        if not self._accepted:
            raise ValueError("a surface must accept at least one role")
        missing = self._accepted - self._table.roles
        if missing:
            # Not fatal (e.g. recovery omitted), but those roles can never authenticate.
            log.info("%s: roles %s have no configured credential", surface, sorted(missing))
        self._surface = surface

    def replace_credentials(
        self,
        credentials: CredentialTable | Mapping[str, Secret | str | None],
        accepted_roles: Iterable[str],
    ) -> None:
        """Swap the known credentials and the accepted roles at once (a fleet worker added with
        its own admission credential, issue 33). A request during the swap is checked against
        the old or the new set: at worst refused (401) once, never let through wrongly, since
        the new set only adds roles."""
        table = (
            credentials
            if isinstance(credentials, CredentialTable)
            else CredentialTable(credentials)
        )
        accepted = frozenset(accepted_roles)
        if not accepted:
            raise ValueError("a surface must accept at least one role")
        self._table, self._accepted = table, accepted

    def role_for(self, authorization: str | None, method: str, path: str) -> str | None:
        """The accepted role ``authorization`` proves, or None (the refusal is logged).

        Called by the server as soon as a request's headers are in (before any body byte is
        read: appliance.http.server) and again by ``process_request``."""
        token = parse_bearer(authorization)
        if token is None:
            log.info("%s: refused %s %s: no bearer credential", self._surface, method, path)
            return None
        role = self._table.role_of(token)
        if role is None:
            log.info("%s: refused %s %s: unknown credential", self._surface, method, path)
            return None
        if role not in self._accepted:
            log.warning(
                "%s: refused %s %s: a %s credential is not accepted here",
                self._surface,
                method,
                path,
                role,
            )
            return None
        return role

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        role = self.role_for(req.get_header("Authorization"), req.method, req.path)
        if role is None:
            raise unauthorized()
        req.context.auth_role = role

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if resource is None:
            return
        narrowed = _resource_roles(resource, req.method)
        if narrowed is not None and req.context.auth_role not in narrowed:
            log.warning(
                "%s: refused %s %s: a %s credential is not accepted on this route",
                self._surface,
                req.method,
                req.path,
                req.context.auth_role,
            )
            raise unauthorized()

    def __repr__(self) -> str:
        return f"BearerAuth(surface={self._surface!r}, accepted={sorted(self._accepted)!r})"


def _resource_roles(resource: Any, method: str) -> frozenset[str] | None:
    roles = getattr(resource, "accepted_roles", None)
    if roles is None:
        return None
    if isinstance(roles, Mapping):
        # A method not listed accepts nobody: new responders must be declared explicitly.
        return frozenset(roles.get(method, ()))
    return frozenset(roles)
