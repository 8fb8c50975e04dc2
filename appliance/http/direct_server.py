"""``DirectServer``: an HTTP/1.1 listener whose connections are each served by their own thread.

Why not ``HttpServer`` (waitress) for the hot internal routes: waitress reads and parses every
request in its event-loop thread, hands it to a worker thread, and the worker wakes the loop
again to watch the connection once more. On the Raft cluster port that is three thread wake-ups
and two parsers per message; a follower took about nine context switches and 0.75 ms of CPU per
replicated entry, most of it in that machinery (docs/bench-raft.md, session 4). Here the thread
that owns a connection is blocked in ``recv`` on it: the kernel wakes exactly that thread when a
request arrives, and the same thread authenticates, reads, runs the handler (a plain function,
no WSGI environ, no framework objects) and writes the answer as one buffer. A kept-alive peer
connection therefore costs one wake-up per request.

The rules are the shared HTTP layer's (docs/http.md), enforced here by the connection thread:

- the bearer is checked (``BearerAuth.role_for``, constant time) the moment the headers are
  complete, before any body byte is read: a refusal is 401 whatever ``Content-Length``, chunking or
  ``Expect`` say; then the body cap (413: a declared length above it before reading, a chunked
  body the moment it grows past it);
- every refusal is in the surface's JSON error shape and closes the connection with a draining
  close (our write side shut first, what still arrives dropped unread for ``DRAIN_S``), so the
  client reads the answer rather than a reset; nothing after refused headers is parsed;
- a connection must deliver complete headers within ``policy.header_deadline_s`` of being
  accepted, or of the first byte of its next request; trickling does not extend it. A TLS
  handshake counts as part of it;
- at most ``connection_limit`` connections (and so threads) at once. At the limit a newcomer makes
  room by closing the oldest connection awaiting headers, else the longest idle; a connection
  holding a request is never closed, and when every one does, nothing more is accepted until one
  finishes (the kernel's backlog keeps the newcomer). Under pressure (three quarters of the limit)
  connections idle for ``policy.idle_under_pressure_s`` are closed; without pressure an idle one
  lives ``idle_timeout_s``.

A handler gets a ``DirectRequest`` (method, path, lower-cased headers, body, the role the bearer
proved, and under TLS ``peer_id``: the node id the verified client certificate names, as
``connections.py`` hands waitress's requests ``TLS_PEER_ID_ENV``; a WSGI app's environ carries it
under that key) and returns a ``DirectReply`` (both in ``direct_messages.py``, which parses and
renders; a WSGI app is adapted by ``direct_wsgi.py``); raising ``ApiError`` answers that error,
anything else is logged and answered 500. Routes are exact paths; an unknown path is 404 and a
known path with another method 405 — both only after authentication. A handler runs on the
connection's thread and may block (a Raft append waits for its fsync there); the next request on
that connection waits for it, as HTTP/1.1 without pipelining would anyway.
"""

from __future__ import annotations

import _socket
import contextlib
import logging
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from appliance.http.auth import BearerAuth
from appliance.http.connections import ConnectionPolicy, ListenerCounts
from appliance.http.direct_messages import (
    DirectReply,
    DirectRequest,
    Handler,
    Refusal,
    bad,
    chunk_size,
    content_length,
    error_reply,
    is_chunked,
    keeps_alive,
    parse_head,
    render,
)
from appliance.http.direct_wsgi import call_app, environ_of
from appliance.http.errors import ApiError, error_body
from appliance.http.gate import HEADER_BYTES_MAX
from appliance.http.server import AddressInUse, ServerError, _bind, raise_open_files_limit
from appliance.http.tls import member_of

log = logging.getLogger("appliance.http.direct_server")

