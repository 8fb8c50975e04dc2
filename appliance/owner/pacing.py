"""The owner core's paced dispatch: never more executions in flight at the worker than it takes.

Theory of operation (issue 17 "Paced dispatch"; docs/runner-core.md, "Paced dispatch")
-------------------------------------------------------------------------------------
The worker states its capacity in every protocol-1 exec and observation answer (``capacity``:
``max_concurrent``, ``max_queued``, ``free_slots``, ``queue_room``). The owner claims what the
running limit allows, as before (the folded ``ObserveAndClaim`` and ``ClaimOccurrence`` are
unchanged), and *sends* a claimed attempt only while fewer than the worker's
``max_concurrent + max_queued`` of its attempts are in flight there. So at most
min(``limits.running``, worker capacity) executions are in flight: the running limit bounds the
claims, the capacity bounds the sends.

Where capacity-waiting work sits: **claimed Running, unsent**, in FIFO order of claiming (the
``WAITING`` phase, appliance/owner/attempt_phase.py; the queue is appliance/owner/capacity_wait.py).
It holds a running reservation (it counts against ``limits.running``, so nothing is claimed past
the limit) and no permit (nothing was sent, so the worker never asked for one). That is what makes
waiting safe:

- it can never become Unknown: it has no deadline until it is sent, and a fence needs no evidence
  from the worker (no permit can exist) — a takeover fences it and the next owner claims the next
  attempt, without spending a retry; a cancel fences it at the worker (``fenced_before_consume``)
  and ends Cancelled; a grant that expires while it waits fences it (nothing can be admitted);
- it can never be dropped for capacity: a claimed occurrence is never dropped, and the checkpoint
  charge of a Running record is the same whether it runs or waits;
- the policies act on it as on running work: ``missed`` applies when a slot is observed, and a
  claimed record was observed in time, so waiting past its window is not "missed"; ``overlap``
  Skip/Queue see it as the schedule's live record (it is: it will run), so a later slot of the
  same schedule is skipped or queued as for any long run — the policy's drop, never a capacity one.

In flight = every attempt this owner sent (or re-observes after a takeover) and still tracks,
except an Unknown one whose last observation says it no longer runs (``lost``, or no record). A
send leaves room when its outcome is recorded, it is fenced, or it becomes such an Unknown. The
worker's own statement also gives room (``room``): free slots and queue room less the execs not
answered since, so a count that is too high (an execution the worker lost while its record still
reads ``running``) never stalls the queue.

Before the worker has stated anything (a fresh owner) one exec at a time is sent, as the probe
(an answer that says nothing — a reset, a timeout — lets the next one go); a protocol-1 answer
without ``capacity`` (an older worker) switches pacing off — the owner then dispatches exactly
as before pacing existed — and one with it paces. Every answer updates it (a restarted worker
with other limits). A ``pool_full`` answer stays the backstop, re-sent as
before: it can still happen when something the owner does not count holds the pool (a deposed
owner's reservation whose permit request is still in flight).

``Pacing`` is that policy and nothing else: the attempts tell it what the worker said (``learn``)
and ask it whether one more may go (``may_send``), giving it their own counts; it holds no
attempt. Outcomes are committed without holding every other event
(appliance/owner/commits.py), so the next waiting attempt goes as soon as the worker reported
the last one done.

Visible: each waiting attempt is noted once in its history (the committed ``NoteCapacityWait``,
timeline entry ``capacity_wait``; proposed in one entry per pass, only once every voter applies
it), ``status`` counts the waiting attempts, and the decision log's ``capacity_wait`` /
``capacity_send`` events feed the metrics (appliance/metrics/hooks.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from appliance.owner.worker_answers import Capacity

PACING_PROBE: Final = "probe"  # nothing stated yet: one exec unanswered at a time
PACING_PACED: Final = "paced"
PACING_OFF: Final = "off"  # an older worker: no capacity stated, dispatch as before
STILL_HELD: Final = frozenset({"running", "reserved"})  # an Unknown that may hold a slot


class Pacing:
    """How many attempts the worker takes, learned from its answers. A fleet (issue 33) has one
    per worker (appliance/owner/fleet.py): ``worker`` names it in the log."""

    def __init__(self, log: Callable[..., None], worker: str | None = None) -> None:
        self._log = log
        self._named = {} if worker is None else {"worker": worker}
        self.mode = PACING_PROBE
        self.capacity: Capacity | None = None

    def learn(self, capacity: Capacity | None, protocol_answer: bool) -> None:
        """Every worker answer updates the pacing: a stated capacity paces, a protocol-1 answer
        without one (an older worker) turns pacing off; no answer (a reset) changes nothing."""
        if capacity is not None:
            if self.mode != PACING_PACED or self.capacity != capacity:
                self._log(
                    "worker_capacity",
                    **self._named,
                    max_concurrent=capacity.max_concurrent,
                    max_queued=capacity.max_queued,
                    free_slots=capacity.free_slots,
                    queue_room=capacity.queue_room,
                )
            self.mode, self.capacity = PACING_PACED, capacity
        elif protocol_answer and self.mode != PACING_OFF:
            self.mode, self.capacity = PACING_OFF, None
            self._log("worker_capacity", **self._named, stated=False, pacing=PACING_OFF)

    def window(self) -> int | None:
        """How many attempts may be in flight at the worker; None: no bound (pacing off)."""
        if self.mode == PACING_OFF:
            return None
        if self.mode == PACING_PROBE or self.capacity is None:
            return 1
        return self.capacity.takes

    def room(self, in_flight: int, execs_outstanding: int) -> int | None:
        """How many more attempts may be sent now; None: no bound (pacing off).

        The owner's own count bounds it (``window - in_flight``), and so does the worker's
        latest statement less the execs not answered since (``free - outstanding``): whichever
        leaves more room. The count alone can be too high — an execution the worker lost while
        its record still reads ``running`` holds no slot there — and the statement alone can
        be stale; together they never stall while the worker has room and never send more than
        one of them allows (a ``pool_full`` is the backstop)."""
        window = self.window()
        if window is None:
            return None
        if self.mode == PACING_PROBE:
            # One exec at a time until an answer says what the worker is; an answer that says
            # nothing (a reset, a timeout) lets the next probe go.
            return 1 - execs_outstanding
        own = window - in_flight
        capacity = self.capacity
        if self.mode != PACING_PACED or capacity is None:
            return own
        stated = capacity.free_slots + capacity.queue_room - execs_outstanding
        return max(own, stated)

    def may_send(self, in_flight: int, execs_outstanding: int) -> bool:
        """Whether one more attempt may be sent now."""
        room = self.room(in_flight, execs_outstanding)
        return room is None or room > 0

    def view(self, in_flight: int, waiting: int) -> dict[str, Any]:
        """What ``status`` shows under ``dispatch``."""
        capacity = self.capacity
        return {
            "pacing": self.mode,
            "in_flight": in_flight,
            "waiting_for_capacity": waiting,
            "worker_capacity": None
            if capacity is None
            else {
                "max_concurrent": capacity.max_concurrent,
                "max_queued": capacity.max_queued,
                "free_slots": capacity.free_slots,
                "queue_room": capacity.queue_room,
            },
        }
