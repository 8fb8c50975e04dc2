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
rebuilt from the committed claims.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final

from appliance.config.rfc3339 import parse_rfc3339
from appliance.config.runner import RunnerConfig
from appliance.core import state as core
from appliance.core.occurrence import OccurrenceState
from appliance.owner import dispatch_outcome, ownership
from appliance.owner.applied import Accepted, NotYetApplicable, Refused
from appliance.owner.binding import execution_id
from appliance.owner.events import (
    CancelRequest,
    DispatchRequest,
    Effect,
    ObserveRequest,
)
from appliance.owner.queue import QueueView
from appliance.owner.report_text import failure_reason
from appliance.owner.serial import Chain, NotOwner, SerialCore, Uncertain
from appliance.owner.worker_answers import CancelResult, Capacity, ExecResult, ObserveResult
from appliance.protocol import v1

S = OccurrenceState

OBSERVE_GRACE_S: Final = 30  # wall (possibly scaled) seconds past timeout_seconds
OBSERVE_FIRST_POLL_S: Final = 0.05  # real seconds
OBSERVE_POLL_MAX_S: Final = 2.0
# Accepted behind a queue (every engine slot busy): the first look comes later. A burst queued at
# the worker otherwise costs several early observations per execution, each on the same CPU the
# queue needs; the backoff reaches OBSERVE_POLL_MAX_S for a long wait either way.
OBSERVE_QUEUED_FIRST_POLL_S: Final = 0.4  # real seconds
# An execution waiting in the worker's queue is looked at this soon once it reaches the front or
# the queue drained (appliance/owner/queue.py), not at the end of its backoff: without it
# the tail of a burst was recorded up to OBSERVE_POLL_MAX_S after it ended.
OBSERVE_AFTER_QUEUE_S: Final = 0.05  # real seconds
# After the deadline an Unknown attempt is still asked about, slowly, so that a confirmed outcome
# that arrives later (a healed link, a worker back up) resolves it (SPEC §3). Bounded: Unknown
# attempts hold running reservations, so there are at most limits.running of them.
UNKNOWN_POLL_S: Final = 10.0  # real seconds
CANCEL_RETRY_S: Final = 0.5
CANCEL_ATTEMPTS_MAX: Final = 40

OUTCOME_OF_STATUS: Final = {
    "completed": "completed",
    "failed": "failed",
    "timed_out": "timed_out",
    "cancelled": "cancelled",
    "lost": "lost",
}


@dataclass
class Work:
    """What the owner tracks for one dispatched attempt (owner-side, never replicated)."""

    occurrence_id: int
    attempt: int
    binding: dict[str, Any]
    deadline_s: float  # wall (scaled) time after which a silent attempt is fenced or Unknown
    due_s: int = 0  # the occurrence's due instant (for the latency fields of the logs)
    busy: bool = False  # a worker call for it is in flight
    poll_s: float = OBSERVE_FIRST_POLL_S
    cancel_attempts: int = 0
    observing: bool = False
    code: str = ""  # the committed claim's code: a re-send sends exactly the same request
    sends: int = 1  # sends of this binding (re-sent only after "not dispatched")
    last_observation: str = ""  # why the last observation gave no outcome (for the reasons)
    unsent: bool = False  # claimed, waiting for the worker's capacity (owner_pacing.py)
    parked: bool = False  # Unknown and no longer running at the worker: holds no slot there
    exec_out: bool = False  # an exec request for it is unanswered (owner_pacing.py)
    waited_for_slot: bool = False  # the last observation: accepted, not started yet
    look: int = 0  # the generation of its next look: a look brought forward voids the old timer


def first_poll_s(capacity: Capacity | None) -> float:
    """When to look first at an accepted execution: later when the worker's answer shows every
    slot held and something queued (FIFO: this one waits behind it)."""
    if (
        capacity is not None
        and capacity.free_slots == 0
        and capacity.queue_room < capacity.max_queued
    ):
        return OBSERVE_QUEUED_FIRST_POLL_S
    return OBSERVE_FIRST_POLL_S


