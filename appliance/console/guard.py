"""Who may ask the console what: the header-time gate, the per-request identity, the headers.

Theory of operation, in the order a request meets it:

1. ``ConsoleGate.admits_headers`` runs in the listener's event loop as soon as a request's
   headers are in (appliance/http/gate.py), before any body byte is read. It lets through a
   ``GET``/``HEAD`` without a body (the app then answers the login page or a 401: nothing to
   read), the public ``POST /login`` (its small body carries the credential), and any request
   that carries the console's bearer or a signed, unexpired session cookie. Anything else is
   refused there with 401.
2. ``ConsoleGuard`` (Falcon middleware) refuses a ``Host`` that is not loopback (a page on a
   DNS name that resolves to 127.0.0.1 — DNS rebinding — must not reach the console), then
   decides the identity: ``Authorization: Bearer`` (only the console credential; any other
   credential of the voter, or an unknown one, is 401 — a bearer present is never followed by
   the cookie), else the session cookie (signed, unexpired and still open). Resources that are
   not ``public`` require one.
3. Every response carries the security headers: ``Content-Security-Policy: default-src 'self';
   frame-ancestors 'none'`` (no inline script or style, no asset from elsewhere, no framing),
   ``Referrer-Policy: no-referrer`` (a login nonce in a URL never leaves in a Referer),
   ``X-Content-Type-Options: nosniff`` and ``Cache-Control: no-store`` (pages hold state and
   output; the static files may be cached briefly).

Writes add the browser checks of ``actions.py``: the session's CSRF token and an ``Origin`` equal
to the console's own.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any, Final

import falcon

from appliance.console.sessions import COOKIE_NAME, Session, SessionBook
from appliance.http.auth import CredentialTable, parse_bearer

CSP: Final = "default-src 'self'; frame-ancestors 'none'"
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}
CONSOLE_ROLE: Final = "console"
COOKIE_HEADER_BYTES_MAX: Final = 4096


def cookie_value(header: str | None) -> str | None:
    """The console's session cookie from a ``Cookie`` header (None when absent or unreadable)."""
    if not header or len(header) > COOKIE_HEADER_BYTES_MAX:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return None
    morsel = jar.get(COOKIE_NAME)
    return None if morsel is None else morsel.value


def loopback_host(host_header: str | None) -> bool:
    """The ``Host`` names this machine's loopback: 127.0.0.0/8, ``[::1]`` or ``localhost``,
    any port (an SSH forward changes the port, never the name)."""
    if not host_header:
        return False
    host = host_header.strip()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return False
    else:
        name, _, port = host.partition(":")
        if port and not port.isdigit():
            return False
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Identity:
    via: str  # "bearer" or "cookie"
    session: Session | None  # the browser session (None for a script's bearer)


class ConsoleGate:
    """The listener's header-time check (see the module docstring, step 1)."""

    def __init__(
        self, table: CredentialTable, sessions: SessionBook, clock: Callable[[], float]
    ) -> None:
        self._table = table
        self._sessions = sessions
        self._clock = clock

    def admits_headers(self, headers: Mapping[str, str], method: str, path: str) -> bool:
        bodiless = not headers.get("CONTENT_LENGTH", "0").strip("0") and not headers.get(
            "TRANSFER_ENCODING"
        )
        if method in ("GET", "HEAD") and bodiless:
            return True
        if method == "POST" and path == "/login":
            return True
        authorization = headers.get("AUTHORIZATION")
        if authorization is not None:
            token = parse_bearer(authorization)
            return token is not None and self._table.role_of(token) == CONSOLE_ROLE
        cookie = cookie_value(headers.get("COOKIE"))
        return self._sessions.parse(cookie, self._clock()) is not None

    def role_for(self, authorization: str | None, method: str, path: str) -> str | None:
        # The plain bearer gate's interface, for callers that know only the header.
        token = parse_bearer(authorization)
        if token is not None and self._table.role_of(token) == CONSOLE_ROLE:
            return CONSOLE_ROLE
        return None


class ConsoleGuard:
    """Falcon middleware: loopback ``Host``, identity, security headers (module docstring)."""

    def __init__(
        self,
        table: CredentialTable,
        sessions: SessionBook,
        clock: Callable[[], float] = time.time,
        unauthenticated: Callable[[falcon.Request, falcon.Response], None] | None = None,
        *,
        tls: bool = False,
    ) -> None:
        self._tls = tls  # the console's own origin is https:// then
        self._table = table
        self._sessions = sessions
        self._clock = clock
        self._unauthenticated = unauthenticated

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.set_headers(SECURITY_HEADERS)
        resp.set_header("Cache-Control", "no-store")
        req.context.identity = None
        req.context.tls = self._tls
        if not loopback_host(req.get_header("Host")):
            raise falcon.HTTPError(
                falcon.HTTP_421, title="misdirected", description="the console answers loopback"
            )
        authorization = req.get_header("Authorization")
        if authorization is not None:
            token = parse_bearer(authorization)
            if token is not None and self._table.role_of(token) == CONSOLE_ROLE:
                req.context.identity = Identity("bearer", None)
            return  # a wrong bearer is refused by process_resource, never helped by a cookie
        session = self._sessions.verify(cookie_value(req.get_header("Cookie")), self._clock())
        if session is not None:
            req.context.identity = Identity("cookie", session)

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if resource is None or getattr(resource, "public", False):
            return
        if req.context.identity is None:
            if self._unauthenticated is not None:
                self._unauthenticated(req, resp)
                resp.complete = True
                return
            raise falcon.HTTPUnauthorized(title="unauthorized")
