"""The owner core's decisions about one dispatched attempt: dispatch, observe, Unknown, cancel.

Theory of operation (SPEC §1, §3, §11): an attempt is dispatched once, and sent again only after a
definite "not dispatched" answer (exactly the committed binding). What an answer means is decided by
the pure functions of appliance/owner/dispatch_outcome.py from what the committed state says
(``ownership.committed_view``); ``_perform`` carries the decision out. The dispatch answer
(``_exec_done``): accepted → observe; "not dispatched" → re-send after a backoff (``_resend``, a
timer) while the attempt is Running, this owner holds the epoch and the grant holds; a definite
refusal with no permit → Failed; anything else without a committed permit → ``FenceDispatch`` (not
launched; the next attempt is claimed, no retry spent); with a permit → observe. Observation
(``_observed``) records a confirmed outcome; at ``timeout_seconds`` + ``OBSERVE_GRACE_S`` after the
last send, or after the last answer that it still waits for an engine slot (``waiting_for_slot``) or
the first that it started after waiting (the engine's timeout starts with the run), an attempt
without a permit is fenced (``_observation_deadline``) and one with a permit becomes Unknown, its
reason naming the missing evidence; an Unknown attempt is asked about every ``unknown_poll_s``, so a
later confirmed outcome still resolves it. When the version gate holds ``FenceDispatch`` back (not
every voter applies it yet) the attempt falls back to Unknown, its reason saying so. Cancellation
commits Cancelling before the worker is contacted; its answer (``_cancel_done``) makes it Cancelled
only on a confirmed stop, returns it on a fence before consume, keeps a completion that won, and
asks again otherwise. ``Work`` is owner-side memory, never replicated: after a takeover it is
rebuilt from the committed claims. What the owner is doing with each one is its ``phase``, moved
only through the table of appliance/owner/attempt_phase.py (``Work.move``).

Collaborators, each asked, none inherited: ``Pacing`` (appliance/owner/pacing.py) says whether one
more attempt may be sent and learns from every answer; ``CapacityWaits`` holds the claimed attempts
it had no room for; ``QueueView`` says when to look at one waiting in the worker's queue;
``Commits`` commits what an answer proved, serially or (a confirmed outcome) at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final

from appliance.config.rfc3339 import parse_rfc3339
from appliance.core import state as core
from appliance.core.occurrence import OccurrenceState
from appliance.owner import dispatch_outcome, ownership
from appliance.owner.applied import Accepted, NotYetApplicable, Refused
from appliance.owner.attempt_phase import AttemptPhase, PhaseEvent
from appliance.owner.binding import execution_id
from appliance.owner.capacity_wait import CapacityWaits
from appliance.owner.commits import Commits
from appliance.owner.config_in_force import ConfigInForce
from appliance.owner.events import (
    CancelAnswered,
    CancelRequest,
    DispatchRequest,
    Effect,
    ExecAnswered,
    ObserveAnswered,
    ObserveRequest,
)
from appliance.owner.fleet import Fleet
from appliance.owner.lateness import lateness_base
from appliance.owner.pacing import STILL_HELD, Pacing
from appliance.owner.queue import QueueView
from appliance.owner.report_text import failure_reason
from appliance.owner.serial import Chain, NotOwner, Serial, Uncertain
from appliance.owner.standing import Standing
from appliance.owner.work import (
    CANCEL_ATTEMPTS_MAX,
    CANCEL_RETRY_S,
    OBSERVE_AFTER_QUEUE_S,
    OBSERVE_FIRST_POLL_S,
    OBSERVE_GRACE_S,
    OBSERVE_POLL_MAX_S,
    OBSERVE_QUEUED_FIRST_POLL_S,
    UNKNOWN_POLL_S,
    Work,
    first_poll_s,
    waiting_for_slot,
)
from appliance.owner.worker_answers import CancelResult, ExecResult, ObserveResult, reached
from appliance.protocol import v1

S = OccurrenceState
P = AttemptPhase
E = PhaseEvent

__all__ = [
    "CANCEL_ATTEMPTS_MAX",
    "CANCEL_RETRY_S",
    "OBSERVE_AFTER_QUEUE_S",
    "OBSERVE_FIRST_POLL_S",
    "OBSERVE_GRACE_S",
    "OBSERVE_POLL_MAX_S",
    "OBSERVE_QUEUED_FIRST_POLL_S",
    "UNKNOWN_POLL_S",
    "Attempts",
    "Work",
]

OUTCOME_OF_STATUS: Final = {
    "completed": "completed",
    "failed": "failed",
    "timed_out": "timed_out",
    "cancelled": "cancelled",
    "lost": "lost",
}


def worker_of(work: Work) -> str:
    """The fleet worker ``work``'s claim binds (issue 33): its pacing and reachability."""
    return str(work.binding.get("worker_id", ""))