def waiting_for_slot(result: ObserveResult | Exception) -> bool:
    """A protocol-1 observation of an accepted execution that has not started: ``running``
    with ``started_at: null`` (docs/protocol.md, the observation route)."""
    if not isinstance(result, ObserveResult) or result.status != "running":
        return False
    document = result.document
    return isinstance(document, dict) and "started_at" in document and not document["started_at"]


def retained_through(state: Any) -> int:
    """W of the committed state (core ``SchedulerState.retained_through``)."""
    return int(state.retained_through())


def with_retained_through(effect: Effect, floor: int) -> Effect:
    """Exec and observation requests carry W, so the worker can prune (docs/worker.md)."""
    if isinstance(effect, DispatchRequest | ObserveRequest):
        return replace(effect, retained_through=floor)
    return effect


class AttemptDecisions(SerialCore):
    cfg: RunnerConfig
    unknown_poll_s: float
    epoch: int | None
    _work: dict[int, Work]  # occurrence id -> dispatched attempt
    _tasks: dict[int, Work]  # worker-call token -> its work
    _queue: QueueView[Work]  # the attempts last seen waiting in the worker's queue

    def _deadline_s(self) -> float:
        return self._wall_s + self.cfg.remote.timeout_seconds + OBSERVE_GRACE_S

    def _start_exec(self, record: Any, binding: dict[str, Any], code: str) -> None:
        work = Work(record.id, record.attempt, binding, self._deadline_s(), record.due_s)
        work.code = code
        self._work[record.id] = work
        self._spawn(work, lambda token: DispatchRequest(token, binding, code))

    # ---- worker calls ------------------------------------------------------------------------

    def _spawn(self, work: Work, request: Callable[[int], Effect]) -> None:
        work.busy = True
        token = next(self._tokens)
        self._tasks[token] = work
        self._out.append(with_retained_through(request(token), self._read(retained_through)))

    def _forget(self, work: Work) -> None:
        """Stop tracking ``work`` — only if it is still the tracked one. A late result of an
        earlier attempt (an observation in flight when ownership changed hands) must never
        remove the ``Work`` of the attempt that replaced it: that attempt's own results would
        then be dropped and it would stay Running for ever."""
        if self._work.get(work.occurrence_id) is work:
            del self._work[work.occurrence_id]
            self._look_soon(self._queue.leave(work.occurrence_id))

    def _current(self, work: Work) -> Any:
        """The committed record if it is still this work's attempt, else None."""
        if self._work.get(work.occurrence_id) is not work:
            return None
        record = self._read(lambda st: st.occurrences.get(work.occurrence_id))
        if record is None or record.attempt != work.attempt:
            self._forget(work)
            return None
        return record

    def _committed(self, work: Work, record: Any) -> dispatch_outcome.Committed:
        """What the committed state says about ``work``'s attempt, for dispatch_outcome."""
        epoch_held = self.epoch is not None and work.binding.get("epoch") == self.epoch
        # The attempt's own grant (its binding's authority): a renewal after the claim does not
        # extend what admission will accept for this attempt (core/amendments.py).
        expires_s = parse_rfc3339(work.binding["authority"]["expires_at"]).timestamp()
        grant_expired = self._wall_s >= expires_s
        return self._read(
            lambda st: ownership.committed_view(
                st, record, epoch_held=epoch_held, grant_expired=grant_expired
            )
        )

    def _heard(self, worker_id: str, result: Any) -> None:
        """Whether the worker answered (per worker: appliance/owner/pacing.py overrides)."""

    def _execution_id(self, work: Work) -> str:
        return execution_id(work.binding["schedule_id"], work.occurrence_id, work.attempt)

    # ---- results of worker calls: the decision points ----------------------------------------

    def _commit_quietly(
        self, command: Any, event: str, **fields: Any
    ) -> Chain[Accepted | Refused | None]:
        try:
            result = yield from self._propose(command)
        except (NotOwner, Uncertain) as exc:
            self._emit_log(f"{event}_uncertain", **{**fields, "reason": str(exc)})
            return None
        if isinstance(result, Refused):  # its reason replaces the one the command carried
            self._emit_log(f"{event}_refused", **{**fields, "reason": result.message})
        else:
            state = getattr(result.value, "state", None)
            self._emit_log(event, state=getattr(state, "value", state), **fields)
        return result

    def _exec_done(self, work: Work, result: ExecResult | Exception) -> Chain[None]:
        """The dispatch's answer: accepted → observe; otherwise ``dispatch_outcome.after_exec``
        decides from the committed state (re-send, Failed, fence, or observe)."""
        work.busy = False
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
            self._emit_log(
                "dispatch_accepted",
                execution_id=result.execution_id,
                late_ms=self._late_ms(work.due_s),
                **ids,
            )
            self._start_observing(work, first_poll_s(result.capacity))
            return
        if result.kind == "retired":
            # At or below the worker's floor W, which a committed state set: the occurrence left
            # the checkpoint, and this view only lags behind that commit. Never a new dispatch
            # and never a fence or an outcome: observe, and _current drops it once applied.
            self._emit_log("dispatch_retired", detail=result.detail, **ids)
            self._start_observing(work)
            return
        decision = dispatch_outcome.after_exec(
            result.kind, result.code, result.detail, self._committed(work, record), work.sends
        )
        yield from self._perform(work, record, decision)

    def _start_observing(self, work: Work, first_s: float = OBSERVE_FIRST_POLL_S) -> None:
        work.observing = True
        work.poll_s = first_s
        self._look_in(work, work.poll_s)

    def _look_in(self, work: Work, delay_s: float) -> None:
        """The next look at ``work`` after ``delay_s``; any earlier-set look is void."""
        work.look += 1
        look = work.look
        self._later(delay_s, lambda: self._poll(work, look))

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
            if self._work.get(work.occurrence_id) is work and work.observing and not work.busy:
                work.poll_s = OBSERVE_FIRST_POLL_S  # its backoff starts again: it starts soon
                self._look_in(work, OBSERVE_AFTER_QUEUE_S)

    def _poll(self, work: Work, look: int) -> None:
        if self._work.get(work.occurrence_id) is not work or work.busy or look != work.look:
            return
        if self._queue.deferred(work.occurrence_id):
            # Deep in the worker's queue: looked at when it reaches the front, or once half of
            # its deadline's window is left (an answer that it still waits restarts it).
            window_s = self.cfg.remote.timeout_seconds + OBSERVE_GRACE_S
            left_s = work.deadline_s - window_s / 2 - self._wall_s
            if left_s > 0:
                self._look_in(work, max(OBSERVE_FIRST_POLL_S, left_s / self.time_scale))
                return
        eid = self._execution_id(work)
        worker = work.binding.get("worker_id")
        self._spawn(work, lambda token: ObserveRequest(token, eid, worker_id=worker))

    def _observed(self, work: Work, result: ObserveResult | Exception) -> Chain[None]:
        """The observation's answer: a confirmed outcome is recorded; ``fenced`` and the
        deadline are decided by dispatch_outcome (a fence without a permit, Unknown with one)."""
        work.busy = False
        self._after_answer(work, result, waiting=waiting_for_slot(result))
        record = self._current(work)
        if record is None or record.terminal:
            self._forget(work)
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
            yield from self._commit_quietly(
                core.RecordOutcome(
                    work.occurrence_id,
                    work.attempt,
                    outcome,
                    self._now_s(),
                    reason=reason,
                    execution_id=self._execution_id(work),
                ),
                "outcome",
                worker_status=status,
                **ids,
            )
            self._forget(work)
            work.observing = False
            self._dirty = True
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
            work.deadline_s = max(work.deadline_s, self._deadline_s())
        if self._wall_s >= work.deadline_s:
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
        # Unknown is never retried, but it is still observed: the real result wins.
        work.poll_s = self.unknown_poll_s
        self._look_in(work, work.poll_s)

    # ---- dispatch decisions (appliance/owner/dispatch_outcome.py decides; this performs) -----

    def _perform(self, work: Work, record: Any, decision: dispatch_outcome.Decision) -> Chain[None]:
        ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
        now_s = self._now_s()
        if isinstance(decision, dispatch_outcome.Resend):
            work.last_observation = f"not dispatched: {decision.code}"
            self._emit_log(
                "dispatch_not_dispatched", sends=work.sends, delay_s=decision.delay_s, **ids
            )
            work.busy = True  # nothing else may touch it until the re-send is answered
            self._later(decision.delay_s, lambda: self._resend(work))
            return
        if isinstance(decision, dispatch_outcome.RecordFailed):
            yield from self._commit_quietly(
                core.RecordOutcome(
                    work.occurrence_id, work.attempt, "failed", now_s, reason=decision.reason
                ),
                "outcome",
                reason=decision.reason,
                **ids,
            )
            self._forget(work)
            return
        if isinstance(decision, dispatch_outcome.Fence):
            command = ownership.fence_dispatch_command(
                self.cfg.remote.namespace, self.epoch or 0, record, decision, now_s
            )
            result = yield from self._commit_quietly(
                command, "dispatch_fenced", reason=decision.reason, **ids
            )
            if isinstance(result, Accepted):
                self._forget(work)
                work.observing = False
                self._dirty = True
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
            yield from self._commit_quietly(
                ownership.mark_unknown_command(
                    self.cfg.remote.namespace, record, decision.reason, now_s
                ),
                "outcome",
                reason=decision.reason,
                **ids,
            )
        if not work.observing or self._wall_s < work.deadline_s:
            self._start_observing(work)
        else:
            self._observe_slowly(work)

    def _resend(self, work: Work) -> None:
        """The re-send timer: send exactly the committed binding again — only while it is still
        this owner's Running attempt and the grant holds (otherwise ``after_exec`` fences it)."""
        work.busy = False
        record = self._current(work)
        if record is None:
            return
        committed = self._committed(work, record)
        if record.state is not S.RUNNING or not committed.epoch_held or committed.grant_expired:
            code = work.last_observation.removeprefix("not dispatched: ")
            self._run(self._exec_done(work, ExecResult("not_dispatched", code=code)))
            return
        work.sends += 1
        work.deadline_s = self._deadline_s()
        binding, code = work.binding, work.code
        self._spawn(work, lambda token: DispatchRequest(token, binding, code))

    def _send_cancel(self, work: Work) -> None:
        if work.busy:
            self._later(CANCEL_RETRY_S, lambda: self._send_cancel(work))
            return
        work.cancel_attempts += 1
        binding = work.binding
        self._spawn(work, lambda token: CancelRequest(token, binding))

    def _cancel_done(self, work: Work, result: CancelResult | Exception) -> Chain[None]:
        """The cancellation's answer: Cancelled only on a confirmed stop; a fence before consume
        returns the attempt; a completion that won keeps its result; else ask again."""
        work.busy = False
        self._heard(str(work.binding.get("worker_id", "")), result)
        record = self._current(work)
        if record is None or record.state is not S.CANCELLING:
            self._forget(work)
            return
        ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
        answer = result.result if isinstance(result, CancelResult) else None
        now_s = self._now_s()
        if answer == v1.CANCEL_STOPPED:
            yield from self._commit_quietly(
                core.ConfirmCancelled(work.occurrence_id, work.attempt, now_s), "outcome", **ids
            )
        elif answer == v1.CANCEL_FENCED_BEFORE_CONSUME:
            yield from self._commit_quietly(
                ownership.fence_after_cancel_command(self.cfg.remote.namespace, record, now_s),
                "outcome",
                **ids,
            )
        elif answer == v1.CANCEL_COMPLETED and isinstance(result, CancelResult):
            status = (result.report or {}).get("status")
            outcome = OUTCOME_OF_STATUS.get(str(status))
            if outcome is None or outcome == "lost":
                self._retry_cancel(work, f"completed without a usable report ({status})")
                return
            yield from self._commit_quietly(
                core.RecordOutcome(work.occurrence_id, work.attempt, outcome, now_s),
                "outcome",
                worker_status=status,
                **ids,
            )
        else:
            detail = result.detail if isinstance(result, CancelResult) else repr(result)
            self._retry_cancel(work, f"{answer or 'no answer'} {detail}".strip())
            return
        self._forget(work)
        self._dirty = True

    def _retry_cancel(self, work: Work, why: str) -> None:
        if work.cancel_attempts >= CANCEL_ATTEMPTS_MAX:
            self._emit_log(
                "cancel_unresolved", occurrence=work.occurrence_id, attempt=work.attempt, why=why
            )
            self._forget(work)
            return
        self._later(CANCEL_RETRY_S, lambda: self._send_cancel(work))