KiB = 1024
RECV_BYTES = 64 * KiB
DRAIN_S = 2.0  # after a refusal, what the client still sends is dropped for this long
DRAIN_BYTES_MAX = 64 * KiB * KiB
PRESSURE_FRACTION = 0.75
UPKEEP_S = 1.0  # the acceptor's upkeep (idle connections under pressure) runs this often
IDLE_TIMEOUT_S = 120.0  # a kept-alive connection with no request for this long is closed
BODY_READ_TIMEOUT_S = 30.0  # an authenticated request's body may pause this long between bytes
CONNECTION_LIMIT_DEFAULT = 128
CHUNK_LINE_BYTES_MAX = 4 * KiB  # a chunk-size line (with extensions) or a trailer line
PARK_S = 30.0  # a thread whose connection ended waits this long for the next one
PARKED_MAX = 64  # threads parked at once; more end with their connection
STOP_TIMEOUT_S = 5.0

__all__ = [
    "AddressInUse",
    "DirectReply",
    "DirectRequest",
    "DirectServer",
    "Handler",
    "ServerError",
]


class _Closed(Exception):
    """The connection ended (peer closed, deadline, eviction, stop): close without answering."""


@dataclass(eq=False)
class _Parked:
    """A thread waiting for its next connection."""

    cond: threading.Condition
    connection: _Connection | None = None


@dataclass(eq=False)
class _Connection:
    sock: socket.socket
    accepted_at: float
    state: str = "awaiting_headers"  # awaiting_headers | holding | idle | draining
    since: float = 0.0  # when the current state began (monotonic)
    closing: bool = False  # chosen for closing by the acceptor (eviction, upkeep, stop)
    buffer: bytearray = field(default_factory=bytearray)
    peer_id: str | None = None  # the node id the verified TLS client certificate names

    def interrupt(self) -> None:
        """Wake the owning thread out of a blocking call: the socket reads as ended."""
        self.closing = True
        with contextlib.suppress(OSError):
            # The C-level shutdown, also on a TLS socket (whose own shutdown would drop its
            # TLS state under the owning thread).
            _socket.socket.shutdown(self.sock, socket.SHUT_RDWR)


