"""``HttpClient``: the one outgoing HTTP/1.1 client (Raft peers, runner → worker → admission).

Theory of operation. Safety upstream depends on knowing whether a request may have reached the
server, so every call ends in exactly one of three outcomes:

- ``ConnectFailed`` — definite: the connection could not be established (refused, DNS failure,
  connect timeout, TLS handshake or certificate failure). Not one byte of the request was sent.
- ``AmbiguousSend`` — the connection was up and the request may have been sent and even acted on:
  reset, EOF before a complete response, read timeout, a malformed or oversized response.
- ``Response`` — a complete response (any status; 3xx is returned as is, redirects are NEVER
  followed), with its body bounded by ``response_bytes_max``.

The client NEVER retries on its own, including the classic "stale keep-alive" retry: a pooled
connection that turns out to be dead after the request was written is ``AmbiguousSend``, never a
silent second send. To keep that rare, a pooled connection is only reused if it has been idle for
less than ``idle_ms_max`` (shorter than the servers' keep-alive timeout) and a zero-timeout poll
shows nothing readable on it (a peer that closed it leaves an EOF to read); otherwise it is
discarded BEFORE anything is written, and a new connection is made — which is not a retry, as
nothing had been sent. Callers for whom "the request certainly never left" must be provable (the
worker's permit request) pass ``fresh_connection=True``: a new connection for that one request,
closed afterwards, so a failure to connect is always ``ConnectFailed``.

Connect and read timeouts are separate. The connect timeout bounds TCP connect plus the TLS
handshake (DNS resolution is the system resolver's and is not bounded by it); the read timeout
bounds each wait for response bytes. HTTPS verifies certificates with the default context unless
the caller passes its own ``ssl_context``. ``http.client`` is told not to reconnect by itself
(``auto_open = 0``) once we have connected, so no hidden reconnect can hide a resend.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from appliance.http.polling import STALE_EVENTS, has_events
from appliance.secret import Secret

log = logging.getLogger("appliance.http.client")

KiB = 1024
MiB = 1024 * KiB
_READ_CHUNK_BYTES = 64 * KiB


class ClientError(Exception):
    """Base of the client's outcomes that are not a response."""

    def __init__(self, origin: str, reason: str) -> None:
        self.origin = origin
        self.reason = reason
        super().__init__(f"{origin}: {reason}")


class ConnectFailed(ClientError):
    """Definite: no connection was established, the request was never sent."""


class AmbiguousSend(ClientError):
    """The request may have been received (and acted on): never treat as "not sent"."""


class ResponseTooLarge(AmbiguousSend):
    """The server answered, but the body exceeds ``response_bytes_max``: its content is unknown."""


