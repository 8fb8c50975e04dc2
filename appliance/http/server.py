"""``HttpServer``: one Falcon WSGI app served by waitress on host:port in a background thread.

Theory of operation. We bind the listening socket ourselves (so "address in use" is a clear
``AddressInUse`` raised by ``start()`` before any waitress thread exists, and port 0 yields the
bound ephemeral port) and hand it to waitress through its ``sockets`` adjustment. Waitress runs
its event loop in our thread and a bounded pool of ``threads`` workers; ``connection_limit``
bounds open connections (waitress stops accepting above it).

Waitress reads a whole request before the app runs. Its own body limit is set to the surface's
cap plus a small allowance for chunked framing (``waitress_body_limit``): anything beyond is
refused by waitress itself, without reading the body when the length is declared; the exact cap
is enforced by the app (appliance.http.limits). Waitress-level refusals (400 malformed request,
413, 431) are rendered in the same JSON error shape as the app's.

``stop()`` runs the close inside the event-loop thread (waitress's trigger), so the listening
socket and every connection are closed by their owner; then it joins the loop, stops the worker
threads, and only then closes the trigger pipe (closing it from inside its own wake-up races with
the thread still writing the wake-up byte: a real EBADF we hit in tests).
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher
from waitress.utilities import Error

from appliance.http.errors import error_body

log = logging.getLogger("appliance.http.server")

KiB = 1024
# Room for chunked framing above the app's exact cap (hex sizes and CRLFs; ~10 bytes per chunk).
CHUNK_FRAMING_ALLOWANCE_BYTES = 64 * KiB
HEADER_BYTES_MAX = 32 * KiB
LISTEN_BACKLOG = 1024  # waitress's default backlog
# After a refusal that closes the connection, what the client still sends is read and dropped
# (never parsed) for this long, so its pending writes do not turn our answer into a reset.
DRAIN_S = 2.0
DRAIN_BYTES_MAX = 64 * KiB * KiB


class AddressInUse(OSError):
    """The listen address is taken by another socket."""


class ServerError(RuntimeError):
    """The server could not be started or stopped as asked."""


def waitress_body_limit(body_bytes_max: int) -> int:
    """Waitress refuses a body of ``>= limit`` bytes; keep the cap itself (and framing) legal."""
    return body_bytes_max + CHUNK_FRAMING_ALLOWANCE_BYTES + 1


class _Unauthorized(Error):
    code = 401
    reason = "Unauthorized"


class _GatedParser(HTTPRequestParser):
    """Waitress's request parser with the bearer checked the moment the headers are complete.

    A refused request is complete at once (error 401): the declared length, chunking or
    ``Expect: 100-continue`` are ignored, no body byte is parsed, and the rest of the read that
    brought the headers is swallowed, so nothing after them is parsed as another request; the
    401 closes the connection (``_JsonErrorTask``).
    """

    def __init__(self, adj: Any, gate: Any) -> None:
        super().__init__(adj)
        self._gate = gate

    def received(self, data: bytes) -> int:
        headers_were_finished = self.headers_finished
        consumed = super().received(data)
        if (
            self._gate is None
            or headers_were_finished
            or not self.headers_finished
            or self.empty
            or (self.error is not None and self.error.code == 400)  # malformed: nothing to judge
        ):
            return consumed
        authorization = self.headers.get("AUTHORIZATION")
        if self._gate.role_for(authorization, self.command, self.path) is not None:
            return consumed
        self.error = _Unauthorized("a valid bearer credential is required")
        self.completed = True
        self.expect_continue = False
        self.body_rcv = None
        self.connection_close = True
        return len(data)


class _JsonErrorTask(ErrorTask):
    """Waitress's protocol-level refusals in the appliance's JSON error shape."""

    def execute(self) -> None:
        error = self.request.error
        server = self.channel.server
        code_by_status = {
            401: "unauthorized",
            413: "body_too_large",
            431: "headers_too_large",
            501: "not_implemented",
        }
        code = code_by_status.get(error.code, "bad_request")
        if error.code == 401:
            message = error.body
            self.response_headers.append(("WWW-Authenticate", "Bearer"))
        elif error.code == 413:
            message = f"request body exceeds {server.appliance_body_bytes_max} bytes"
        elif error.code == 431:
            message = f"request headers exceed {HEADER_BYTES_MAX} bytes"
        else:
            message = "malformed HTTP request"
        body = error_body(code, message, extra=server.appliance_error_extra)
        self.status = f"{error.code} {error.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.channel.drain_before_close = True
        self.content_length = len(body)
        self.write(body)


class _Channel(HTTPChannel):
    """Waitress's channel with the bearer gate and a draining close after a refusal.

    Closing a socket with unread bytes makes the kernel send a reset, which can destroy our
    answer before the client reads it (a client writing a body the server will not read is the
    usual case). So after a refusal the write side is shut down first, and whatever arrives is
    dropped unread until the client closes, ``DRAIN_S`` pass or ``DRAIN_BYTES_MAX`` came in.
    """

    error_task_class = _JsonErrorTask
    drain_before_close = False  # set by the error task
    _drain_deadline: float | None = None
    _drained_bytes = 0

    def parser_class(self, adj: Any) -> _GatedParser:  # waitress calls self.parser_class(adj)
        return _GatedParser(adj, self.server.appliance_gate)

    @property
    def draining(self) -> bool:
        return self._drain_deadline is not None

    def handle_close(self) -> None:
        if (
            self.drain_before_close
            and self._drain_deadline is None
            and self.socket is not None
            and not self.total_outbufs_len
        ):
            try:
                self.socket.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # already gone: close now
            else:
                self._drain_deadline = time.monotonic() + DRAIN_S
                self.will_close = False
                self.close_when_flushed = False
                return
        super().handle_close()

    def readable(self) -> bool:
        return True if self.draining else super().readable()

    def writable(self) -> bool:
        return False if self.draining else super().writable()

    def handle_read(self) -> None:
        if not self.draining:
            super().handle_read()
            return
        try:
            data = self.recv(self.adj.recv_bytes)  # EOF or a reset closes (handle_close)
        except OSError:
            data = b""
        self._drained_bytes += len(data)
        if data and self._drained_bytes <= DRAIN_BYTES_MAX and not self.drain_expired():
            return
        HTTPChannel.handle_close(self)

    def drain_expired(self, now: float | None = None) -> bool:
        deadline = self._drain_deadline
        return deadline is not None and (now or time.monotonic()) >= deadline


class _Server(TcpWSGIServer):
    """Waitress's TCP server with our channel and a per-second upkeep of its connections."""

    channel_class = _Channel
    appliance_gate: Any = None
    appliance_error_extra: Mapping[str, Any] = {}
    appliance_body_bytes_max = 0

    def maintenance(self, now: float) -> None:
        super().maintenance(now)
        mono = time.monotonic()
        for channel in list(self.active_channels.values()):
            if isinstance(channel, _Channel) and channel.drain_expired(mono):
                HTTPChannel.handle_close(channel)


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ServerError(f"cannot resolve listen host {host!r}: {exc.strerror}") from None
    family, socktype, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, socktype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(sockaddr)
        # Listen here too (waitress listens again, harmlessly): on Linux two SO_REUSEADDR sockets
        # may bind one port, and only listen() then reports the conflict.
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUse(
                exc.errno, f"cannot listen on {host}:{port}: the address is already in use"
            ) from None
        raise ServerError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