def retained_through(state: Any) -> int:
    """W of the committed state (core ``SchedulerState.retained_through``)."""
    return int(state.retained_through())


def with_retained_through(effect: Effect, floor: int) -> Effect:
    """Exec and observation requests carry W, so the worker can prune (docs/worker.md)."""
    if isinstance(effect, DispatchRequest | ObserveRequest):
        return replace(effect, retained_through=floor)
    return effect


class Attempts:
    """Every attempt this owner dispatched (or re-observes, or cancels) and its decisions."""

    def __init__(
        self,
        serial: Serial,
        standing: Standing,
        config: ConfigInForce,
        unknown_poll_s: float,
    ) -> None:
        self._serial = serial
        self._standing = standing
        self._config = config
        self.unknown_poll_s = unknown_poll_s
        # Each worker of the fleet is paced by what it said, and is reachable or not, by itself
        # (issue 33, appliance/owner/fleet.py).
        self.fleet = Fleet(serial.time_scale, serial.log)
        self.waits: CapacityWaits[Work] = CapacityWaits(serial)
        self.commits = Commits(serial)
        self.work: dict[int, Work] = {}  # occurrence id -> dispatched attempt
        self._tasks: dict[int, Work] = {}  # worker-call token -> its work
        self._queue: QueueView[Work] = QueueView()  # last seen waiting in the worker's queue

    # ---- what status, the metrics and the driver read ----------------------------------------

    def open_occurrences(self) -> list[int]:
        """The occurrences with a worker call in flight or an observation still going."""
        return sorted(w.occurrence_id for w in self.work.values() if w.busy or w.observing)

    def busy_count(self) -> int:
        return sum(1 for w in self.work.values() if w.busy)

    def fleet_ids(self) -> list[str]:
        return [spec.worker_id for spec in self._config.get().remote.fleet]

    def pacing_for(self, worker: str | None = None) -> Pacing:
        """The worker's pacing; None: the fleet's first worker (a fleet of one's only one)."""
        if worker is None:
            ids = self.fleet_ids()
            worker = ids[0] if ids else ""
        return self.fleet.pace(worker)

    @property
    def pacing(self) -> Pacing:
        """The first worker's pacing (what a fleet of one paces by)."""
        return self.pacing_for(None)

    def in_flight(self, worker: str | None = None) -> int:
        return sum(
            1
            for w in self.work.values()
            if w.sends > 0 and not w.parked and worker in (None, worker_of(w))
        )

    def execs_outstanding(self, worker: str | None = None) -> int:
        """Exec requests sent and not answered yet (the worker's statement may not count them)."""
        return sum(
            1
            for w in self.work.values()
            if w.phase is AttemptPhase.SENDING and worker in (None, worker_of(w))
        )

    def waiting(self, worker: str | None = None) -> int:
        """Claimed attempts waiting, unsent, for the worker's capacity."""
        return sum(1 for _, w in self.waits.oldest_first() if worker in (None, worker_of(w)))

    def _may_send(self, worker: str) -> bool:
        """Whether the worker has room for one more attempt (``Pacing.may_send``)."""
        return self.fleet.pace(worker).may_send(
            self.in_flight(worker), self.execs_outstanding(worker)
        )

    def pacing_view(self) -> dict[str, Any]:
        """``status``'s ``dispatch``: the totals with the (first) worker's pacing, as before the
        fleet, and each worker's own under ``workers``."""
        view = self.pacing.view(self.in_flight(), len(self.waits))
        view["workers"] = {
            worker: {
                **self.fleet.pace(worker).view(self.in_flight(worker), self.waiting(worker)),
                **self.fleet.view(worker, self._serial.wall_s),
            }
            for worker in self.fleet_ids()
        }
        return view

    def heard(self, worker: str, result: Any) -> None:
        """Every call's result tells whether the worker answers (appliance/owner/fleet.py)."""
        if reached(result):
            if self.fleet.answered(worker, self._serial.wall_s):
                self._serial.log("worker_reachable", worker=worker)
                self._serial.dirty = True  # what waited for a worker may be placed now
        else:
            self.fleet.failed(worker, self._serial.wall_s)

    # ---- tracking ----------------------------------------------------------------------------

    def deadline_s(self) -> float:
        return self._serial.wall_s + self._config.get().remote.timeout_seconds + OBSERVE_GRACE_S

    def clear(self) -> None:
        """Ownership ended: nothing is tracked any more (the next owner re-observes and learns
        the fleet again)."""
        self.work.clear()
        self._queue.clear()
        self.fleet.clear()

    def start(self, record: Any, binding: dict[str, Any], code: str) -> None:
        """Dispatch a claim this owner just committed, or, without room at the worker, keep it
        waiting (FIFO: only when nothing waits ahead of it does a new claim go at once)."""
        deadline_s = self.deadline_s()
        worker = str(binding.get("worker_id", ""))
        pacing = self.fleet.pace(worker)
        unpaced = pacing.window() is None  # an older worker: dispatch as before pacing
        if unpaced or (self.waiting(worker) == 0 and self._may_send(worker)):
            work = Work(record.id, record.attempt, binding, deadline_s, P.SENDING, record.due_s)
            work.code = code
            self.work[record.id] = work
            self._spawn(work, lambda token: DispatchRequest(token, binding, code))
            return
        window = pacing.window()
        work = Work(record.id, record.attempt, binding, deadline_s, P.WAITING, record.due_s)
        work.code, work.sends = code, 0
        self.work[record.id] = work
        self.waits.add(work)
        self._serial.log(
            "capacity_wait",
            occurrence=record.id,
            attempt=record.attempt,
            worker=worker,
            waiting=len(self.waits),
            in_flight=self.in_flight(worker),
            window=window,
        )

    def adopt_existing(self, occurrence_id: int, deadline_s: float) -> Work | None:
        """Track an attempt an earlier owner (or process) dispatched: its committed binding."""
        read = self._serial.read
        found = read(lambda st: st.occurrences.get(occurrence_id))
        if found is None or found.terminal:
            return None
        binding = read(lambda st: ownership.binding_of(st, found))
        if binding is None:
            self._serial.log("binding_unknown", occurrence=occurrence_id, attempt=found.attempt)
            return None
        work = Work(occurrence_id, found.attempt, binding, deadline_s, P.ADOPTED, found.due_s)
        self.work[occurrence_id] = work
        return work

    def forget(self, work: Work) -> None:
        """Stop tracking ``work`` — only if it is still the tracked one. A late result of an
        earlier attempt (an observation in flight when ownership changed hands) must never
        remove the ``Work`` of the attempt that replaced it: that attempt's own results would
        then be dropped and it would stay Running for ever."""
        if self.work.get(work.occurrence_id) is work:
            del self.work[work.occurrence_id]
            self._look_soon(self._queue.leave(work.occurrence_id))

    def _spawn(self, work: Work, request: Callable[[int], Effect]) -> None:
        """Send one worker call for ``work``; its phase says which is in flight (the caller
        moved it: SEND, LOOK or CANCEL)."""
        token = self._serial.token()
        self._tasks[token] = work
        effect = with_retained_through(request(token), self._serial.read(retained_through))
        self._serial.emit(effect)

    def _current(self, work: Work) -> Any:
        """The committed record if it is still this work's attempt, else None."""
        if self.work.get(work.occurrence_id) is not work:
            return None
        record = self._serial.read(lambda st: st.occurrences.get(work.occurrence_id))
        if record is None or record.attempt != work.attempt:
            self.forget(work)
            return None
        return record

    def _committed(self, work: Work, record: Any) -> dispatch_outcome.Committed:
        """What the committed state says about ``work``'s attempt, for dispatch_outcome."""
        epoch = self._standing.epoch
        epoch_held = epoch is not None and work.binding.get("epoch") == epoch
        # The attempt's own grant (its binding's authority): a renewal after the claim does not
        # extend what admission will accept for this attempt (core/amendments.py).
        expires_s = parse_rfc3339(work.binding["authority"]["expires_at"]).timestamp()
        grant_expired = self._serial.wall_s >= expires_s
        return self._serial.read(
            lambda st: ownership.committed_view(
                st, record, epoch_held=epoch_held, grant_expired=grant_expired
            )
        )

    def _namespace(self) -> str:
        return self._config.get().remote.namespace

    def _execution_id(self, work: Work) -> str:
        return execution_id(work.binding["schedule_id"], work.occurrence_id, work.attempt)

    # ---- sending what waits for capacity ------------------------------------------------------

    def pace(self) -> None:
        """Send the waiting attempts the worker has room for, oldest claim first; note the ones
        still waiting. Called by the owner after every event, when no decision is suspended."""
        if not self.waits.pending():
            return
        if self._standing.epoch is None:
            dropped = self.waits.clear()  # the takeover fences them (no permit): nothing to send
            if dropped:
                self._serial.log("capacity_waiting_cleared", dropped=dropped, waiting=0)
            return
        if self._standing.draining:
            return  # no new sends; the next owner's takeover fences what still waits
        full: set[str] = set()  # workers without room: FIFO per worker, the others go on
        for oid, work in self.waits.oldest_first():
            if self._serial.suspended:
                break  # a fence below waits for its commit; go on at the next event
            worker = worker_of(work)
            if worker in full or not self._may_send(worker):
                full.add(worker)
                continue
            self.waits.remove(oid)
            record = self._current(work)
            if record is None or record.state is not S.RUNNING or work.phase is not P.WAITING:
                continue  # done, cancelled or taken over meanwhile: nothing to send
            committed = self._committed(work, record)
            if not committed.epoch_held or committed.grant_expired:
                # No permit can be granted any more: fence it (dispatch_outcome.after_exec).
                self._serial.run(
                    self._exec_done(work, ExecResult("not_dispatched", code="capacity_wait"))
                )
                continue
            work.sends = 1
            work.deadline_s = self.deadline_s()
            binding, code = work.binding, work.code
            self._serial.log(
                "capacity_send",
                occurrence=oid,
                attempt=work.attempt,
                worker=worker,
                waiting=len(self.waits),
                late_ms=self._serial.late_ms(work.due_s),
            )
            work.move(E.SEND)
            self._spawn(work, lambda token, b=binding, c=code: DispatchRequest(token, b, c))
        self.waits.note(self._standing.epoch)

    # ---- results of worker calls: the decision points ----------------------------------------

    def answered(self, event: ExecAnswered | ObserveAnswered | CancelAnswered) -> None:
        """A worker call's answer: the decision it leads to (a serial one when it commits)."""
        work = self._tasks.pop(event.token, None)
        if work is None:
            return
        if isinstance(event, ExecAnswered):
            self._serial.run(self._exec_done(work, event.result))
        elif isinstance(event, ObserveAnswered):
            self._serial.run(self._observed(work, event.result))
        else:
            self._serial.run(self._cancel_done(work, event.result))

    def _exec_done(self, work: Work, result: ExecResult | Exception) -> Chain[None]:
        """The dispatch's answer: accepted → observe; otherwise ``dispatch_outcome.after_exec``
        decides from the committed state (re-send, Failed, fence, or observe)."""
        work.move(E.EXEC_ANSWERED)
        if isinstance(result, ExecResult):
            # accepted, refused and not_dispatched are read from a worker's own document.
            stated = result.protocol_answer or result.kind != "uncertain"
            self.fleet.pace(worker_of(work)).learn(result.capacity, stated)
        self.heard(worker_of(work), result)
        queued = isinstance(result, ExecResult) and result.kind == "accepted"
        queued = queued and first_poll_s(result.capacity) == OBSERVE_QUEUED_FIRST_POLL_S
        self._after_answer(work, result, waiting=queued)
        record = self._current(work)
        if record is None:
            return
        ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
        if isinstance(result, Exception):
            result = ExecResult("uncertain", detail=f"client error: {result!r}")
        if result.kind == "accepted":
            base_s, live = lateness_base(record, work.attempt)  # owner/lateness.py (issue 35)
            self._serial.log(
                "dispatch_accepted",
                execution_id=result.execution_id,
                late_ms=self._serial.late_ms(base_s),
                slot="live" if live else "backlog",
                **ids,
            )
            self._start_observing(work, first_poll_s(result.capacity))
            return
        if result.kind == "retired":
            # At or below the worker's floor W, which a committed state set: the occurrence left
            # the checkpoint, and this view only lags behind that commit. Never a new dispatch
            # and never a fence or an outcome: observe, and _current drops it once applied.
            self._serial.log("dispatch_retired", detail=result.detail, **ids)
            self._start_observing(work)
            return
        decision = dispatch_outcome.after_exec(
            result.kind, result.code, result.detail, self._committed(work, record), work.sends
        )
        yield from self._perform(work, record, decision)

    def observe(self, work: Work) -> None:
        """Start observing an attempt (after a takeover: one an earlier owner dispatched)."""
        self._start_observing(work)

    def _start_observing(self, work: Work, first_s: float = OBSERVE_FIRST_POLL_S) -> None:
        work.move(E.OBSERVE)
        work.poll_s = first_s
        self._look_in(work, work.poll_s)

    def _look_in(self, work: Work, delay_s: float) -> None:
        """The next look at ``work`` after ``delay_s``; any earlier-set look is void."""
        work.look += 1
        look = work.look
        self._serial.later(delay_s, lambda: self._poll(work, look))

    def _after_answer(
        self, work: Work, result: ExecResult | ObserveResult | Exception, *, waiting: bool
    ) -> None:
        """Every exec and observation answer updates the view of the worker's queue; the
        executions that reached its front, or all when it drained, are looked at soon."""
        capacity = getattr(result, "capacity", None)
        self._look_soon(
            self._queue.answer(work.occurrence_id, work, waiting=waiting, capacity=capacity)
        )

    def _look_soon(self, works: list[Work]) -> None:
        for work in works:
            if self.work.get(work.occurrence_id) is work and work.observing and not work.busy:
                work.poll_s = OBSERVE_FIRST_POLL_S  # its backoff starts again: it starts soon
                self._look_in(work, OBSERVE_AFTER_QUEUE_S)

    def _poll(self, work: Work, look: int) -> None:
        if self.work.get(work.occurrence_id) is not work or work.busy or look != work.look:
            return
        if self._queue.deferred(work.occurrence_id):
            # Deep in the worker's queue: looked at when it reaches the front, or once half of
            # its deadline's window is left (an answer that it still waits restarts it).
            window_s = self._config.get().remote.timeout_seconds + OBSERVE_GRACE_S
            left_s = work.deadline_s - window_s / 2 - self._serial.wall_s
            if left_s > 0:
                self._look_in(work, max(OBSERVE_FIRST_POLL_S, left_s / self._serial.time_scale))
                return
        eid, worker = self._execution_id(work), work.binding.get("worker_id")
        work.move(E.LOOK)
        self._spawn(work, lambda token: ObserveRequest(token, eid, worker_id=worker))

    def _observed(self, work: Work, result: ObserveResult | Exception) -> Chain[None]:
        """The observation's answer: a confirmed outcome is recorded; ``fenced`` and the
        deadline are decided by dispatch_outcome (a fence without a permit, Unknown with one)."""
        work.move(E.OBSERVE_ANSWERED)
        if isinstance(result, ObserveResult):
            self.fleet.pace(worker_of(work)).learn(result.capacity, result.status is not None)
            if result.status is not None:
                work.parked = work.parked and result.status not in STILL_HELD
        self.heard(worker_of(work), result)
        self._after_answer(work, result, waiting=waiting_for_slot(result))
        record = self._current(work)
        if record is None or record.terminal:
            self.forget(work)
            return
        if record.state is S.CANCELLING:
            return  # the cancellation path owns it now
        ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
        status = result.status if isinstance(result, ObserveResult) else None
        outcome = OUTCOME_OF_STATUS.get(status or "")
        if outcome is not None and not (outcome == "lost" and record.state is S.UNKNOWN):
            document = result.document if isinstance(result, ObserveResult) else None
            reason = None
            if outcome != "completed" and document is not None:
                # "uncaught exception: Error: boom", bounded (appliance/owner/report_text.py).
                reason = (
                    failure_reason(document)
                    or str(document.get("reason") or document.get("error") or outcome)[:200]
                )
            self.commits.outcome(
                core.RecordOutcome(
                    work.occurrence_id,
                    work.attempt,
                    outcome,
                    self._serial.now_s(),
                    reason=reason,
                    execution_id=self._execution_id(work),
                ),
                "outcome",
                worker_status=status,
                **ids,
            )
            self.forget(work)
            self._serial.dirty = True
            return
        work.last_observation = status or (
            result.detail if isinstance(result, ObserveResult) else repr(result)
        )
        if status == "fenced":
            fence = (
                (result.document or {}).get("fence") if isinstance(result, ObserveResult) else None
            )
            why = str((fence or {}).get("reason") or "no reason given")[:200]
            decision = dispatch_outcome.after_fenced_observation(self._committed(work, record), why)
            if not isinstance(decision, dispatch_outcome.Observe):
                yield from self._perform(work, record, decision)
                return
        waiting = waiting_for_slot(result)
        if waiting or (work.waited_for_slot and status == "running"):
            # The worker answered: accepted, not started (its engine's slots are busy), or
            # first seen started after that. The engine's timeout starts with the run, so either
            # restarts the deadline, as a send does: a long queue at a reachable worker is no
            # reason for Unknown.
            work.waited_for_slot = waiting
            work.deadline_s = max(work.deadline_s, self.deadline_s())
        if self._serial.wall_s >= work.deadline_s:
            yield from self._observation_deadline(work, record)
            return
        work.poll_s = min(work.poll_s * 2, OBSERVE_POLL_MAX_S)
        self._look_in(work, work.poll_s)

    def _observation_deadline(self, work: Work, record: Any) -> Chain[None]:
        """No outcome within timeout_seconds + grace of the last send: without a permit the
        attempt is fenced, with one it is Unknown (``dispatch_outcome.at_deadline``)."""
        decision = dispatch_outcome.at_deadline(
            self._committed(work, record), work.last_observation
        )
        if not isinstance(decision, dispatch_outcome.Observe):
            yield from self._perform(work, record, decision)
            return
        self._observe_slowly(work)

    def _observe_slowly(self, work: Work) -> None:
        # Unknown is never retried, but it is still observed: the real result wins. Past the
        # deadline it holds a worker slot only while the worker says it runs (pacing.py).
        work.parked = work.last_observation not in STILL_HELD
        work.poll_s = self.unknown_poll_s
        self._look_in(work, work.poll_s)

    # ---- dispatch decisions (appliance/owner/dispatch_outcome.py decides; this performs) -----

    def _perform(self, work: Work, record: Any, decision: dispatch_outcome.Decision) -> Chain[None]:
        ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
        now_s = self._serial.now_s()
        if isinstance(decision, dispatch_outcome.Resend):
            work.last_observation = f"not dispatched: {decision.code}"
            self._serial.log(
                "dispatch_not_dispatched", sends=work.sends, delay_s=decision.delay_s, **ids
            )
            work.move(E.BACK_OFF)  # nothing else may touch it until the re-send is answered
            self._serial.later(decision.delay_s, lambda: self._resend(work))
            return
        if isinstance(decision, dispatch_outcome.RecordFailed):
            self.commits.outcome(
                core.RecordOutcome(
                    work.occurrence_id, work.attempt, "failed", now_s, reason=decision.reason
                ),
                "outcome",
                reason=decision.reason,
                **ids,
            )
            self.forget(work)
            return
        if isinstance(decision, dispatch_outcome.Fence):
            command = ownership.fence_dispatch_command(
                self._namespace(), self._standing.epoch or 0, record, decision, now_s
            )
            result = yield from self.commits.serially(
                command, "dispatch_fenced", reason=decision.reason, **ids
            )
            if isinstance(result, Accepted):
                self.forget(work)
                self._serial.dirty = True
                return
            if isinstance(result, Refused) and isinstance(result.error, NotYetApplicable):
                # The version gate held the fence back (nothing was proposed): today's answer,
                # Unknown, rather than asking again at every deadline for ever.
                decision = dispatch_outcome.MarkUnknown(
                    f"{decision.reason}; the fence could not be proposed because not every "
                    f"voter applies FenceDispatch yet ({result.message})"
                )
            # Otherwise refused (an Admit committed first) or uncertain: observe; the deadline
            # decides from the committed state.
        if isinstance(decision, dispatch_outcome.MarkUnknown) and record.state is S.RUNNING:
            yield from self.commits.serially(
                ownership.mark_unknown_command(self._namespace(), record, decision.reason, now_s),
                "outcome",
                reason=decision.reason,
                **ids,
            )
        if not work.observing or self._serial.wall_s < work.deadline_s:
            self._start_observing(work)
        else:
            self._observe_slowly(work)

    def _resend(self, work: Work) -> None:
        """The re-send timer: send exactly the committed binding again — only while it is still
        this owner's Running attempt and the grant holds (otherwise ``after_exec`` fences it)."""
        work.move(E.RESEND_DUE)
        record = self._current(work)
        if record is None:
            return
        committed = self._committed(work, record)
        if record.state is not S.RUNNING or not committed.epoch_held or committed.grant_expired:
            code = work.last_observation.removeprefix("not dispatched: ")
            self._serial.run(self._exec_done(work, ExecResult("not_dispatched", code=code)))
            return
        work.sends += 1
        work.deadline_s = self.deadline_s()
        binding, code = work.binding, work.code
        work.move(E.SEND)
        self._spawn(work, lambda token: DispatchRequest(token, binding, code))

    # ---- failover (issue 33) -------------------------------------------------------------------

    def fence_unreachable(self, worker: str) -> Chain[None]:
        """Fence every attempt of an unreachable ``worker`` that holds no committed permit —
        waiting for its capacity, or observed while no permit is committed — in one batch of
        ``FenceDispatch`` (each refused at apply where a permit exists: the terminal fence of
        seeds/000), so each occurrence is claimed again as the next attempt, elsewhere, with no
        retry spent. An attempt with a call in flight is left to that call's answer."""
        planned: list[tuple[Work, Any]] = []
        now_s = self._serial.now_s()
        for work in [w for w in self.work.values() if worker_of(w) == worker]:
            if work.busy:
                continue
            record = self._current(work)
            if record is None or record.state is not S.RUNNING:
                continue
            committed = self._committed(work, record)
            if committed.permit is not None or not committed.epoch_held:
                continue  # observed: Unknown at its deadline if it stays silent
            reason = (
                f"worker {worker} unreachable and no permit committed: fenced, the occurrence "
                "is placed again"
            )
            fence = dispatch_outcome.Fence(
                reason, dispatch_outcome.fence_backoff_s(committed.fenced_before)
            )
            command = ownership.fence_dispatch_command(
                self._namespace(), self._standing.epoch or 0, record, fence, now_s
            )
            planned.append((work, command))
        if not planned:
            return
        outcomes = yield from self._serial.proposals([command for _, command in planned])
        for (work, _command), outcome in zip(planned, outcomes, strict=True):
            ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
            try:
                result = self._serial.interpret(outcome)
            except (NotOwner, Uncertain) as exc:
                self._serial.log("unreachable_fence_uncertain", reason=str(exc), **ids)
                continue
            if isinstance(result, Accepted):
                self._serial.log("unreachable_fenced", worker=worker, **ids)
                if work.occurrence_id in self.waits.waiting_ids():
                    self.waits.remove(work.occurrence_id)
                self.forget(work)
            else:
                self._serial.log("unreachable_fence_refused", reason=result.message, **ids)
        self._serial.dirty = True

    # ---- cancellation ------------------------------------------------------------------------

    def cancel(self, work: Work) -> None:
        """Ask the worker to stop the attempt (its Cancelling is committed already); asked
        again, up to ``CANCEL_ATTEMPTS_MAX`` times, until a definite answer."""
        if self.work.get(work.occurrence_id) is not work:
            return  # forgotten meanwhile (settled, or no longer this owner's): a stale retry
        if work.busy:
            self._serial.later(CANCEL_RETRY_S, lambda: self.cancel(work))
            return
        work.cancel_attempts += 1
        binding = work.binding
        work.move(E.CANCEL)
        self._spawn(work, lambda token: CancelRequest(token, binding))

    def _cancel_done(self, work: Work, result: CancelResult | Exception) -> Chain[None]:
        """The cancellation's answer: Cancelled only on a confirmed stop; a fence before consume
        returns the attempt; a completion that won keeps its result; else ask again."""
        work.move(E.CANCEL_ANSWERED)
        self.heard(worker_of(work), result)
        record = self._current(work)
        if record is None or record.state is not S.CANCELLING:
            self.forget(work)
            return
        ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
        answer = result.result if isinstance(result, CancelResult) else None
        now_s = self._serial.now_s()
        if answer == v1.CANCEL_STOPPED:
            yield from self.commits.serially(
                core.ConfirmCancelled(work.occurrence_id, work.attempt, now_s), "outcome", **ids
            )
        elif answer == v1.CANCEL_FENCED_BEFORE_CONSUME:
            yield from self.commits.serially(
                ownership.fence_after_cancel_command(self._namespace(), record, now_s),
                "outcome",
                **ids,
            )
        elif answer == v1.CANCEL_COMPLETED and isinstance(result, CancelResult):
            status = (result.report or {}).get("status")
            outcome = OUTCOME_OF_STATUS.get(str(status))
            if outcome is None or outcome == "lost":
                self._retry_cancel(work, f"completed without a usable report ({status})")
                return
            self.commits.outcome(
                core.RecordOutcome(work.occurrence_id, work.attempt, outcome, now_s),
                "outcome",
                worker_status=status,
                **ids,
            )
        else:
            detail = result.detail if isinstance(result, CancelResult) else repr(result)
            self._retry_cancel(work, f"{answer or 'no answer'} {detail}".strip())
            return
        self.forget(work)
        self._serial.dirty = True

    def _retry_cancel(self, work: Work, why: str) -> None:
        if work.cancel_attempts >= CANCEL_ATTEMPTS_MAX:
            self._serial.log(
                "cancel_unresolved", occurrence=work.occurrence_id, attempt=work.attempt, why=why
            )
            self.forget(work)
            return
        self._serial.later(CANCEL_RETRY_S, lambda: self.cancel(work))
