"""A reply slot: lets an inbound request carry its Raft answer back in its own HTTP response.

Raft messages are one-way, but a vote or an append is almost always answered by exactly one
message to its sender. Posting that answer as a request of its own costs a second HTTP exchange
(client and server side, both in Python) per append per follower. Instead, the transport's
server side hands the driver a ``ReplySlot`` with each request it delivers and waits, bounded,
for the driver to ``offer`` an answer to that peer; the answer then rides back as the body of
the HTTP response. The driver offers answers at exactly the point where it would otherwise have
sent them — after the fsync they depend on — and ``close``s every slot it has not used at the
end of the cycle that handled their requests, so a request that produces no answer (stale term,
duplicate) is released at once with an empty ``202``.

A slot is used at most once and never after its waiter gave up: ``offer`` returns ``False``
once the slot is closed (timed out, or closed by the driver), and the driver then sends the
answer the ordinary one-way way. Raft tolerates the reordering between the two channels.
"""

from __future__ import annotations

import threading

from appliance.raft.messages import (
    AppendResponse,
    HeartbeatResponse,
    Message,
    SnapshotResponse,
    VoteResponse,
)

ANSWER_KINDS = (AppendResponse, HeartbeatResponse, VoteResponse, SnapshotResponse)


class ReplySlot:
    def __init__(self, peer: str) -> None:
        self.peer = peer
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._closed = False
        self._reply: Message | None = None

    def offer(self, message: Message) -> bool:
        """Hand ``message`` to the waiting request; False if the slot is already closed."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            self._reply = message
        self._done.set()
        return True

    def close(self) -> None:
        """No answer will come through this slot (its waiter answers ``202`` with no body)."""
        with self._lock:
            self._closed = True
        self._done.set()

    def wait(self, timeout_s: float) -> Message | None:
        """The offered answer, or None if the slot was closed or ``timeout_s`` passed first.

        Closes the slot either way, so an answer produced later goes out one-way."""
        self._done.wait(timeout_s)
        with self._lock:
            self._closed = True
            return self._reply