class HttpServer:
    """A started-on-demand waitress server for one WSGI app (see module doc)."""

    def __init__(
        self,
        app: Any,
        *,
        host: str,
        port: int,
        name: str,
        body_bytes_max: int,
        threads: int = 4,
        connection_limit: int = 64,
        channel_timeout_s: int = 120,
        memory_body_bytes_max: int = 512 * KiB,
        recv_bytes: int = 64 * KiB,
        stop_timeout_s: float = 5.0,
        error_extra: Mapping[str, Any] | None = None,
    ) -> None:
        if not 1 <= threads <= 64:
            raise ValueError("threads must be 1-64")
        if not 1 <= connection_limit <= 10_000:
            raise ValueError("connection_limit must be 1-10000")
        self._app = app
        self._host = host
        self._requested_port = port
        self.name = name
        self.body_bytes_max = body_bytes_max
        self._threads = threads
        self._connection_limit = connection_limit
        self._channel_timeout_s = channel_timeout_s
        self._memory_body_bytes_max = memory_body_bytes_max
        self._recv_bytes = recv_bytes
        self._stop_timeout_s = stop_timeout_s
        # The app's own error fields (create_app) unless the caller names them.
        app_extra = getattr(app, "error_extra", None) or {}
        self._error_extra = dict(error_extra) if error_extra else dict(app_extra)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self._lock = threading.Lock()

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServerError(f"{self.name}: not started")
        return self._port

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> HttpServer:
        with self._lock:
            if self._server is not None:
                raise ServerError(f"{self.name}: already started")
            sock = _bind(self._host, self._requested_port)
            try:
                adj = Adjustments(
                    sockets=[sock],
                    threads=self._threads,
                    connection_limit=self._connection_limit,
                    channel_timeout=self._channel_timeout_s,
                    max_request_body_size=waitress_body_limit(self.body_bytes_max),
                    max_request_header_size=HEADER_BYTES_MAX,
                    inbuf_overflow=self._memory_body_bytes_max,
                    recv_bytes=self._recv_bytes,
                    expose_tracebacks=False,
                    clear_untrusted_proxy_headers=True,
                    ident="appliance",
                    asyncore_use_poll=True,  # select() fails past fd 1024
                    cleanup_interval=1,  # the upkeep (deadlines, draining) runs every second
                )
                dispatcher = ThreadedTaskDispatcher()
                dispatcher.set_thread_count(self._threads)
                server = _Server(
                    self._app,
                    {},
                    _sock=sock,
                    dispatcher=dispatcher,
                    adj=adj,
                    bind_socket=False,
                    sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()),
                )
            except Exception:
                sock.close()
                raise
            server.appliance_error_extra = self._error_extra
            server.appliance_body_bytes_max = self.body_bytes_max
            server.appliance_gate = getattr(self._app, "bearer_gate", None)
            self._server = server
            self._port = int(sock.getsockname()[1])
            self._thread = threading.Thread(
                target=self._serve, name=f"http-{self.name}", daemon=True
            )
            self._thread.start()
        log.info("%s listening on %s:%d", self.name, self._host, self._port)
        return self

    def _serve(self) -> None:
        server = self._server
        try:
            server.run()
        except Exception:
            log.exception("%s: server loop failed", self.name)

    def stop(self) -> None:
        """Close the listener and all connections, stop worker threads, join. Idempotent."""
        with self._lock:
            server, thread = self._server, self._thread
            if server is None or thread is None:
                return
            self._server = None
        socket_map = server._map
        trigger = server.trigger

        def close_in_loop() -> None:
            # The trigger itself is only unregistered here, not closed: the thread that pulled it
            # may still be writing its wake-up byte. It is closed below, once the loop is gone.
            for dispatcher in list(socket_map.values()):
                if dispatcher is trigger:
                    continue
                try:
                    if dispatcher is server:
                        wasyncore.dispatcher.close(server)  # BaseWSGIServer.close shuts the trigger
                    else:
                        dispatcher.close()
                except Exception:  # keep closing the others: a stuck loop would be worse
                    log.exception("%s: error closing a connection during stop", self.name)
            trigger.del_channel()

        if thread.is_alive():
            # Runs in the loop thread; the loop exits once its map is empty.
            trigger.pull_trigger(close_in_loop)
            thread.join(self._stop_timeout_s)
        if thread.is_alive():
            raise ServerError(f"{self.name}: event loop did not stop in {self._stop_timeout_s}s")
        wasyncore.close_all(socket_map, ignore_all=True)  # no-op unless the loop had died
        # Workers finish their current task (they may still pull the trigger), then the trigger.
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=self._stop_timeout_s)
        trigger.close()
        log.info("%s stopped", self.name)

    def __enter__(self) -> HttpServer:
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"HttpServer(name={self.name!r}, host={self._host!r}, port={self._port!r})"