class InvalidUrl(ValueError):
    """A URL this client refuses to use (scheme, credentials, fragment)."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        for key, value in self.headers:
            if key.lower() == wanted:
                return value
        return None

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self) -> str:
        return f"Response(status={self.status}, body_bytes={len(self.body)})"


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def split_url(url: str) -> tuple[Origin, str]:
    """(origin, path with query) of an http(s) URL; refuses credentials and fragments."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise InvalidUrl("URL scheme must be http or https")
    if parts.username is not None or parts.password is not None:
        raise InvalidUrl("URL must not embed credentials")
    if parts.fragment:
        raise InvalidUrl("URL must not have a fragment")
    if not parts.hostname:
        raise InvalidUrl("URL has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InvalidUrl("URL port is not valid") from None
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return Origin(parts.scheme, parts.hostname, port), path


@dataclass
class _Idle:
    conn: http.client.HTTPConnection
    since_s: float


def _is_stale(conn: http.client.HTTPConnection) -> bool:
    """True if the peer closed (EOF pending) or sent unsolicited bytes; both mean: do not reuse."""
    sock = conn.sock
    if sock is None:
        return True
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    return has_events(sock, STALE_EVENTS)


class HttpClient:
    """A pooled HTTP/1.1 client with precise outcomes (see module doc). Thread-safe."""

    def __init__(
        self,
        *,
        connect_timeout_ms: int = 2_000,
        read_timeout_ms: int = 10_000,
        response_bytes_max: int = 1 * MiB,
        idle_connections_per_origin_max: int = 4,
        idle_ms_max: int = 30_000,
        ssl_context: ssl.SSLContext | None = None,
        user_agent: str = "appliance",
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if connect_timeout_ms <= 0 or read_timeout_ms <= 0:
            raise ValueError("timeouts must be positive")
        if idle_connections_per_origin_max < 0:
            raise ValueError("idle_connections_per_origin_max must be >= 0")
        self.connect_timeout_ms = connect_timeout_ms
        self.read_timeout_ms = read_timeout_ms
        self.response_bytes_max = response_bytes_max
        self.idle_connections_per_origin_max = idle_connections_per_origin_max
        self.idle_ms_max = idle_ms_max
        self._ssl_context = ssl_context
        self._user_agent = user_agent
        self._monotonic = monotonic
        self._idle: dict[Origin, deque[_Idle]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.connections_opened = 0  # for tests and metrics: new TCP connections made

    # -- pool ------------------------------------------------------------------------------------

    def _take_idle(self, origin: Origin) -> http.client.HTTPConnection | None:
        now_s = self._monotonic()
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                if not idle:
                    return None
                entry = idle.pop()  # most recently used first: the warmest connection
            if (now_s - entry.since_s) * 1000 < self.idle_ms_max and not _is_stale(entry.conn):
                return entry.conn
            entry.conn.close()  # discarded before anything was written: not a retry

    def _give_back(self, origin: Origin, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(origin, deque())
            if not self._closed and len(idle) < self.idle_connections_per_origin_max:
                idle.append(_Idle(conn, self._monotonic()))
                return
        conn.close()

    def idle_connection_count(self, origin_url: str) -> int:
        origin, _ = split_url(origin_url)
        with self._lock:
            return len(self._idle.get(origin, ()))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            entries = [entry for idle in self._idle.values() for entry in idle]
            self._idle.clear()
        for entry in entries:
            entry.conn.close()

    # -- requests --------------------------------------------------------------------------------

    def _connect(self, origin: Origin, connect_timeout_ms: int) -> http.client.HTTPConnection:
        timeout_s = connect_timeout_ms / 1000
        conn: http.client.HTTPConnection
        if origin.scheme == "https":
            context = self._ssl_context or ssl.create_default_context()
            conn = http.client.HTTPSConnection(
                origin.host, origin.port, timeout=timeout_s, context=context
            )
        else:
            conn = http.client.HTTPConnection(origin.host, origin.port, timeout=timeout_s)
        try:
            conn.connect()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ConnectFailed(str(origin), describe_connect_error(exc)) from None
        conn.auto_open = 0  # http.client must never reconnect (and resend) on its own
        with self._lock:
            self.connections_opened += 1
        return conn

    def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        bearer: Secret | str | None = None,
        fresh_connection: bool = False,
        connect_timeout_ms: int | None = None,
        read_timeout_ms: int | None = None,
        response_bytes_max: int | None = None,
    ) -> Response:
        """One request: its ``Response``, or raise ``ConnectFailed`` / ``AmbiguousSend``."""
        origin, path = split_url(url)
        if self._closed:
            raise ConnectFailed(str(origin), "client is closed")
        cap = self.response_bytes_max if response_bytes_max is None else response_bytes_max
        read_s = (self.read_timeout_ms if read_timeout_ms is None else read_timeout_ms) / 1000
        conn = None if fresh_connection else self._take_idle(origin)
        if conn is None:
            conn = self._connect(origin, connect_timeout_ms or self.connect_timeout_ms)
        keep = False
        try:
            sock = conn.sock
            if sock is None:
                raise AmbiguousSend(str(origin), "connection closed before sending")
            sock.settimeout(read_s)
            all_headers = {"User-Agent": self._user_agent}
            if fresh_connection:
                all_headers["Connection"] = "close"
            if headers:
                all_headers.update(headers)
            if bearer is not None:
                token = bearer.reveal() if isinstance(bearer, Secret) else bearer
                all_headers["Authorization"] = f"Bearer {token}"
            if body is not None:
                all_headers["Content-Length"] = str(len(body))
            try:
                conn.request(method, path, body=body, headers=all_headers)
                raw = conn.getresponse()
                data = _read_capped(raw, cap, str(origin))
            except ClientError:
                raise
            except TimeoutError:
                raise AmbiguousSend(str(origin), "read timeout waiting for the response") from None
            except (OSError, http.client.HTTPException) as exc:
                raise AmbiguousSend(str(origin), _describe_send_error(exc)) from None
            keep = not fresh_connection and not raw.will_close and raw.isclosed()
            return Response(raw.status, tuple(raw.getheaders()), data)
        finally:
            if keep:
                self._give_back(origin, conn)
            else:
                conn.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, url: str, **kwargs: Any) -> Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, body: bytes, **kwargs: Any) -> Response:
        return self.request("POST", url, body=body, **kwargs)

    def __repr__(self) -> str:
        return (
            f"HttpClient(connect_timeout_ms={self.connect_timeout_ms}, "
            f"read_timeout_ms={self.read_timeout_ms})"
        )


def _read_capped(raw: http.client.HTTPResponse, cap: int, origin: str) -> bytes:
    declared = raw.length  # None for chunked / until-close bodies
    if declared is not None and declared > cap:
        raise ResponseTooLarge(origin, f"response body of {declared} bytes exceeds {cap}")
    if declared is not None:
        data = raw.read()  # bounded by the check above; closes the response when complete
        if len(data) != declared:
            raise AmbiguousSend(origin, "connection closed in the middle of the response body")
        return data
    parts: list[bytes] = []
    received = 0
    while not raw.isclosed():
        chunk = raw.read(min(_READ_CHUNK_BYTES, cap + 1 - received))
        if not chunk:
            break
        received += len(chunk)
        if received > cap:
            raise ResponseTooLarge(origin, f"response body exceeds {cap} bytes")
        parts.append(chunk)
    return b"".join(parts)


def describe_connect_error(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "connect timeout"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host ({exc.strerror})"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate verification failed ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed ({exc.reason})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"connect failed ({exc.strerror})"
    return f"connect failed ({type(exc).__name__})"


def _describe_send_error(exc: BaseException) -> str:
    if isinstance(exc, http.client.RemoteDisconnected):
        return "connection closed before a complete response"
    if isinstance(exc, http.client.IncompleteRead):
        return "connection closed in the middle of the response body"
    if isinstance(exc, http.client.HTTPException):
        return f"malformed response ({type(exc).__name__})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"connection failed after connecting ({exc.strerror})"
    return f"connection failed after connecting ({type(exc).__name__})"
