"""One peer's send pipeline: a bounded queue, one sender thread, one request in flight.

Theory of operation. ``put`` never blocks its caller (the thread running the node). Order per
peer is preserved and at most one request is in flight, so a slow peer never delays another and
a peer's messages never overtake each other. What ``put`` does with a message:

- coalescing: a heartbeat (or heartbeat response) replaces a queued, not-yet-sent one in place —
  only the newest heartbeat carries information worth sending;
- merging: an append that continues the append queued last (same term, its ``prev_index`` is
  that one's last index) is merged into it within the batch caps, keeping the higher commit —
  while one append is in flight, the entries proposed meanwhile leave together;
- overflow: when the queue is full the OLDEST queued message is dropped (the newest carry the
  newest term and commit index);
- direct write: when nothing is queued or in flight and the connection is open, the request is
  written on the caller's thread with one non-blocking send (the kernel takes a small request
  whole; a remainder is finished by the sender thread), and the sender thread only reads the
  answer. Anything that would block (no connection yet, a stale one, a large body) goes through
  the queue instead.

The sender thread, when it has nothing to do, waits in ``poll`` on its connection and on a wake
pipe rather than on a condition: a direct write then needs no wake-up at all — the kernel wakes
the sender when the answer arrives, once per message instead of twice (a condition's wake, then
the socket's). The pipe is written only when the sender must act without an answer to read:
something was queued, a direct write failed or left bytes unsent, or the pipeline stops. Bytes
(or a close) on an idle connection mean the peer dropped it: the sender closes it, so the next
request opens a new one instead of writing into a dead one.

A failed exchange (connection error, ambiguous send, refusal) drops that message and everything
queued behind it (stale by then; Raft's heartbeats and probes resend what still matters), then
the pipeline waits a short backoff before the next request. Nothing is retried here.

The exchange itself — encoding, HTTP, what an answer means — belongs to the ``Exchange`` the
transport passes in.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import select
import threading
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from appliance.http.peer_connection import PeerConnection
from appliance.raft.codec import BATCH_ENTRIES_MAX, BATCH_PAYLOAD_BYTES_MAX
from appliance.raft.messages import AppendRequest, Heartbeat, HeartbeatResponse, Message

log = logging.getLogger(__name__)

# How long the idle sender waits in one poll before it looks at its state again (a safety net:
# every change it must act on also writes the wake pipe or makes the connection readable).
IDLE_POLL_S = 1.0

ANSWERED = "answered"  # an exchange's outcome when the response carried an answer
DELIVERED = "delivered"  # received by the peer, no answer in the response
FAILED = "failed"
NOT_NOW = "not_now"  # a direct write is not possible without blocking; nothing was written


class Exchange(Protocol):
    def begin(self, connection: PeerConnection, message: Message, *, nowait: bool) -> str:
        """Write the request: DELIVERED when written, NOT_NOW (only with ``nowait``), FAILED."""

    def finish(self, connection: PeerConnection, message: Message) -> str:
        """Read and handle the response: ANSWERED, DELIVERED or FAILED."""


def coalesce_key_for(message: Message) -> str | None:
    """Only the newest heartbeat (or heartbeat answer) to a peer is worth sending."""
    if isinstance(message, Heartbeat):
        return "heartbeat"
    if isinstance(message, HeartbeatResponse):
        return "heartbeat_response"
    return None


def merge_appends(queued: AppendRequest, later: AppendRequest) -> AppendRequest | None:
    """``queued`` and ``later`` as one append, or None if ``later`` does not continue it.

    Merging needs the same leader and term and ``later.prev_index`` equal to ``queued``'s last
    index (with the matching term); the result stays within the batch caps. The higher commit
    index is kept: a follower applies ``min(commit, last new index)`` either way."""
    if (queued.sender, queued.to, queued.term) != (later.sender, later.to, later.term):
        return None
    last_index = queued.entries[-1].index if queued.entries else queued.prev_index
    last_term = queued.entries[-1].term if queued.entries else queued.prev_term
    if (later.prev_index, later.prev_term) != (last_index, last_term):
        return None
    entries = queued.entries + later.entries
    if len(entries) > BATCH_ENTRIES_MAX:
        return None
    if sum(e.payload_bytes for e in entries) > BATCH_PAYLOAD_BYTES_MAX:
        return None
    return AppendRequest(
        queued.sender,
        queued.to,
        queued.term,
        queued.prev_index,
        queued.prev_term,
        entries,
        max(queued.commit, later.commit),
    )


@dataclass
class PeerStats:
    """Counters of one peer pipeline (read them for metrics; written under the pipeline lock)."""

    queued: int = 0
    sent: int = 0
    failed: int = 0
    dropped: int = 0  # overflow (oldest dropped) and stale messages drained after a failure
    coalesced: int = 0  # a queued heartbeat replaced by a newer one
    merged: int = 0  # an append merged into the one queued before it
    answers: int = 0  # answers that came back in a response body
    direct: int = 0  # requests written on the caller's thread


class _State(enum.Enum):
    IDLE = "idle"
    WRITING = "writing"  # the caller of put() is writing a request directly
    WRITTEN = "written"  # a direct write is done (or failed); the sender takes it from here
    BUSY = "busy"  # the sender thread is exchanging, or backing off after a failure


class PeerPipeline:
    def __init__(
        self,
        peer: str,
        connection: PeerConnection,
        exchange: Exchange,
        queue_max: int,
        backoff_s: float,
    ) -> None:
        if queue_max < 1:
            raise ValueError("queue_max must be >= 1")
        self.peer = peer
        self.connection = connection  # used by one thread at a time, as the state says
        self._exchange = exchange
        self._queue_max = queue_max
        self._backoff_s = backoff_s
        self._queue: deque[Message] = deque()
        self._cv = threading.Condition()
        self._state = _State.IDLE
        self._written: tuple[Message, str] | None = None
        self._stopping = False
        self.stats = PeerStats()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poller = select.poll()
        self._poller.register(self._wake_r, select.POLLIN)
        self._polled_fd: int | None = None  # the connection's descriptor the sender polls now
        self._thread = threading.Thread(target=self._run, name=f"raft-send-{peer}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, message: Message) -> None:
        with self._cv:
            if self._stopping:
                return
            self.stats.queued += 1
            if self._fold_into_queue(message):
                return
            if self._state is not _State.IDLE or self._queue or not self._thread.is_alive():
                self._enqueue(message)
                return
            self._state = _State.WRITING
        try:
            outcome = self._exchange.begin(self.connection, message, nowait=True)
        except Exception:
            log.exception("raft send to %s: unexpected error", self.peer)
            outcome = FAILED
        with self._cv:
            if outcome == NOT_NOW:
                self._state = _State.IDLE
                self._enqueue(message)
                return
            self.stats.direct += 1
            self._state = _State.WRITTEN
            self._written = (message, outcome)
            self._cv.notify()
            answer_wakes_sender = (
                outcome == DELIVERED
                and not self.connection.has_unsent
                and self._polled_fd is not None
                and self._polled_fd == self.connection.wait_fileno()
            )
            if not answer_wakes_sender:
                self._wake()

    def pending(self) -> int:
        with self._cv:
            return len(self._queue)

    def stop(self, timeout_s: float) -> None:
        with self._cv:
            self._stopping = True
            self.stats.dropped += len(self._queue)
            self._queue.clear()
            self._cv.notify_all()
            self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.connection.close()
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._wake_r = self._wake_w = -1

    # -- under the lock --------------------------------------------------------------------------

    def _fold_into_queue(self, message: Message) -> bool:
        """Coalesce or merge ``message`` into what is queued; True if it needs no entry."""
        key = coalesce_key_for(message)
        if key is not None:
            for position, queued in enumerate(self._queue):
                if coalesce_key_for(queued) == key:
                    self._queue[position] = message
                    self.stats.coalesced += 1
                    return True
        if isinstance(message, AppendRequest) and self._queue:
            tail = self._queue[-1]
            merged = merge_appends(tail, message) if isinstance(tail, AppendRequest) else None
            if merged is not None:
                self._queue[-1] = merged
                self.stats.merged += 1
                return True
        return False

    def _enqueue(self, message: Message) -> None:
        if len(self._queue) >= self._queue_max:
            self._queue.popleft()
            self.stats.dropped += 1
        self._queue.append(message)
        self._cv.notify()
        self._wake()

    def _wake(self) -> None:
        """Wake the sender out of its poll (under the lock; a no-op unless it polls)."""
        if self._polled_fd is None and self._state is not _State.IDLE:
            return
        with contextlib.suppress(OSError):  # full: a wake-up is pending already
            os.write(self._wake_w, b"!")

    # -- the sender thread -------------------------------------------------------------------------

    def _next(self) -> tuple[Message, str | None] | None:
        """(message, outcome of its direct write, or None to do the whole exchange), or None
        once stopping."""
        while True:
            with self._cv:
                if self._stopping:
                    return None
                if self._state is _State.WRITTEN and self._written is not None:
                    written, self._written = self._written, None
                    self._state = _State.BUSY
                    return written
                if self._state is _State.IDLE and self._queue:
                    self._state = _State.BUSY
                    return self._queue.popleft(), None
                if self._state is not _State.IDLE:
                    self._cv.wait(IDLE_POLL_S)  # a direct write under way: put() notifies
                    continue
                fd = self.connection.wait_fileno()
                if fd is None and self.connection.open:
                    self.connection.close()  # TLS bytes nobody asked for: stale
                self._polled_fd = fd
            self._wait(fd)
            with self._cv:
                self._polled_fd = None
                if (
                    fd is not None
                    and self._state is _State.IDLE
                    and self.connection.wait_fileno() == fd
                    and self.connection.stale()
                ):
                    self.connection.close()  # the peer closed (or wrote to) an idle connection

    def _wait(self, fd: int | None) -> None:
        """Poll the wake pipe and (when given) the connection; drain the pipe."""
        poller = self._poller
        if fd is not None:
            poller.register(fd, select.POLLIN | select.POLLPRI)
        try:
            poller.poll(IDLE_POLL_S * 1000)
        finally:
            if fd is not None:
                with contextlib.suppress(KeyError, ValueError):
                    poller.unregister(fd)
        with contextlib.suppress(OSError):
            while os.read(self._wake_r, 512):
                pass

    def _run(self) -> None:
        while (job := self._next()) is not None:
            message, begun = job
            try:
                outcome = self._exchange_rest(message, begun)
            except Exception:
                log.exception("raft send to %s: unexpected error", self.peer)
                outcome = FAILED
            with self._cv:
                if outcome != FAILED:
                    self.stats.sent += 1
                    self.stats.answers += outcome == ANSWERED
                    self._state = _State.IDLE
                    continue
                self.stats.failed += 1
                self.stats.dropped += len(self._queue)  # stale now; Raft resends what matters
                self._queue.clear()
                if self._stopping:
                    return
                self._cv.wait(self._backoff_s)
                self._state = _State.IDLE

    def _exchange_rest(self, message: Message, begun: str | None) -> str:
        if begun is None:
            begun = self._exchange.begin(self.connection, message, nowait=False)
        if begun == FAILED:
            return FAILED
        return self._exchange.finish(self.connection, message)
