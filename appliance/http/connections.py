"""The connections of one listener: waitress's server and channel, made hard to hold hostage.

Theory of operation. Waitress parses requests in one event-loop thread and runs the app in a
small thread pool. The loop is ours (appliance.http.event_loop: epoll with registrations kept
between passes, so descriptors past 1,024 work and a pass costs what happened, not how many
connections are open); the listening socket accepts everything waiting on each wake-up. We
subclass three of waitress's pieces:

- ``GatedParser`` (appliance.http.gate): the bearer is checked the moment a request's headers
  are complete, and a refusal is answered 401 without a body byte parsed.
- ``Channel`` (one connection) knows which of four states it is in: *awaiting headers* (since
  it was accepted — a TLS handshake counts as part of it — or since the first byte of its next
  request), *holding a request* (its
  headers are in and authenticated, or a task is queued or running for it), *idle* (kept alive
  between requests) or *draining* (after a refusal: our write side is shut and what still comes
  is dropped unread, so the client reads our answer instead of a reset).
- ``ListenerServer``: once a second it closes connections that have not delivered complete
  headers within ``header_deadline_s``, expired drains, and, when the listener is under
  pressure (three quarters of ``connection_limit``), idle connections that have been idle for
  ``idle_under_pressure_s``. At the limit it makes room for a new connection by closing, in this
  order, a draining one, the oldest awaiting headers, the longest idle; a connection holding a
  request is never closed. Only when every connection holds a request does it stop accepting
  (the kernel's backlog keeps the newcomer until one finishes), so connections without a valid
  bearer, which never get past *awaiting headers*, can never keep an authenticated one out.
  Refusals the server gives itself (400, 401, 413, 431) are answered in the event-loop thread,
  so they never wait behind, or occupy, the app's threads.

TLS (when the server has an ``ssl_context``) lives in the channel too, with no second process or
relaying hop: the accepted socket is wrapped without a handshake, the handshake is driven
non-blockingly by the event loop (a failed one closes the connection; a ``peer_check`` can refuse
a verified certificate, e.g. one that names no voter), and reads drain what OpenSSL has already
decrypted (``pending()``), which ``poll()`` cannot see. Waitress never reads from a connection
while one of its requests is being served (``readable()`` is false then), so the app's thread
writing the answer and the loop reading never use one TLS connection at the same time.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import WSGITask

from appliance.http.event_loop import run_loop
from appliance.http.gate import GatedParser, JsonErrorTask
from appliance.http.polling import has_events
from appliance.http.tls import TLS_PEER_ID_ENV, member_of

log = logging.getLogger("appliance.http.connections")

KiB = 1024
# After a refusal that closes the connection, what the client still sends is read and dropped
# (never parsed) for this long, so its pending writes do not turn our answer into a reset.
DRAIN_S = 2.0
DRAIN_BYTES_MAX = 64 * KiB * KiB
PRESSURE_FRACTION = 0.75
ACCEPT_BATCH = 64  # connections accepted per readiness event of the listening socket


@dataclass(frozen=True)
class ConnectionPolicy:
    """How long a connection may take to say what it wants, and how long it may idle."""

    header_deadline_s: float = 5.0
    idle_under_pressure_s: float = 1.0

    def __post_init__(self) -> None:
        if not 0.1 <= self.header_deadline_s <= 120:
            raise ValueError("header_deadline_s must be 0.1-120 seconds")
        if not 0 <= self.idle_under_pressure_s <= 120:
            raise ValueError("idle_under_pressure_s must be 0-120 seconds")


class PeerTask(WSGITask):
    """A request's WSGI environment also says which node the connection's verified client
    certificate names (``TLS_PEER_ID_ENV``; None without TLS or such a certificate), so the
    cluster routes can hold a message's sender to it."""

    def get_environment(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environment()
        environ[TLS_PEER_ID_ENV] = getattr(self.channel, "tls_peer_id", None)
        return environ


class Channel(HTTPChannel):
    """One connection: waitress's channel with the gate, its state, and a draining close.

    Closing a socket with unread bytes makes the kernel send a reset, which can destroy our
    answer before the client reads it (a client writing a body the server will not read is the
    usual case). So after a refusal the write side is shut down first, and whatever arrives is
    dropped unread until the client closes, ``DRAIN_S`` pass or ``DRAIN_BYTES_MAX`` came in.
    """

    task_class = PeerTask
    error_task_class = JsonErrorTask
    server: ListenerServer
    tls_peer_id: str | None = None  # the node id the verified client certificate names
    drain_before_close = False  # set by the error task
    _drain_deadline: float | None = None
    _drained_bytes = 0
    _serve_inline = False

    def __init__(self, server: ListenerServer, sock: socket.socket, addr: Any, adj: Any, map=None):
        self.tls = server.ssl_context is not None
        self._handshaking = self.tls
        self._handshake_wants_write = False
        if server.ssl_context is not None:
            sock = server.ssl_context.wrap_socket(
                sock, server_side=True, do_handshake_on_connect=False
            )
        super().__init__(server, sock, addr, adj, map=map)
        # A new connection is awaiting headers from the moment it is accepted.
        self.headers_due: float | None = time.monotonic() + server.policy.header_deadline_s

    # --- TLS -------------------------------------------------------------------------------

    def _handshake(self) -> None:
        try:
            self.socket.do_handshake()
        except ssl.SSLWantReadError:
            self._handshake_wants_write = False
            return
        except ssl.SSLWantWriteError:
            self._handshake_wants_write = True
            return
        except (ssl.SSLError, OSError) as exc:
            log.info("%s: TLS handshake failed: %s", self.server.appliance_name, _reason(exc))
            self.close_now()
            return
        check = self.server.peer_check
        certificate = self.socket.getpeercert()
        self.tls_peer_id = member_of(certificate)
        if check is not None and not check(certificate):
            log.warning(
                "%s: refused a TLS client whose certificate names no voter of this cluster",
                self.server.appliance_name,
            )
            self.close_now()
            return
        self._handshaking = False
        if self.socket.pending():  # request bytes that came with the handshake's last flight
            self._tls_read()

    def _tls_read(self) -> None:
        chunks: list[bytes] = []
        eof = False
        try:
            while True:
                data = self.socket.recv(self.adj.recv_bytes)
                if not data:
                    eof = True
                    break
                chunks.append(data)
                if not self.socket.pending():
                    break
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except (ssl.SSLError, OSError):
            eof = True
        if chunks:
            self.last_activity = time.time()
            self.received(b"".join(chunks))
        if eof:
            self.handle_close()

    def send(self, data: bytes, do_close: bool = True) -> int:
        if not self.tls or self.draining:
            return super().send(data, do_close=do_close)
        try:
            return self.socket.send(data)
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
            return 0
        except (ssl.SSLError, OSError):
            if do_close:
                self.handle_close()
            return 0

    def parser_class(self, adj: Any) -> GatedParser:  # waitress calls self.parser_class(adj)
        return GatedParser(adj, self.server.appliance_gate)

    # --- state -----------------------------------------------------------------------------

    @property
    def draining(self) -> bool:
        return self._drain_deadline is not None

    @property
    def holds_request(self) -> bool:
        """A task is queued or running for it, or an authenticated request is being received."""
        if self.requests or self._serve_inline:
            return True
        request = self.request
        return request is not None and request.headers_finished

    @property
    def awaiting_headers(self) -> bool:
        return self.headers_due is not None and not self.holds_request and not self.draining

    @property
    def idle(self) -> bool:
        return (
            self.headers_due is None
            and self.request is None
            and not self.requests
            and not self.draining
            and not self.will_close
            and not self.close_when_flushed
            and not self.total_outbufs_len
        )

    # --- reading ---------------------------------------------------------------------------

    def received(self, data: bytes) -> bool:
        result = super().received(data)
        pending = self.request is not None and not self.request.headers_finished
        if not pending:
            self.headers_due = None
        elif self.headers_due is None:  # the first bytes of the next request on a kept-alive one
            self.headers_due = time.monotonic() + self.server.policy.header_deadline_s
        if self._serve_inline:
            # A refusal of the server's own (ListenerServer.add_task): answered here, in the
            # event-loop thread, never queued behind the app's work.
            self._serve_inline = False
            self.service()
        return result

    # --- changes made by waitress's worker threads ----------------------------------------------

    def _changed(self) -> None:
        fd = self._fileno
        if fd is not None:
            self.server.changed.append(fd)
            self.server.pull_trigger()

    def service(self) -> None:
        """A worker thread serves our request (or the loop, for a refusal of its own)."""
        super().service()
        self._changed()  # after waitress's own wake-up: the loop must see the final state

    def write_soon(self, data: Any) -> int:
        written = super().write_soon(data)
        if self.total_outbufs_len:  # left for the loop to flush: it must watch for writability
            self._changed()
        return written

    def handle_read(self) -> None:
        if self._handshaking:
            self._handshake()
            return
        if not self.draining:
            if self.tls:
                self._tls_read()
            else:
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

    # --- closing ---------------------------------------------------------------------------

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

    def close_now(self) -> None:
        """Close without draining (the upkeep and eviction use it)."""
        HTTPChannel.handle_close(self)

    def readable(self) -> bool:
        if self._handshaking:
            return not self._handshake_wants_write
        return True if self.draining else super().readable()

    def writable(self) -> bool:
        if self.will_close:
            return True  # handle_write closes it (ListenerServer.maintenance marks it so)
        if self._handshaking:
            return self._handshake_wants_write
        return False if self.draining else super().writable()

    def handle_write(self) -> None:
        if self.will_close and (self._handshaking or self.draining):
            self.close_now()
            return
        if self._handshaking:
            self._handshake()
            return
        super().handle_write()

    def has_unread_bytes(self) -> bool:
        """A request (or a hang-up) is already here: an idle connection with bytes to read is
        left to be read, not closed under it. (A request still on the wire can meet our close:
        clients send what must not be ambiguous on a new connection, docs/http.md.)"""
        sock = self.socket
        if sock is None:
            return False
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        return has_events(sock, select.POLLIN | select.POLLPRI)

    def mark_for_close(self) -> None:
        """Closed by the loop's next write pass, not now: the upkeep runs while ``poll()``'s
        registrations are being built, and a descriptor closed then and reused by an accept in
        the same pass would receive the closed one's events (a reset of an innocent client)."""
        self.will_close = True

    def drain_expired(self, now: float | None = None) -> bool:
        deadline = self._drain_deadline
        return deadline is not None and (now or time.monotonic()) >= deadline


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc.__class__.__name__)


