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
import resource
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from typing import Any

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.task import ThreadedTaskDispatcher

from appliance.http.connections import ConnectionPolicy, ListenerCounts, ListenerServer
from appliance.http.gate import HEADER_BYTES_MAX

log = logging.getLogger("appliance.http.server")

KiB = 1024
# Room for chunked framing above the app's exact cap (hex sizes and CRLFs; ~10 bytes per chunk).
CHUNK_FRAMING_ALLOWANCE_BYTES = 64 * KiB
LISTEN_BACKLOG = 1024  # waitress's default backlog
CONNECTION_LIMIT_DEFAULT = 512  # per listener; raise_open_files_limit leaves room for several
OPEN_FILES_TARGET = 65_536

__all__ = ["HEADER_BYTES_MAX", "AddressInUse", "HttpServer", "ServerError"]


class AddressInUse(OSError):
    """The listen address is taken by another socket."""


class ServerError(RuntimeError):
    """The server could not be started or stopped as asked."""


def waitress_body_limit(body_bytes_max: int) -> int:
    """Waitress refuses a body of ``>= limit`` bytes; keep the cap itself (and framing) legal."""
    return body_bytes_max + CHUNK_FRAMING_ALLOWANCE_BYTES + 1


def raise_open_files_limit(target: int = OPEN_FILES_TARGET) -> int:
    """Raise the soft RLIMIT_NOFILE towards ``target`` (never above the hard limit, never down).

    The usual soft limit is 1,024; five listeners of hundreds of connections each need more.
    Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = target if hard == resource.RLIM_INFINITY else min(target, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, wanted, exc)
    return soft


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

    @property
    def app(self) -> Any:
        """The WSGI app served (its ``bearer_gate`` may be given new credentials)."""
        return self._app

    def __init__(
        self,
        app: Any,
        *,
        host: str,
        port: int,
        name: str,
        body_bytes_max: int,
        threads: int = 4,
        connection_limit: int = CONNECTION_LIMIT_DEFAULT,
        policy: ConnectionPolicy | None = None,
        ssl_context: ssl.SSLContext | None = None,
        peer_check: Callable[[dict[str, Any] | None], bool] | None = None,
        channel_timeout_s: int = 120,
        memory_body_bytes_max: int = 512 * KiB,
        recv_bytes: int = 64 * KiB,
        stop_timeout_s: float = 5.0,
        error_extra: Mapping[str, Any] | None = None,
        server_class: type[ListenerServer] = ListenerServer,
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
        self.policy = policy or ConnectionPolicy()
        self.ssl_context = ssl_context
        self._peer_check = peer_check
        self._channel_timeout_s = channel_timeout_s
        self._memory_body_bytes_max = memory_body_bytes_max
        self._recv_bytes = recv_bytes
        self._stop_timeout_s = stop_timeout_s
        # A surface may serve with a subclass (the web console's hands event streams over to
        # its own pusher: appliance/console/takeover.py).
        self._server_class = server_class
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
    def connection_counts(self) -> ListenerCounts:
        """What the connection upkeep has closed since start (appliance.http.connections)."""
        if self._server is None:
            raise ServerError(f"{self.name}: not started")
        return self._server.counts

    @property
    def listening_fd(self) -> int:
        if self._server is None:
            raise ServerError(f"{self.name}: not started")
        return int(self._server.socket.fileno())

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> HttpServer:
        with self._lock:
            if self._server is not None:
                raise ServerError(f"{self.name}: already started")
            raise_open_files_limit()
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
                server = self._server_class(
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
            server.appliance_name = self.name
            server.policy = self.policy
            server.ssl_context = self.ssl_context
            server.peer_check = self._peer_check
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
