"""``PeerConnection``: one kept-alive HTTP/1.1 connection to one peer, for a hot request path.

Why not ``HttpClient``: ``http.client`` assembles each request through several calls and parses
every response's headers with the ``email`` package. On the Raft pipeline — a small binary POST
and a small answer, thousands per second — that costs about 180 µs of CPU per request, against
about 35 µs for writing the request as one buffer and reading the status line, the headers and
a Content-Length body straight from the socket (measured on loopback against waitress).

The rules are ``HttpClient``'s: keep-alive; redirects are never followed (a 3xx is just a
status); nothing is retried — any failure closes the connection and the next request opens a
new one; bounded connect and read timeouts; a response size cap; the same outcomes
(``ConnectFailed`` when nothing was sent, ``AmbiguousSend`` when the request may have arrived).
An idle connection the peer closed (or wrote to) is detected before reuse and replaced, so a
request is never written into a dead connection.

TLS (``ssl_context``): the handshake is part of connecting, bounded by the connect timeout, and a
failed one — or a verified certificate that does not name ``peer_identity``, the voter we meant
to reach (appliance.http.tls) — is ``ConnectFailed``: nothing was written.

The scope is narrow on purpose: ``http`` or ``https``, responses framed by ``Content-Length`` (or
bodiless by status); a chunked or unframed response is refused as ``AmbiguousSend`` and the
connection closed. One request at a time, used by one thread at a time: ``begin`` (or
``begin_nowait``, which never blocks and never connects) writes a request, ``finish`` reads its
response — possibly on another thread, handed over under the owner's lock.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Mapping

from appliance.http.client import (
    AmbiguousSend,
    ConnectFailed,
    Response,
    ResponseTooLarge,
    describe_connect_error,
)
from appliance.http.polling import STALE_EVENTS, has_events
from appliance.http.tls import check_voter
from appliance.secret import Secret

HEAD_BYTES_MAX = 16 * 1024  # status line + headers of a response
RECV_BYTES = 64 * 1024
_BODILESS = (204, 304)


class PeerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        connect_timeout_ms: int,
        read_timeout_ms: int,
        response_bytes_max: int,
        user_agent: str = "appliance",
        ssl_context: ssl.SSLContext | None = None,
        peer_identity: str | None = None,
    ) -> None:
        if connect_timeout_ms <= 0 or read_timeout_ms <= 0:
            raise ValueError("timeouts must be positive")
        scheme = "https" if ssl_context is not None else "http"
        self.origin = f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"
        self._ssl_context = ssl_context
        self._peer_identity = peer_identity
        self._address = (host, port)
        self._host_header = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
        self._connect_s = connect_timeout_ms / 1000
        self._read_s = read_timeout_ms / 1000
        self._response_bytes_max = response_bytes_max
        self._user_agent = user_agent
        self._sock: socket.socket | None = None
        self._buffer = bytearray()  # received bytes not yet consumed
        self._unsent = b""  # the part of a request a non-blocking send left behind
        self.connections_opened = 0  # for tests: new TCP connections made

    def wait_fileno(self) -> int | None:
        """The descriptor to poll for this connection's next bytes (an answer, or the peer's
        close); None when closed, or when a TLS layer already holds decrypted bytes (there is
        something to read now, which polling the descriptor would not show)."""
        sock = self._sock
        if sock is None or (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            return None
        return sock.fileno()

    @property
    def open(self) -> bool:
        return self._sock is not None

    def stale(self) -> bool:
        """The open connection was closed by the peer, or holds bytes nobody asked for."""
        sock = self._sock
        return sock is not None and self._is_stale(sock)

    @property
    def has_unsent(self) -> bool:
        """A non-blocking write left part of the request for ``finish`` to send."""
        return bool(self._unsent)

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._buffer.clear()
        self._unsent = b""
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def post(
        self,
        path: str,
        body: bytes,
        *,
        headers: Mapping[str, str] | None = None,
        bearer: Secret | str | None = None,
    ) -> Response:
        """One POST: its ``Response``, or raise ``ConnectFailed`` / ``AmbiguousSend``."""
        self.begin(path, body, headers=headers, bearer=bearer)
        return self.finish()

    def begin(
        self,
        path: str,
        body: bytes,
        *,
        headers: Mapping[str, str] | None = None,
        bearer: Secret | str | None = None,
    ) -> None:
        """Write a POST (connecting first if needed); ``finish`` reads its response."""
        request = self._request(path, body, headers, bearer)
        sock = self._usable_socket()
        try:
            sock.sendall(request)
        except OSError as exc:
            raise self._failed(exc) from None

    def begin_nowait(
        self,
        path: str,
        body: bytes,
        *,
        headers: Mapping[str, str] | None = None,
        bearer: Secret | str | None = None,
    ) -> bool:
        """Write a POST without blocking: False (nothing written) when that needs a new
        connection; otherwise one non-blocking send, the rest left for ``finish``."""
        sock = self._sock
        if sock is None or self._is_stale(sock):
            self.close()
            return False
        request = self._request(path, body, headers, bearer)
        try:
            sock.setblocking(False)
            try:
                sent = sock.send(request)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                sent = 0  # TLS: the same bytes are written again, from the start, by finish
            finally:
                sock.settimeout(self._read_s)
        except OSError as exc:
            raise self._failed(exc) from None
        self._unsent = request[sent:]
        return True

    def finish(self) -> Response:
        """The response to the request ``begin`` wrote (after sending what it left)."""
        sock = self._sock
        if sock is None:
            raise AmbiguousSend(self.origin, "connection closed before a complete response")
        try:
            if self._unsent:
                unsent, self._unsent = self._unsent, b""
                sock.sendall(unsent)
            response, keep = self._read_response(sock)
        except AmbiguousSend:
            self.close()
            raise
        except OSError as exc:
            raise self._failed(exc) from None
        if not keep:
            self.close()
        return response

    def _request(
        self,
        path: str,
        body: bytes,
        headers: Mapping[str, str] | None,
        bearer: Secret | str | None,
    ) -> bytes:
        lines = [
            f"POST {path} HTTP/1.1",
            f"Host: {self._host_header}",
            f"User-Agent: {self._user_agent}",
            f"Content-Length: {len(body)}",
        ]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if bearer is not None:
            token = bearer.reveal() if isinstance(bearer, Secret) else bearer
            lines.append(f"Authorization: Bearer {token}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    def _failed(self, exc: OSError) -> AmbiguousSend:
        """Close, and name the failure of a connection that may have carried the request."""
        self.close()
        if isinstance(exc, TimeoutError):
            return AmbiguousSend(self.origin, "read timeout waiting for the response")
        reason = exc.strerror or type(exc).__name__
        return AmbiguousSend(self.origin, f"connection failed after connecting ({reason})")

    # -- connection ----------------------------------------------------------------------------

    def _usable_socket(self) -> socket.socket:
        if self._sock is not None and self._is_stale(self._sock):
            self.close()  # discarded before anything was written: not a retry
        if self._sock is None:
            self._sock = self._connect()
        return self._sock

    def _is_stale(self, sock: socket.socket) -> bool:
        """The peer closed the idle connection, or sent bytes nobody asked for."""
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        return bool(self._buffer) or has_events(sock, STALE_EVENTS)

    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection(self._address, timeout=self._connect_s)
        except OSError as exc:
            raise ConnectFailed(self.origin, describe_connect_error(exc)) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ssl_context is not None:
            sock = self._handshake(sock)
        sock.settimeout(self._read_s)
        self.connections_opened += 1
        return sock

    def _handshake(self, sock: socket.socket) -> ssl.SSLSocket:
        context = self._ssl_context
        assert context is not None
        host = self._address[0]
        try:
            tls = context.wrap_socket(
                sock, server_hostname=host if context.check_hostname else None
            )  # the handshake runs here, under the connect timeout set on ``sock``
            if self._peer_identity is not None:
                check_voter(tls, self._peer_identity)
        except (ssl.SSLError, ssl.CertificateError, OSError) as exc:
            with contextlib.suppress(OSError):
                sock.close()
            reason = getattr(exc, "reason", None) or exc
            raise ConnectFailed(self.origin, f"TLS handshake failed ({reason})") from None
        return tls

    # -- response ------------------------------------------------------------------------------

    def _receive_more(self, sock: socket.socket) -> None:
        chunk = sock.recv(RECV_BYTES)
        if not chunk:
            raise AmbiguousSend(self.origin, "connection closed before a complete response")
        self._buffer += chunk

    def _read_response(self, sock: socket.socket) -> tuple[Response, bool]:
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > HEAD_BYTES_MAX:
                raise AmbiguousSend(self.origin, "malformed response (headers too long)")
            self._receive_more(sock)
        head = bytes(self._buffer[:end]).decode("latin-1")
        del self._buffer[: end + 4]
        status_line, *header_lines = head.split("\r\n")
        version, status = self._parse_status(status_line)
        headers: list[tuple[str, str]] = []
        for line in header_lines:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise AmbiguousSend(self.origin, "malformed response (bad header line)")
            headers.append((name, value.strip()))
        fields = {name.lower(): value for name, value in headers}
        if "transfer-encoding" in fields:
            raise AmbiguousSend(self.origin, "unsupported response framing (transfer-encoding)")
        length = 0
        if status not in _BODILESS:
            declared = fields.get("content-length")
            if declared is None or not declared.isdigit():
                raise AmbiguousSend(self.origin, "unsupported response framing (no length)")
            length = int(declared)
        if length > self._response_bytes_max:
            raise ResponseTooLarge(
                self.origin, f"response body of {length} bytes exceeds {self._response_bytes_max}"
            )
        while len(self._buffer) < length:
            self._receive_more(sock)
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        keep = version == "HTTP/1.1" and fields.get("connection", "").lower() != "close"
        return Response(status, tuple(headers), body), keep

    def _parse_status(self, line: str) -> tuple[str, int]:
        version, _, rest = line.partition(" ")
        code = rest[:3]
        if version not in ("HTTP/1.0", "HTTP/1.1") or not code.isdigit() or int(code) < 200:
            raise AmbiguousSend(self.origin, "malformed response (bad status line)")
        return version, int(code)
