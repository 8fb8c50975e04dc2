"""The event-stream pusher: every open ``GET /events`` stream served by one selector thread.

Theory of operation. A WSGI server serves a streaming response by iterating it in one of its
worker threads, so each open stream would hold a thread for its whole life, and eight readers
would stop the console (SPEC §11: no idle or slow connection can block a listener). Here the
WSGI app answers the stream's first bytes (status, headers, the first events) like any request;
once waitress has flushed them, the connection is handed over (appliance/console/takeover.py)
to this pusher, which owns it from then on: one thread and one ``selectors`` loop for every
stream, no thread per stream.

Bounds, each named:

- at most ``streams_max`` streams, counted from the moment one is reserved (before its first
  byte is answered): the next one is refused with 503 by the app;
- each stream's unsent bytes are capped at ``buffer_bytes_max``; a stream that reaches it, or
  that has had bytes waiting without the client taking any for ``stall_s``, is a slow reader and
  is dropped (the page's EventSource reconnects and reloads what it missed);
- a stream lives at most ``lifetime_s`` (then it ends cleanly and the browser reconnects, which
  re-checks its session); a stream whose session ended (logout, expiry) is closed at the next
  heartbeat; a reserved stream that is never handed over within ``adopt_deadline_s`` is released.

The response body is HTTP/1.1 chunked when waitress began it chunked (``Stream.chunked``): each
message the pusher sends is one chunk. Messages are added by ``publish`` from any thread; only the
pusher thread touches sockets and buffers. How a body stays well framed, whatever the timing:

- a message published while the app is still answering the first bytes (the stream is reserved
  but not adopted, and the framing is not decided yet) is kept as a message (``Stream.early``)
  and framed only when the stream is adopted, after the first bytes; one whose id the app's
  first bytes already carried (``Stream.replayed_through``: its replay and ``hello``) is left
  out, so a message is neither lost nor sent twice between the page and its stream;
- a stream is ended, not cut: the end (lifetime, session, a slow reader, a stream adopted after
  it was released) drops the chunks not begun, finishes the one begun, writes the last chunk,
  shuts its write side and reads until the browser closes (or ``ENDING_S`` passes), so the
  browser sees a complete body and reconnects (``retry``) instead of reporting a broken one.
  Only a client that takes nothing for ``ENDING_S`` more, or the pusher stopping, is closed
  without that.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

log = logging.getLogger("appliance.console.pusher")

KiB: Final = 1024
STREAMS_MAX_DEFAULT: Final = 32
BUFFER_BYTES_MAX_DEFAULT: Final = 256 * KiB
HEARTBEAT_S_DEFAULT: Final = 15.0
STALL_S_DEFAULT: Final = 10.0
LIFETIME_S_DEFAULT: Final = 300.0
ADOPT_DEADLINE_S_DEFAULT: Final = 10.0
SEND_BYTES: Final = 64 * KiB
READ_BYTES: Final = 4 * KiB
ENDING_S: Final = 2.0  # an ended stream's last bytes and the client's close, at most this long
HEARTBEAT: Final = b": keep-alive\n\n"
LAST_CHUNK: Final = b"0\r\n\r\n"


@dataclass
class PusherCounts:
    """What the pusher did since it started (tests, docs/benchmarks.md)."""

    opened: int = 0
    refused_full: int = 0
    dropped_slow: int = 0
    closed_by_client: int = 0
    ended_lifetime: int = 0
    ended_session: int = 0
    never_adopted: int = 0
    ended_cleanly: int = 0  # ended streams whose client took the last chunk and closed
    cut: int = 0  # ended streams closed before their client took the last chunk


@dataclass(eq=False)
class Stream:
    """One event stream: reserved by the app, then adopted with its socket."""

    id: int
    session_id: str | None  # None for a script's bearer
    follow: int | None  # the occurrence whose output it wants, if any
    reserved_s: float
    chunked: bool = False
    ready: bool = False  # the app answered its first bytes (set by the takeover task)
    # The newest message id the app's first bytes carried (set by the app before its answer).
    replayed_through: int | None = None
    sock: socket.socket | None = None
    # Before adoption: (message, id) as published, framed once adopted.
    early: list[tuple[bytes, int | None]] = field(default_factory=list)
    early_bytes: int = 0
    pending: bytearray = field(default_factory=bytearray)  # framed bytes not sent yet
    sizes: deque[int] = field(default_factory=deque)  # the framed messages in ``pending``
    head_sent: int = 0  # bytes of the first of ``sizes`` already sent
    waiting_since_s: float | None = None  # bytes waiting since (no progress since then)
    opened_s: float = 0.0
    ending_until_s: float | None = None  # ended: its last bytes go out, then it closes
    write_shut: bool = False
    closed: bool = False
    pusher: Pusher | None = None

    @property
    def ending(self) -> bool:
        return self.ending_until_s is not None

    def adopt(self, sock: socket.socket) -> None:
        """Called by the event-loop thread once waitress has flushed the first bytes."""
        if self.pusher is not None:
            self.pusher.adopt(self, sock)

    def abandon(self) -> None:
        """The connection closed before it could be handed over."""
        if self.pusher is not None:
            self.pusher.release(self)


class Pusher:
    """Owns adopted event-stream sockets; see the module docstring."""

    def __init__(
        self,
        *,
        streams_max: int = STREAMS_MAX_DEFAULT,
        buffer_bytes_max: int = BUFFER_BYTES_MAX_DEFAULT,
        heartbeat_s: float = HEARTBEAT_S_DEFAULT,
        stall_s: float = STALL_S_DEFAULT,
        lifetime_s: float = LIFETIME_S_DEFAULT,
        adopt_deadline_s: float = ADOPT_DEADLINE_S_DEFAULT,
        session_alive: Callable[[str], bool] = lambda _session: True,
        on_close: Callable[[Stream], None] = lambda _stream: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if streams_max < 1 or buffer_bytes_max < 1:
            raise ValueError("streams_max and buffer_bytes_max must be positive")
        self.streams_max = streams_max
        self.buffer_bytes_max = buffer_bytes_max
        self.heartbeat_s = heartbeat_s
        self.stall_s = stall_s
        self.lifetime_s = lifetime_s
        self.adopt_deadline_s = adopt_deadline_s
        self._session_alive = session_alive
        self._on_close = on_close
        self._clock = clock
        self.counts = PusherCounts()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._reserved: dict[int, Stream] = {}  # every stream counted against the limit
        self._inbox: deque[tuple[str, Any]] = deque()  # (verb, value) for the pusher thread
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-pusher", daemon=True)

    # -- any thread --

    @property
    def open_streams(self) -> int:
        with self._lock:
            return len(self._reserved)

    def reserve(self, session_id: str | None, follow: int | None) -> Stream | None:
        """A slot for a new stream, or None when ``streams_max`` are open (the app answers 503)."""
        with self._lock:
            if len(self._reserved) >= self.streams_max:
                self.counts.refused_full += 1
                return None
            stream = Stream(next(self._ids), session_id, follow, self._clock(), pusher=self)
            self._reserved[stream.id] = stream
        return stream

    def adopt(self, stream: Stream, sock: socket.socket) -> None:
        self._post("adopt", (stream, sock))

    def release(self, stream: Stream) -> None:
        self._post("release", stream)

    def publish(
        self, message: bytes, occurrence_id: int | None = None, event_id: int | None = None
    ) -> None:
        """Send one SSE message to every stream (or, with ``occurrence_id``, to the streams that
        follow that occurrence); ``event_id`` is its id (``EventHub``), None for one without."""
        self._post("publish", (message, occurrence_id, event_id))

    def end_session(self, session_id: str) -> None:
        """Close the streams of a session now (logout)."""
        self._post("end_session", session_id)

    def start(self) -> Pusher:
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        for stream in list(self._reserved.values()):
            self._close(stream)
        with contextlib.suppress(Exception):
            self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _post(self, verb: str, value: Any) -> None:
        self._inbox.append((verb, value))
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    # -- the pusher thread --

    def _run(self) -> None:
        next_beat = self._clock() + self.heartbeat_s
        while not self._stop.is_set():
            timeout_s = max(0.0, min(1.0, next_beat - self._clock()))
            for key, events in self._selector.select(timeout_s):
                if key.data is None:
                    with contextlib.suppress(BlockingIOError, OSError):
                        self._wake_r.recv(4096)
                    continue
                stream: Stream = key.data
                if events & selectors.EVENT_READ:
                    self._readable(stream)
                if events & selectors.EVENT_WRITE and not stream.closed:
                    self._flush(stream)
            self._drain_inbox()
            now = self._clock()
            self._upkeep(now)
            if now >= next_beat:
                next_beat = now + self.heartbeat_s
                self._heartbeat()

    def _drain_inbox(self) -> None:
        while self._inbox:
            verb, value = self._inbox.popleft()
            if verb == "adopt":
                self._adopted(*value)
            elif verb == "publish":
                self._distribute(*value)
            elif verb == "release":
                if not value.closed and value.sock is None:
                    self.counts.never_adopted += 1
                self._close(value)
            elif verb == "end_session":
                for stream in self._streams():
                    if stream.session_id == value and not stream.ending:
                        self.counts.ended_session += 1
                        self._end(stream)

    def _streams(self) -> list[Stream]:
        with self._lock:
            return list(self._reserved.values())

    def _adopted(self, stream: Stream, sock: socket.socket) -> None:
        sock.setblocking(False)
        if stream.closed:  # released meanwhile (e.g. the adopt deadline): end its body
            with contextlib.suppress(OSError, ssl.SSLError):
                if stream.chunked:
                    sock.send(LAST_CHUNK)  # waitress flushed everything before: room for it
                sock.shutdown(socket.SHUT_WR)
            with contextlib.suppress(OSError):
                sock.close()
            return
        stream.sock = sock
        stream.opened_s = self._clock()
        self.counts.opened += 1
        self._selector.register(sock, selectors.EVENT_READ, stream)
        early, stream.early, stream.early_bytes = stream.early, [], 0
        for message, event_id in early:
            through = stream.replayed_through
            if event_id is None or through is None or event_id > through:
                self._send(stream, message)

    def _distribute(self, message: bytes, occurrence_id: int | None, event_id: int | None) -> None:
        for stream in self._streams():
            if occurrence_id is not None and stream.follow != occurrence_id:
                continue
            if stream.sock is None:
                self._keep_early(stream, message, event_id)
            else:
                self._send(stream, message)

    def _keep_early(self, stream: Stream, message: bytes, event_id: int | None) -> None:
        """A message for a stream whose first bytes are still being answered (module docstring)."""
        if stream.closed:
            return
        if stream.early_bytes + len(message) > self.buffer_bytes_max:
            self._drop_slow(stream, "its unsent bytes reached the buffer cap before it opened")
            return
        stream.early.append((message, event_id))
        stream.early_bytes += len(message)

    def _send(self, stream: Stream, message: bytes) -> None:
        if stream.closed or stream.ending:
            return
        framed = (b"%x\r\n" % len(message) + message + b"\r\n") if stream.chunked else message
        if len(stream.pending) + len(framed) > self.buffer_bytes_max:
            self._drop_slow(stream, "its unsent bytes reached the buffer cap")
            return
        self._queue(stream, framed)
        self._flush(stream)

    def _queue(self, stream: Stream, framed: bytes) -> None:
        if not stream.pending:
            stream.waiting_since_s = self._clock()
        stream.pending += framed
        stream.sizes.append(len(framed))

    def _flush(self, stream: Stream) -> None:
        sock = stream.sock
        if sock is None or stream.closed:
            return
        while stream.pending:
            try:
                sent = sock.send(stream.pending[:SEND_BYTES])
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                break
            except OSError:
                self._client_gone(stream)
                return
            if sent <= 0:
                break
            del stream.pending[:sent]
            self._sent(stream, sent)
        if not stream.pending and stream.ending and not stream.write_shut:
            stream.write_shut = True  # all of it is out: the body is complete
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
        mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if stream.pending else 0)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.modify(sock, mask, stream)

    def _sent(self, stream: Stream, sent: int) -> None:
        stream.head_sent += sent
        while stream.sizes and stream.head_sent >= stream.sizes[0]:
            stream.head_sent -= stream.sizes.popleft()
        stream.waiting_since_s = self._clock() if stream.pending else None

    def _readable(self, stream: Stream) -> None:
        sock = stream.sock
        if sock is None:
            return
        try:
            data = sock.recv(READ_BYTES)  # a client says nothing on an event stream; drop it
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:
            data = b""
        if not data:
            self._client_gone(stream)

    def _client_gone(self, stream: Stream) -> None:
        if stream.ending and not stream.pending:
            self.counts.ended_cleanly += 1  # it read the whole body, then closed
        else:
            self.counts.closed_by_client += 1
        self._close(stream)

    def _upkeep(self, now: float) -> None:
        for stream in self._streams():
            if stream.closed:
                continue
            if stream.sock is None:
                if now - stream.reserved_s >= self.adopt_deadline_s and not stream.ready:
                    self.counts.never_adopted += 1
                    self._close(stream)
                continue
            if stream.ending_until_s is not None:
                if now >= stream.ending_until_s:
                    self.counts.cut += 1
                    self._close(stream)
            elif self._stalled(stream, now):
                self._drop_slow(stream, f"it took no bytes for {self.stall_s:g} s")
            elif now - stream.opened_s >= self.lifetime_s:
                self.counts.ended_lifetime += 1
                self._end(stream)

    def _stalled(self, stream: Stream, now: float) -> bool:
        return stream.waiting_since_s is not None and now - stream.waiting_since_s >= self.stall_s

    def _heartbeat(self) -> None:
        for stream in self._streams():
            if stream.closed or stream.ending or stream.sock is None:
                continue
            if stream.session_id is not None and not self._session_alive(stream.session_id):
                self.counts.ended_session += 1
                self._end(stream)
            else:
                self._send(stream, HEARTBEAT)

    def _drop_slow(self, stream: Stream, why: str) -> None:
        self.counts.dropped_slow += 1
        log.info("console: dropped a slow event-stream reader (stream %d): %s", stream.id, why)
        self._end(stream, drop_unsent=True)

    def _end(self, stream: Stream, *, drop_unsent: bool = False) -> None:
        """End the body on a chunk boundary with the last chunk (module docstring); the stream
        closes once the client has closed, or after ``ENDING_S``."""
        if stream.closed or stream.ending:
            return
        if stream.sock is None:
            self._close(stream)  # not adopted yet: ``_adopted`` ends its body
            return
        if drop_unsent:  # keep only the rest of the chunk already begun
            begun = stream.sizes[0] - stream.head_sent if stream.head_sent else 0
            del stream.pending[begun:]
            stream.sizes = deque([begun + stream.head_sent]) if begun else deque()
            if not begun:
                stream.head_sent = 0
        if stream.chunked:
            self._queue(stream, LAST_CHUNK)
        stream.ending_until_s = self._clock() + ENDING_S
        self._flush(stream)

    def _close(self, stream: Stream) -> None:
        """Close at once: the client left, an ended stream's time ran out, the pusher stops."""
        if stream.closed:
            return
        stream.closed = True
        with self._lock:
            self._reserved.pop(stream.id, None)
        sock = stream.sock
        if sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            with contextlib.suppress(OSError):
                sock.close()
        stream.pending.clear()
        stream.sizes.clear()
        stream.early.clear()
        try:
            self._on_close(stream)
        except Exception:  # a listener's bug must not stop the pusher
            log.exception("console: an event-stream close listener failed")

    def __repr__(self) -> str:
        return f"Pusher(open={self.open_streams}, max={self.streams_max})"
