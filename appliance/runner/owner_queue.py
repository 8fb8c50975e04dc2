"""The worker's engine queue as the owner last saw it: when to look at an execution waiting in it.

Theory of operation. The worker's engine runs ``max_concurrent`` executions and queues the rest
in FIFO order (docs/protocol.md, "Capacity"). An execution seen waiting — accepted while every
slot was busy and something was queued, or observed ``running`` with ``started_at: null`` —
cannot finish before those ahead of it have started. So only the front of the queue, the first
``FRONT_PER_SLOT * max_concurrent`` seen waiting, is observed on the usual backoff; one further
back is *deferred*: it is looked at when it reaches the front (one ahead of it was seen started,
finished or gone), when an answer shows a free slot (then nothing waits at all), or when half of
its observation deadline's window is left, whichever comes first (``AttemptDecisions._poll``).

Deferring only moves a look later; it never decides anything. The deadline is acted on only
after an answer, and an answer that the execution still waits restarts it. The order kept here
is the order answers reached the owner, which can differ from the worker's (concurrent sends); a
mistake costs a look's latency, never a decision. Without a stated capacity (an older worker)
nothing is deferred. Sans-I/O like the rest of the owner: answers in, the works to look at soon
out.
"""

from __future__ import annotations

from itertools import islice
from typing import Final, Generic, TypeVar

from appliance.runner.worker_answers import Capacity

FRONT_PER_SLOT: Final = 2  # observed at the front: the next to start, with room for reordering

W = TypeVar("W")


def queue_drained(capacity: Capacity | None) -> bool:
    """A free engine slot: nothing waits in the worker's queue (it fills only behind busy
    slots), so every execution it accepted before this answer has started."""
    return capacity is not None and capacity.free_slots > 0


class QueueView(Generic[W]):
    """The executions last seen waiting in the worker's queue, oldest first."""

    def __init__(self) -> None:
        self._waiting: dict[int, W] = {}  # occurrence id -> its work, in the order first seen
        self._deferred: set[int] = set()
        self.front = 0  # how many at the head are observed; 0: unknown, nothing is deferred

    def __len__(self) -> int:
        return len(self._waiting)

    def deferred(self, occurrence_id: int) -> bool:
        return occurrence_id in self._deferred

    def answer(
        self, occurrence_id: int, work: W, *, waiting: bool, capacity: Capacity | None
    ) -> list[W]:
        """Note one worker answer about ``occurrence_id`` (``waiting``: it says the execution
        waits for a slot); the other works to look at soon."""
        if capacity is not None:
            self.front = FRONT_PER_SLOT * capacity.max_concurrent
        if queue_drained(capacity):
            woken = [w for oid, w in self._waiting.items() if oid != occurrence_id]
            self.clear()
            return woken
        if not waiting:
            return self.leave(occurrence_id)
        if occurrence_id not in self._waiting:  # one seen waiting again keeps its place
            self._waiting[occurrence_id] = work
            if self.front and len(self._waiting) > self.front:
                self._deferred.add(occurrence_id)
        return []

    def leave(self, occurrence_id: int) -> list[W]:
        """``occurrence_id`` no longer waits (started, finished, forgotten); the deferred works
        that reached the front, to look at soon."""
        if self._waiting.pop(occurrence_id, None) is None:
            return []
        self._deferred.discard(occurrence_id)
        promoted = []
        for oid, work in islice(self._waiting.items(), self.front):
            if oid in self._deferred:
                self._deferred.discard(oid)
                promoted.append(work)
        return promoted

    def clear(self) -> None:
        self._waiting.clear()
        self._deferred.clear()
