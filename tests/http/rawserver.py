"""A tiny raw-socket HTTP peer for client classification tests: it does exactly what a test says
(answer, hang, close) and counts accepted connections and received requests."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable

# behaviour(conn, request_bytes, request_number) -> keep the connection open?
Behaviour = Callable[[socket.socket, bytes, int], bool]


def read_request(conn: socket.socket) -> bytes:
    """Headers plus a Content-Length body; b"" if the peer closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest


def ok_response(body: bytes = b"ok", *, keep_alive: bool = True, status: str = "200 OK") -> bytes:
    connection = "keep-alive" if keep_alive else "close"
    return (
        f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: {connection}\r\n\r\n"
    ).encode() + body


class RawServer:
    def __init__(self, behaviour: Behaviour, *, tls: ssl.SSLContext | None = None) -> None:
        self._behaviour = behaviour
        self._tls = tls
        self.handshake_failures = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self.accepts = 0
        self.requests: list[bytes] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.accepts += 1
                self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        if self._tls is not None:
            try:
                wrapped = self._tls.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError):
                with self._lock:
                    self.handshake_failures += 1
                conn.close()
                return
            with self._lock:
                self._conns.append(wrapped)  # the raw socket is detached by wrap_socket
            conn = wrapped
        try:
            while not self._stop.is_set():
                request = read_request(conn)
                if not request:
                    return
                with self._lock:
                    self.requests.append(request)
                    number = len(self.requests)
                if not self._behaviour(conn, request, number):
                    return
        except OSError:
            return
        finally:
            conn.close()

    def wait_connections_closed(self, timeout_s: float = 5.0) -> None:
        """Join every connection handler that has returned (its socket is closed)."""
        for thread in list(self._threads):
            thread.join(timeout_s)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._acceptor.join(5)
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