@dataclass
class ListenerCounts:
    """What the upkeep did, since the server started (for tests, logs and metrics)."""

    header_deadline_closed: int = 0
    idle_closed_under_pressure: int = 0
    evicted_for_room: int = 0


class ListenerServer(TcpWSGIServer):
    """Waitress's TCP server with our channel, the upkeep and room-making (see module doc)."""

    channel_class = Channel
    appliance_gate: Any = None
    appliance_error_extra: Mapping[str, Any] = {}
    appliance_body_bytes_max = 0
    appliance_name = "http"
    policy = ConnectionPolicy()
    ssl_context: ssl.SSLContext | None = None
    # Called with a verified client certificate after the handshake; False closes it.
    peer_check: Callable[[dict[str, Any] | None], bool] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.counts = ListenerCounts()
        # Connections a worker thread changed, for the loop to look at again (event_loop).
        self.changed: deque[int] = deque()
        self._last_report = time.monotonic()
        self._reported = ListenerCounts()
        super().__init__(*args, **kwargs)

    def _channels(self) -> list[Channel]:
        return [c for c in self.active_channels.values() if isinstance(c, Channel)]

    def add_task(self, task: Any) -> None:
        channel = task
        if isinstance(channel, Channel) and channel.requests and channel.requests[0].error:
            channel._serve_inline = True  # served by Channel.received once waitress's lock is free
            return
        super().add_task(task)

    # --- accepting -------------------------------------------------------------------------

    def readable(self) -> bool:
        now = time.time()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        if not self.accepting:
            return False
        if len(self.active_channels) < self.adj.connection_limit:
            return True
        # At the limit: accept only if room can be made (handle_accept makes it).
        return self._evictable() is not None

    def handle_accept(self) -> None:
        """Accept everything waiting (up to ``ACCEPT_BATCH``), making room at the limit."""
        victims: list[Channel] = []
        try:
            for _ in range(ACCEPT_BATCH):
                if len(self.active_channels) - len(victims) >= self.adj.connection_limit:
                    victim = self._evictable()
                    if victim is None:
                        return
                    victim.mark_for_close()  # chosen: not chosen again in this batch
                    victims.append(victim)
                before = len(self.active_channels)
                super().handle_accept()
                if len(self.active_channels) == before:  # nothing more waiting (or a failure)
                    if victims:
                        victims.pop().will_close = False  # its room was not needed
                    return
        finally:
            # Closed after the accepts, so no newcomer gets a victim's descriptor while events
            # for the old one may still be in this pass's results.
            for victim in victims:
                victim.close_now()
                self.counts.evicted_for_room += 1

    def run(self) -> None:
        try:
            run_loop(self, self._map, self.adj.asyncore_loop_timeout, self.changed)
        except (SystemExit, KeyboardInterrupt):
            self.task_dispatcher.shutdown()

    def _evictable(self) -> Channel | None:
        """A draining connection, else the oldest awaiting headers, else the longest idle."""
        oldest_waiting: Channel | None = None
        longest_idle: Channel | None = None
        for channel in self._channels():
            if channel.will_close:
                continue  # already on its way out
            if channel.draining:
                return channel
            if channel.awaiting_headers:
                due = channel.headers_due
                if oldest_waiting is None or (due or 0) < (oldest_waiting.headers_due or 0):
                    oldest_waiting = channel
            elif channel.idle and (
                longest_idle is None or channel.last_activity < longest_idle.last_activity
            ):
                longest_idle = channel
        return oldest_waiting or longest_idle

    # --- upkeep (once a second) ------------------------------------------------------------

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # waitress: channel_timeout for idle connections
        mono = time.monotonic()
        channels = self._channels()
        pressure = len(channels) >= PRESSURE_FRACTION * self.adj.connection_limit
        idle_cutoff = now - self.policy.idle_under_pressure_s
        for channel in channels:
            if channel.will_close:
                continue
            if channel.drain_expired(mono):
                channel.mark_for_close()
            elif channel.awaiting_headers and (channel.headers_due or mono) <= mono:
                channel.mark_for_close()
                self.counts.header_deadline_closed += 1
            elif (
                pressure
                and channel.idle
                and channel.last_activity <= idle_cutoff
                and not channel.has_unread_bytes()
            ):
                channel.mark_for_close()
                self.counts.idle_closed_under_pressure += 1
        self._report(mono)

    def _report(self, mono: float) -> None:
        """One log line a minute at most, only when the upkeep closed something."""
        if mono - self._last_report < 60:
            return
        counts, seen = self.counts, self._reported
        closed = (
            counts.header_deadline_closed - seen.header_deadline_closed,
            counts.idle_closed_under_pressure - seen.idle_closed_under_pressure,
            counts.evicted_for_room - seen.evicted_for_room,
        )
        self._last_report = mono
        self._reported = ListenerCounts(**vars(counts))
        if any(closed):
            # INFO: peers' liveness probes (appliance/raft/peer_probe.py) hold idle connections
            # that never send a request and are counted here too.
            log.info(
                "%s: closed %d connections that sent no complete headers in %.1fs, %d idle ones "
                "under connection pressure and %d to make room for new ones (last minute)",
                self.appliance_name,
                closed[0],
                self.policy.header_deadline_s,
                closed[1],
                closed[2],
            )
