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

Where capacity-waiting work sits: **claimed Running, unsent**, in FIFO order of claiming. It holds
a running reservation (it counts against ``limits.running``, so nothing is claimed past the
limit) and no permit (nothing was sent, so the worker never asked for one). That is what makes
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

Outcomes are committed without holding every other event (``_commit_quietly`` below), as
admissions are: a burst's outcomes share Raft appends, and the next waiting attempt goes as soon
as the worker reported the last one done.

Visible: each waiting attempt is noted once in its history (the committed ``NoteCapacityWait``,
timeline entry ``capacity_wait``; proposed in one entry per pass, only once every voter applies
it), ``status`` counts the waiting attempts, and the decision log's ``capacity_wait`` /
``capacity_send`` events feed the metrics (appliance/metrics/hooks.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from appliance.core import state as core
from appliance.owner.applied import Accepted, Refused
from appliance.owner.attempts import AttemptDecisions, Work
from appliance.owner.events import DispatchRequest, Effect, Propose
from appliance.owner.fleet import PACING_OFF, PACING_PACED, PACING_PROBE, Fleet
from appliance.owner.serial import Chain, NotOwner, Uncertain
from appliance.owner.worker_answers import Capacity, ExecResult, ObserveResult, reached

STILL_HELD: Final = frozenset({"running", "reserved"})  # an Unknown that may hold a slot
__all__ = ["PACING_OFF", "PACING_PACED", "PACING_PROBE", "STILL_HELD", "PacedDispatch"]


def worker_of(work: Work) -> str:
    """The fleet worker ``work``'s claim binds (issue 33): its pacing is that worker's."""
    return str(work.binding.get("worker_id", ""))


class PacedDispatch(AttemptDecisions):
    """Paced dispatch, per worker of the fleet (issue 33: each worker states its own capacity,
    appliance/owner/fleet.py keeps what each said). ``worker_id`` None in the queries below means
    the whole fleet (a count) or, for a fleet of one, its only worker (room, window)."""

    _draining: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fleet = Fleet(self.time_scale)
        self._waiting: dict[int, Work] = {}  # occurrence id -> claimed, unsent (FIFO)
        self._to_note: list[Work] = []
        self._notes: dict[int, tuple[tuple[int, int], ...]] = {}  # proposal token -> attempts
        self._outcomes: dict[int, tuple[str, dict[str, Any]]] = {}  # token -> its log event
        self.capacity_waits_total = 0  # attempts that waited (the metric's counter)

    def _fleet_ids(self) -> list[str]:
        return [w.worker_id for w in self.cfg.remote.fleet]

    def _only_worker(self) -> str:
        """The worker the fleet-wide queries below mean: the first of the fleet in force."""
        ids = self._fleet_ids()
        return ids[0] if ids else ""

    @property
    def _pacing(self) -> str:
        """The pacing mode of the (first) worker: what a fleet of one paces by."""
        return self._fleet.pace(self._only_worker()).mode

    @property
    def _capacity(self) -> Capacity | None:
        return self._fleet.pace(self._only_worker()).capacity

    # ---- what status and the metrics read ----------------------------------------------------

    def waiting_for_capacity(self, worker_id: str | None = None) -> int:
        return sum(1 for w in self._waiting.values() if worker_id in (None, worker_of(w)))

    def in_flight(self, worker_id: str | None = None) -> int:
        return sum(
            1
            for w in self._work.values()
            if not w.unsent and not w.parked and worker_id in (None, worker_of(w))
        )

    def execs_outstanding(self, worker_id: str | None = None) -> int:
        """Exec requests sent and not answered yet (the worker's statement may not count them)."""
        return sum(
            1 for w in self._work.values() if w.exec_out and worker_id in (None, worker_of(w))
        )

    def room(self, worker_id: str | None = None) -> int | None:
        """How many more attempts may be sent to the worker now; None: no bound (pacing off).

        The owner's own count bounds it (``window - in_flight``), and so does the worker's
        latest statement less the execs not answered since (``free - outstanding``): whichever
        leaves more room. The count alone can be too high — an execution the worker lost while
        its record still reads ``running`` holds no slot there — and the statement alone can
        be stale; together they never stall while the worker has room and never send more than
        one of them allows (a ``pool_full`` is the backstop)."""
        worker = self._only_worker() if worker_id is None else worker_id
        pace = self._fleet.pace(worker)
        window = self._window(worker)
        if window is None:
            return None
        if pace.mode == PACING_PROBE:
            # One exec at a time until an answer says what the worker is; an answer that says
            # nothing (a reset, a timeout) lets the next probe go.
            return 1 - self.execs_outstanding(worker)
        own = window - self.in_flight(worker)
        capacity = pace.capacity
        if pace.mode != PACING_PACED or capacity is None:
            return own
        stated = capacity.free_slots + capacity.queue_room - self.execs_outstanding(worker)
        return max(own, stated)

    def pacing_view(self) -> dict[str, Any]:
        """``status``'s ``dispatch``: the totals, the (first) worker's pacing as before the fleet,
        and each worker's own (``workers``)."""
        capacity = self._capacity
        view: dict[str, Any] = {
            "pacing": self._pacing,
            "in_flight": self.in_flight(),
            "waiting_for_capacity": len(self._waiting),
            "worker_capacity": None
            if capacity is None
            else {
                "max_concurrent": capacity.max_concurrent,
                "max_queued": capacity.max_queued,
                "free_slots": capacity.free_slots,
                "queue_room": capacity.queue_room,
            },
        }
        view["workers"] = {
            worker: {
                **self._fleet.view(worker, self._wall_s),
                "in_flight": self.in_flight(worker),
                "waiting_for_capacity": self.waiting_for_capacity(worker),
            }
            for worker in self._fleet_ids()
        }
        return view

    def _window(self, worker_id: str | None = None) -> int | None:
        """How many attempts may be in flight at the worker; None: no bound (pacing off)."""
        pace = self._fleet.pace(self._only_worker() if worker_id is None else worker_id)
        if pace.mode == PACING_OFF:
            return None
        if pace.mode == PACING_PROBE or pace.capacity is None:
            return 1
        return pace.capacity.takes

    # ---- the hooks into the attempt decisions ------------------------------------------------

    def _start_exec(self, record: Any, binding: dict[str, Any], code: str) -> None:
        worker = str(binding.get("worker_id", ""))
        room = self.room(worker)
        if room is None or (not self.waiting_for_capacity(worker) and room > 0):
            super()._start_exec(record, binding, code)
            return
        window = self._window(worker)
        work = Work(record.id, record.attempt, binding, self._deadline_s(), record.due_s)
        work.code = code
        work.unsent = True
        self._work[record.id] = work
        self._waiting[record.id] = work
        self.capacity_waits_total += 1
        self._to_note.append(work)
        self._emit_log(
            "capacity_wait",
            occurrence=record.id,
            attempt=record.attempt,
            worker=worker,
            waiting=len(self._waiting),
            in_flight=self.in_flight(worker),
            window=window,
        )

    def _spawn(self, work: Work, request: Callable[[int], Effect]) -> None:
        super()._spawn(work, request)
        if isinstance(self._out[-1], DispatchRequest):
            work.exec_out = True

    def _exec_done(self, work: Work, result: ExecResult | Exception) -> Chain[None]:
        work.exec_out = False
        if isinstance(result, ExecResult):
            # accepted, refused and not_dispatched are read from a worker's own document.
            stated = result.protocol_answer or result.kind != "uncertain"
            self._learn(result.capacity, stated, worker_of(work))
        self._heard(worker_of(work), result)
        yield from super()._exec_done(work, result)

    def _observed(self, work: Work, result: ObserveResult | Exception) -> Chain[None]:
        if isinstance(result, ObserveResult):
            self._learn(result.capacity, result.status is not None, worker_of(work))
            if result.status is not None:
                work.parked = work.parked and result.status not in STILL_HELD
        self._heard(worker_of(work), result)
        yield from super()._observed(work, result)

    def _heard(self, worker_id: str, result: Any) -> None:
        """Every call's result tells whether the worker answers (appliance/owner/fleet.py)."""
        if reached(result):
            if self._fleet.answered(worker_id, self._wall_s):
                self._emit_log("worker_reachable", worker=worker_id)
        else:
            self._fleet.failed(worker_id, self._wall_s)

    def _observe_slowly(self, work: Work) -> None:
        # Past the deadline (Unknown): it holds a slot only while the worker says it runs.
        work.parked = work.last_observation not in STILL_HELD
        super()._observe_slowly(work)

    def _learn(self, capacity: Capacity | None, protocol_answer: bool, worker_id: str) -> None:
        """Every worker answer updates its pacing: a stated capacity paces, a protocol-1 answer
        without one (an older worker) turns pacing off; no answer (a reset) changes nothing."""
        pace = self._fleet.pace(worker_id)
        if capacity is not None:
            if pace.mode != PACING_PACED or pace.capacity != capacity:
                self._emit_log(
                    "worker_capacity",
                    worker=worker_id,
                    max_concurrent=capacity.max_concurrent,
                    max_queued=capacity.max_queued,
                    free_slots=capacity.free_slots,
                    queue_room=capacity.queue_room,
                )
            pace.mode, pace.capacity = PACING_PACED, capacity
        elif protocol_answer and pace.mode != PACING_OFF:
            pace.mode, pace.capacity = PACING_OFF, None
            self._emit_log("worker_capacity", worker=worker_id, stated=False, pacing=PACING_OFF)

    # ---- outcomes are committed concurrently -------------------------------------------------

    def _commit_quietly(
        self, command: Any, event: str, **fields: Any
    ) -> Chain[Accepted | Refused | None]:
        """A ``RecordOutcome`` is proposed without holding every other event until it commits
        (as admissions are): the worker's slot is free once it reported the outcome, so the
        next waiting attempt may go at once, and the outcomes of a burst share Raft appends.
        Its callers only log the result and then forget the attempt, which they did whatever
        the result was (an uncertain outcome is re-observed after the next takeover, as
        before). Everything else still waits for its commit."""
        if not isinstance(command, core.RecordOutcome) or self._gated(command) is not None:
            return (yield from super()._commit_quietly(command, event, **fields))
        token = next(self._tokens)
        self._outcomes[token] = (event, fields)
        self._out.append(Propose(token, command))
        return None

    def _outcome_done(self, token: int, outcome: Any) -> None:
        event, fields = self._outcomes.pop(token)
        try:
            result = self._interpret(outcome)
        except (NotOwner, Uncertain) as exc:
            self._emit_log(f"{event}_uncertain", **{**fields, "reason": str(exc)})
            return
        if isinstance(result, Refused):
            self._emit_log(f"{event}_refused", **{**fields, "reason": result.message})
            return
        state = getattr(result.value, "state", None)
        self._emit_log(event, state=getattr(state, "value", state), **fields)

    # ---- sending what waits ------------------------------------------------------------------

    def _pace(self) -> None:
        """Send the waiting attempts the worker has room for, oldest claim first; note the ones
        still waiting. Called by the owner after every event, when no decision is suspended."""
        if not self._waiting and not self._to_note:
            return
        if self.epoch is None:
            if self._waiting:
                self._emit_log("capacity_waiting_cleared", dropped=len(self._waiting), waiting=0)
            self._waiting.clear()  # the takeover fences them (no permit): nothing to send
            self._to_note.clear()
            return
        if self._draining:
            return  # no new sends; the next owner's takeover fences what still waits
        full: set[str] = set()  # workers without room: FIFO per worker, the others go on
        for oid, work in list(self._waiting.items()):
            if self._chain is not None:
                break  # a fence below waits for its commit; go on at the next event
            worker = worker_of(work)
            if worker in full:
                continue
            room = self.room(worker)
            if room is not None and room <= 0:
                full.add(worker)
                continue
            del self._waiting[oid]
            record = self._current(work)
            if record is None or record.state is not core.S.RUNNING or not work.unsent:
                continue  # done, cancelled or taken over meanwhile: nothing to send
            committed = self._committed(work, record)
            if not committed.epoch_held or committed.grant_expired:
                # No permit can be granted any more: fence it (dispatch_outcome.after_exec).
                self._run(self._exec_done(work, ExecResult("not_dispatched", code="capacity_wait")))
                continue
            work.unsent = False
            work.deadline_s = self._deadline_s()
            binding, code = work.binding, work.code
            self._emit_log(
                "capacity_send",
                occurrence=oid,
                attempt=work.attempt,
                worker=worker,
                waiting=len(self._waiting),
                late_ms=self._late_ms(work.due_s),
            )
            self._spawn(work, lambda token, b=binding, c=code: DispatchRequest(token, b, c))
        self._note_waiting()

    def _note_waiting(self) -> None:
        """One ``NoteCapacityWait`` for the attempts that began waiting and still wait."""
        pairs = tuple(
            (w.occurrence_id, w.attempt)
            for w in self._to_note
            if self._waiting.get(w.occurrence_id) is w
        )
        self._to_note.clear()
        if not pairs or self.epoch is None:
            return
        command = core.NoteCapacityWait(self.epoch, pairs, self._now_s())
        if self._gated(command) is not None:
            return  # not every voter applies it yet: the log and status still show the wait
        token = next(self._tokens)
        self._notes[token] = pairs
        self._out.append(Propose(token, command))

    def _note_done(self, token: int, outcome: Any) -> None:
        pairs = self._notes.pop(token, ())
        noted = getattr(outcome, "value", None)
        self._emit_log(
            "capacity_wait_noted",
            asked=len(pairs),
            noted=len(noted) if isinstance(noted, tuple) else None,
            outcome=type(outcome).__name__,
        )