class DirectServer:
    """See the module doc. ``routes``: path → {method → handler}."""

    def __init__(
        self,
        routes: Mapping[str, Mapping[str, Handler]],
        *,
        gate: BearerAuth,
        app: Callable[..., Any] | None = None,
        host: str,
        port: int,
        name: str,
        body_bytes_max: int,
        connection_limit: int = CONNECTION_LIMIT_DEFAULT,
        policy: ConnectionPolicy | None = None,
        ssl_context: ssl.SSLContext | None = None,
        peer_check: Callable[[dict[str, Any] | None], bool] | None = None,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        error_extra: Mapping[str, Any] | None = None,
    ) -> None:
        if not 1 <= connection_limit <= 10_000:
            raise ValueError("connection_limit must be 1-10000")
        if body_bytes_max < 0:
            raise ValueError("body_bytes_max must be >= 0")
        self._routes = {path: dict(methods) for path, methods in routes.items()}
        self._gate = gate
        self._app = app  # a WSGI app for the paths no handler serves
        self._host = host
        self._requested_port = port
        self.name = name
        self.body_bytes_max = body_bytes_max
        self._limit = connection_limit
        self.policy = policy or ConnectionPolicy()
        self.ssl_context = ssl_context
        self._peer_check = peer_check
        self._idle_timeout_s = idle_timeout_s
        self._error_extra = dict(error_extra) if error_extra else {}
        self.counts = ListenerCounts()
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # notified when a connection ends
        self._connections: set[_Connection] = set()
        self._threads: set[threading.Thread] = set()
        self._parked: list[_Parked] = []  # threads waiting for a connection, newest last
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._port: int | None = None
        self._stopping = False

    @classmethod
    def for_app(
        cls,
        app: Any,
        *,
        host: str,
        port: int,
        name: str,
        body_bytes_max: int,
        connection_limit: int = CONNECTION_LIMIT_DEFAULT,
        policy: ConnectionPolicy | None = None,
        ssl_context: ssl.SSLContext | None = None,
        peer_check: Callable[[dict[str, Any] | None], bool] | None = None,
        error_extra: Mapping[str, Any] | None = None,
    ) -> DirectServer:
        """A surface built with ``create_app`` (its bearer gate and error fields), served on
        connection threads instead of waitress; every path goes to the app."""
        gate = getattr(app, "bearer_gate", None)
        if gate is None:
            raise ValueError(f"{name}: the app has no bearer gate (build it with create_app)")
        return cls(
            {},
            gate=gate,
            app=app,
            host=host,
            port=port,
            name=name,
            body_bytes_max=body_bytes_max,
            connection_limit=connection_limit,
            policy=policy,
            ssl_context=ssl_context,
            peer_check=peer_check,
            error_extra=error_extra if error_extra is not None else getattr(app, "error_extra", {}),
        )

    # -- lifecycle -----------------------------------------------------------------------------

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
        return self.counts

    @property
    def running(self) -> bool:
        return self._acceptor is not None and self._acceptor.is_alive()

    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def start(self) -> DirectServer:
        with self._lock:
            if self._listener is not None:
                raise ServerError(f"{self.name}: already started")
            raise_open_files_limit()
            sock = _bind(self._host, self._requested_port)
            sock.setblocking(False)  # the acceptor polls first; accept() never waits
            self._listener = sock
            self._port = int(sock.getsockname()[1])
            self._acceptor = threading.Thread(
                target=self._accept_loop, name=f"http-{self.name}", daemon=True
            )
            self._acceptor.start()
        log.info("%s listening on %s:%d", self.name, self._host, self._port)
        return self

    def stop(self) -> None:
        """Close the listener and every connection, join their threads. Idempotent."""
        with self._lock:
            listener, acceptor = self._listener, self._acceptor
            if listener is None or self._stopping:
                return
            self._stopping = True
            self._room.notify_all()
            for slot in self._parked:
                slot.cond.notify()
            connections = list(self._connections)
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the acceptor out of accept()
        if acceptor is not None:
            acceptor.join(STOP_TIMEOUT_S)
        with contextlib.suppress(OSError):
            listener.close()
        for connection in connections:
            connection.interrupt()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if acceptor is not None and acceptor.is_alive():
            raise ServerError(f"{self.name}: acceptor did not stop in {STOP_TIMEOUT_S}s")
        log.info("%s stopped", self.name)

    def __enter__(self) -> DirectServer:
        if self._listener is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"DirectServer(name={self.name!r}, host={self._host!r}, port={self._port!r})"

    # -- accepting -------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        waiting = select.poll()
        waiting.register(listener.fileno(), select.POLLIN)
        next_upkeep = time.monotonic() + UPKEEP_S
        while not self._stopping:
            now = time.monotonic()
            if now >= next_upkeep:
                self._upkeep(now)
                next_upkeep = now + UPKEEP_S
            try:
                if not waiting.poll(max(0.0, next_upkeep - now) * 1000):
                    continue  # nobody is connecting: nothing to make room for
            except OSError:
                if self._stopping:
                    return
                raise
            if not self._make_room():
                with self._room:
                    if not self._stopping:
                        self._room.wait(UPKEEP_S)
                continue
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, TimeoutError, ConnectionAbortedError):
                continue  # the newcomer gave up before we took it
            except OSError:
                if self._stopping:
                    return
                time.sleep(0.05)  # out of descriptors, say: let connections finish
                continue
            self._adopt(sock)

    def _make_room(self) -> bool:
        """True if a connection may be accepted now (closing one to make room if needed)."""
        with self._lock:
            live = [c for c in self._connections if not c.closing]
            if len(live) < self._limit:
                return True
            victim = None
            for state in ("draining", "awaiting_headers", "idle"):  # the order of sacrifice
                candidates = [c for c in live if c.state == state]
                if candidates:
                    victim = min(candidates, key=lambda c: c.since)
                    break
            if victim is None:
                return False  # every connection holds a request: accept nothing for now
            self.counts.evicted_for_room += 1
        victim.interrupt()
        return True

    def _upkeep(self, now: float) -> None:
        """Under pressure, close connections idle for ``idle_under_pressure_s``."""
        with self._lock:
            live = [c for c in self._connections if not c.closing]
            if len(live) < PRESSURE_FRACTION * self._limit:
                return
            cutoff = now - self.policy.idle_under_pressure_s
            stale = [c for c in live if c.state == "idle" and c.since <= cutoff]
            self.counts.idle_closed_under_pressure += len(stale)
        for connection in stale:
            connection.interrupt()

    def _adopt(self, sock: socket.socket) -> None:
        """Hand the new connection to a parked thread (the most recently parked: the warmest),
        or start one when none is parked."""
        now = time.monotonic()
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = _Connection(sock, accepted_at=now, since=now)
        with self._lock:
            if self._stopping:
                sock.close()
                return
            self._connections.add(connection)
            if self._parked:
                slot = self._parked.pop()
                slot.connection = connection
                slot.cond.notify()
                return
            thread = threading.Thread(
                target=self._run_thread,
                args=(connection,),
                name=f"http-{self.name}-conn",
                daemon=True,
            )
            self._threads.add(thread)
        thread.start()

    def _run_thread(self, connection: _Connection | None) -> None:
        """Serve connections one after another: a thread whose connection ended parks for
        ``PARK_S`` and takes the next one the acceptor hands it (a fresh connection per request,
        as the worker's permit request makes, then costs no thread start)."""
        try:
            while connection is not None:
                self._serve(connection)
                connection = self._park()
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _park(self) -> _Connection | None:
        with self._lock:
            if self._stopping or len(self._parked) >= PARKED_MAX:
                return None
            slot = _Parked(threading.Condition(self._lock))
            self._parked.append(slot)
            slot.cond.wait_for(lambda: slot.connection is not None or self._stopping, PARK_S)
            if slot.connection is None:  # nothing came (or stopping): this thread ends
                with contextlib.suppress(ValueError):
                    self._parked.remove(slot)
            return slot.connection

    def _set_state(self, connection: _Connection, state: str) -> None:
        with self._lock:
            connection.state = state
            connection.since = time.monotonic()

    # -- one connection, on its own thread -------------------------------------------------------

    def _serve(self, connection: _Connection) -> None:
        try:
            if self.ssl_context is not None:
                self._handshake(connection)
            deadline = connection.accepted_at + self.policy.header_deadline_s
            while not connection.closing:
                keep = self._serve_one(connection, deadline)
                if not keep:
                    break
                self._set_state(connection, "idle")
                self._await_next_request(connection)
                self._set_state(connection, "awaiting_headers")
                deadline = time.monotonic() + self.policy.header_deadline_s
        except _Closed:
            pass
        except Refusal as refusal:
            self._refuse(connection, refusal)
        except Exception:
            log.exception("%s: connection failed", self.name)
        finally:
            with contextlib.suppress(OSError):
                connection.sock.close()
            with self._room:
                self._connections.discard(connection)
                self._room.notify_all()

    def _handshake(self, connection: _Connection) -> None:
        context = self.ssl_context
        assert context is not None
        remaining = connection.accepted_at + self.policy.header_deadline_s - time.monotonic()
        if remaining <= 0:
            self._deadline_passed()
        try:
            tls = context.wrap_socket(
                connection.sock, server_side=True, do_handshake_on_connect=False
            )
        except OSError:
            raise _Closed() from None
        connection.sock = tls  # from here on ``interrupt`` reaches the TLS socket
        try:
            tls.settimeout(remaining)
            tls.do_handshake()
        except TimeoutError:
            self._deadline_passed()
        except (ssl.SSLError, OSError) as exc:
            if connection.closing:
                raise _Closed() from None
            log.info("%s: TLS handshake failed: %s", self.name, getattr(exc, "reason", exc))
            raise _Closed() from None
        certificate = tls.getpeercert()
        connection.peer_id = member_of(certificate)
        if self._peer_check is not None and not self._peer_check(certificate):
            log.warning(
                "%s: refused a TLS client whose certificate names no voter of this cluster",
                self.name,
            )
            raise _Closed()

    def _deadline_passed(self) -> None:
        with self._lock:
            self.counts.header_deadline_closed += 1
        raise _Closed()

    def _recv(self, connection: _Connection, timeout_s: float) -> bytes:
        if timeout_s <= 0:
            raise TimeoutError
        sock = connection.sock
        if sock.gettimeout() != timeout_s:  # a kept-alive peer's idle wait: set once, not per read
            sock.settimeout(timeout_s)
        data = sock.recv(RECV_BYTES)
        if not data or connection.closing:
            raise _Closed()
        return data

    def _await_next_request(self, connection: _Connection) -> None:
        """An idle kept-alive connection: wait for the first byte of its next request."""
        if connection.buffer:
            return
        try:
            connection.buffer += self._recv(connection, self._idle_timeout_s)
        except (TimeoutError, OSError):
            raise _Closed() from None

    def _read_head(self, connection: _Connection, deadline: float) -> bytes:
        """The request line and headers (at most ``HEADER_BYTES_MAX`` bytes, without the blank
        line that ends them), once complete; the rest stays in the buffer."""
        buffer = connection.buffer
        searched = 0
        while (end := buffer.find(b"\r\n\r\n", max(0, searched - 3))) < 0:
            if len(buffer) >= HEADER_BYTES_MAX + 4:  # no end within the bound: too long
                raise Refusal(
                    431, "headers_too_large", f"request headers exceed {HEADER_BYTES_MAX} bytes"
                )
            searched = len(buffer)
            try:
                buffer += self._recv(connection, deadline - time.monotonic())
            except TimeoutError:
                self._deadline_passed()
            except OSError:
                raise _Closed() from None
        if end > HEADER_BYTES_MAX:
            raise Refusal(
                431, "headers_too_large", f"request headers exceed {HEADER_BYTES_MAX} bytes"
            )
        head = bytes(buffer[:end])
        del buffer[: end + 4]
        return head

    def _serve_one(self, connection: _Connection, deadline: float) -> bool:
        """Read, authenticate, run and answer one request; True to keep the connection."""
        head = self._read_head(connection, deadline)
        self._set_state(connection, "holding")
        method, path, query, version, headers = parse_head(head)
        role = self._gate.role_for(headers.get("authorization"), method, path)
        if role is None:
            raise Refusal(
                401,
                "unauthorized",
                "a valid bearer credential is required",
                (("WWW-Authenticate", "Bearer"),),
            )
        chunked = is_chunked(headers)
        length = 0 if chunked else content_length(headers)
        if length > self.body_bytes_max:
            raise self._too_large()
        keep = keeps_alive(version, headers)
        if (
            (length or chunked)
            and version == "HTTP/1.1"
            and headers.get("expect", "").lower() == "100-continue"
            and (chunked or len(connection.buffer) < length)
        ):
            connection.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self._read_chunked(connection) if chunked else self._read_body(connection, length)
        request = DirectRequest(method, path, headers, body, role, query, connection.peer_id)
        reply = self._dispatch(request, connection)
        connection.sock.sendall(render(reply, keep, self._error_extra))
        return keep

    def _too_large(self) -> Refusal:
        return Refusal(413, "body_too_large", f"request body exceeds {self.body_bytes_max} bytes")

    def _read_line(self, connection: _Connection) -> bytes:
        """One CRLF-terminated line of a chunked body (at most ``CHUNK_LINE_BYTES_MAX``)."""
        buffer = connection.buffer
        while (end := buffer.find(b"\r\n")) < 0:
            if len(buffer) > CHUNK_LINE_BYTES_MAX:
                raise bad()
            try:
                buffer += self._recv(connection, BODY_READ_TIMEOUT_S)
            except (TimeoutError, OSError):
                raise _Closed() from None
        if end > CHUNK_LINE_BYTES_MAX:
            raise bad()
        line = bytes(buffer[:end])
        del buffer[: end + 2]
        return line

    def _read_chunked(self, connection: _Connection) -> bytes:
        """A ``Transfer-Encoding: chunked`` body, refused (413) the moment it exceeds the cap;
        chunk extensions and trailers are read and ignored."""
        parts: list[bytes] = []
        total = 0
        while True:
            size = chunk_size(self._read_line(connection))
            if size == 0:
                while self._read_line(connection):  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            total += size
            if total > self.body_bytes_max:
                raise self._too_large()
            parts.append(self._read_body(connection, size))
            if self._read_line(connection):  # each chunk's data ends with a bare CRLF
                raise bad()

    def _read_body(self, connection: _Connection, length: int) -> bytes:
        buffer = connection.buffer
        while len(buffer) < length:
            try:
                buffer += self._recv(connection, BODY_READ_TIMEOUT_S)
            except (TimeoutError, OSError):
                raise _Closed() from None
        body = bytes(buffer[:length])
        del buffer[:length]
        return body

    def _dispatch(self, request: DirectRequest, connection: _Connection) -> DirectReply:
        methods = self._routes.get(request.path)
        if methods is None:
            if self._app is not None:
                return self._call_app(request, connection)
            return error_reply(404, "not_found", "not found", self._error_extra)
        handler = methods.get(request.method)
        if handler is None:
            allow = ", ".join(sorted(methods))
            return error_reply(
                405,
                "method_not_allowed",
                "method not allowed",
                self._error_extra,
                (("Allow", allow),),
            )
        try:
            return handler(request)
        except ApiError as exc:
            status = int(exc.status_code)
            body = error_body(
                exc.error_code, exc.message, extra=self._error_extra, fields=exc.fields
            )
            extra_headers = tuple((exc.headers or {}).items())
            return DirectReply(status, body, "application/json", extra_headers)
        except Exception:
            log.exception("%s: %s %s failed", self.name, request.method, request.path)
            return error_reply(500, "internal_error", "internal server error", self._error_extra)

    def _call_app(self, request: DirectRequest, connection: _Connection) -> DirectReply:
        """Run the WSGI app for a path no handler serves (its own middleware checks the bearer
        again, as under waitress)."""
        environ = environ_of(request, connection.sock, self._host, self._port, self.ssl_context)
        return call_app(
            self._app,  # type: ignore[arg-type]
            request,
            environ,
            name=self.name,
            error_extra=self._error_extra,
        )

    def _refuse(self, connection: _Connection, refusal: Refusal) -> None:
        """Answer the refusal, shut our write side, drop what still comes, then close."""
        reply = DirectReply(
            refusal.status,
            error_body(refusal.code, refusal.message, extra=self._error_extra),
            "application/json",
            refusal.headers,
        )
        self._set_state(connection, "draining")
        sock = connection.sock
        try:
            sock.settimeout(DRAIN_S)
            sock.sendall(render(reply, False, self._error_extra))
            _socket.socket.shutdown(sock, socket.SHUT_WR)
        except OSError:
            return
        deadline = time.monotonic() + DRAIN_S
        drained = 0
        while drained <= DRAIN_BYTES_MAX and not connection.closing:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                sock.settimeout(remaining)
                data = _socket.socket.recv(sock, RECV_BYTES)  # raw bytes, never parsed
            except OSError:
                return
            if not data:
                return
            drained += len(data)
