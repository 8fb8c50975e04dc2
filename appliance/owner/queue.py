"""The worker's engine queue as the owner last saw it: when to look at an execution waiting in it.

Theory of operation. The worker's engine runs ``max_concurrent`` executions and queues the rest
in FIFO order (docs/protocol.md, "Capacity"). An execution seen waiting — accepted while every
slot was busy and something was queued, or observed ``running`` with ``started_at: null`` —
cannot finish before those ahead of it have started. The owner keeps them in the order it saw
them and decides when each is looked at:

- the front, the oldest ``FRONT_PER_SLOT * max_concurrent``, is observed on the usual backoff;
  one further back is *deferred* (no observation) until it reaches the front;
- every exec and observation answer states the worker's capacity, and with it how many units
  wait in its queue (``max_queued - queue_room``, an upper bound: reservations for launches in
  progress count too). When fewer wait there than this view holds as not yet started, the
  oldest of the excess have started: each is looked at soon, once (a free slot: all of them);
- a deferred one is looked at anyway once half of its observation deadline's window is left
  (``Attempts._poll``).

Deferring only moves a look later; it never decides anything. The deadline is acted on only
after an answer, and an answer that the execution still waits restarts it. The order kept here
is the order answers reached the owner, which can differ from the worker's (concurrent sends); a
mistake costs a look's latency, never a decision. Without a stated capacity (an older worker)
nothing is deferred. Sans-I/O like the rest of the owner: answers in, the works to look at soon
out. Each step is O(1) amortised: a burst holds a thousand executions here.
"""

from __future__ import annotations

from typing import Final, Generic, TypeVar

from appliance.owner.worker_answers import Capacity

FRONT_PER_SLOT: Final = 2  # observed at the front: the next to start, with room for reordering

W = TypeVar("W")


def queued_at_worker(capacity: Capacity) -> int:
    """Units in the worker's queue behind its slots: at most that many of its accepted
    executions have not started. A free slot means none: the queue fills only behind busy
    slots, so every execution accepted before this answer has started."""
    return 0 if capacity.free_slots > 0 else capacity.max_queued - capacity.queue_room


class QueueView(Generic[W]):
    """The executions last seen waiting in the worker's queue, oldest first."""

    def __init__(self) -> None:
        self._waiting: dict[int, W] = {}  # occurrence id -> its work, in the order first seen
        self._deferred: dict[int, W] = {}  # of those, not observed until they reach the front
        self._unstarted: dict[int, W] = {}  # of those, not yet looked at as probably started
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
        if not waiting:
            soon = self.leave(occurrence_id)
        elif occurrence_id in self._waiting:  # seen waiting again: it keeps its place
            soon = []
        else:
            self._waiting[occurrence_id] = work
            self._unstarted[occurrence_id] = work
            if self.front and (self._deferred or len(self._waiting) > self.front):
                self._deferred[occurrence_id] = work
            soon = []
        if capacity is not None:
            soon += self._started_beyond(queued_at_worker(capacity), occurrence_id)
        return soon

    def leave(self, occurrence_id: int) -> list[W]:
        """``occurrence_id`` no longer waits (started, finished, forgotten); the deferred works
        that reached the front, to look at soon."""
        if self._waiting.pop(occurrence_id, None) is None:
            return []
        self._deferred.pop(occurrence_id, None)
        self._unstarted.pop(occurrence_id, None)
        promoted = []
        while self._deferred and len(self._waiting) - len(self._deferred) < self.front:
            promoted.append(self._deferred.pop(next(iter(self._deferred))))
        return promoted

    def clear(self) -> None:
        self._waiting.clear()
        self._deferred.clear()
        self._unstarted.clear()

    def _started_beyond(self, queued: int, answering: int) -> list[W]:
        """At most ``queued`` still wait at the worker, and FIFO says which: the newest. The
        older ones beyond that have started; each is looked at soon, once (``answering`` is
        being handled by its own answer)."""
        started = []
        while len(self._unstarted) > queued:
            oid = next(iter(self._unstarted))
            work = self._unstarted.pop(oid)
            self._deferred.pop(oid, None)
            if oid != answering:
                started.append(work)
        return started
