"""The owner core's decisions about one dispatched attempt: dispatch, observe, Unknown, cancel.

Theory of operation (SPEC §1, §3): an attempt is dispatched once. Its dispatch answer decides
(``_exec_done``): accepted → observe; a definite refusal while no permit exists → Failed;
anything else → Unknown, never dispatched again, still observed. Observation (``_observed``)
records a confirmed outcome; at ``timeout_seconds`` + ``OBSERVE_GRACE_S`` after dispatch a
Running attempt becomes Unknown (``_observation_deadline``) and is then asked about every
``unknown_poll_s``, so a later confirmed outcome still resolves it. Cancellation commits
Cancelling before the worker is contacted; its answer (``_cancel_done``) makes it Cancelled only
on a confirmed stop, returns it on a fence before consume, keeps a completion that won, and asks
again otherwise. ``Work`` is owner-side memory, never replicated: after a takeover it is rebuilt
from the committed claims.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from appliance.config.runner import RunnerConfig
from appliance.core import state as core
from appliance.core.occurrence import OccurrenceState
from appliance.runner import ownership
from appliance.runner.applied import Accepted, Refused
from appliance.runner.binding import execution_id
from appliance.runner.owner_events import (
    CancelRequest,
    DispatchRequest,
    Effect,
    ObserveRequest,
)
from appliance.runner.owner_serial import Chain, NotOwner, SerialCore, Uncertain
from appliance.runner.worker_answers import CancelResult, ExecResult, ObserveResult

S = OccurrenceState

OBSERVE_GRACE_S: Final = 30  # wall (possibly scaled) seconds past timeout_seconds
OBSERVE_FIRST_POLL_S: Final = 0.05  # real seconds
OBSERVE_POLL_MAX_S: Final = 2.0
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
    deadline_s: float  # wall (scaled) time after which a silent attempt is Unknown
    due_s: int = 0  # the occurrence's due instant (for the latency fields of the logs)
    busy: bool = False  # a worker call for it is in flight
    poll_s: float = OBSERVE_FIRST_POLL_S
    cancel_attempts: int = 0
    observing: bool = False


class AttemptDecisions(SerialCore):
    cfg: RunnerConfig
    unknown_poll_s: float
    _work: dict[int, Work]  # occurrence id -> dispatched attempt
    _tasks: dict[int, Work]  # worker-call token -> its work

    def _deadline_s(self) -> float:
        return self._wall_s + self.cfg.remote.timeout_seconds + OBSERVE_GRACE_S

    def _start_exec(self, record: Any, binding: dict[str, Any], code: str) -> None:
        work = Work(record.id, record.attempt, binding, self._deadline_s(), record.due_s)
        self._work[record.id] = work
        self._spawn(work, lambda token: DispatchRequest(token, binding, code))

    # ---- worker calls ------------------------------------------------------------------------

    def _spawn(self, work: Work, request: Callable[[int], Effect]) -> None:
        work.busy = True
        token = next(self._tokens)
        self._tasks[token] = work
        self._out.append(request(token))

    def _forget(self, work: Work) -> None:
        """Stop tracking ``work`` — only if it is still the tracked one. A late result of an
        earlier attempt (an observation in flight when ownership changed hands) must never
        remove the ``Work`` of the attempt that replaced it: that attempt's own results would
        then be dropped and it would stay Running for ever."""
        if self._work.get(work.occurrence_id) is work:
            del self._work[work.occurrence_id]

    def _current(self, work: Work) -> Any:
        """The committed record if it is still this work's attempt, else None."""
        if self._work.get(work.occurrence_id) is not work:
            return None
        record = self._read(lambda st: st.occurrences.get(work.occurrence_id))
        if record is None or record.attempt != work.attempt:
            self._forget(work)
            return None
        return record

    def _execution_id(self, work: Work) -> str:
        return execution_id(work.binding["schedule_id"], work.occurrence_id, work.attempt)

    # ---- results of worker calls: the decision points ----------------------------------------

    def _commit_quietly(
        self, command: Any, event: str, **fields: Any
    ) -> Chain[Accepted | Refused | None]:
        try:
            result = yield from self._propose(command)
        except (NotOwner, Uncertain) as exc:
            self._emit_log(f"{event}_uncertain", reason=str(exc), **fields)
            return None
        if isinstance(result, Refused):
            self._emit_log(f"{event}_refused", reason=result.message, **fields)
        else:
            state = getattr(result.value, "state", None)
            self._emit_log(event, state=getattr(state, "value", state), **fields)
        return result

    def _exec_done(self, work: Work, result: ExecResult | Exception) -> Chain[None]:
        """The dispatch's answer: accepted → observe; a definite refusal with no permit →
        Failed; anything else → Unknown (never dispatched again), still observed."""
        work.busy = False
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
            self._start_observing(work)
            return
        if result.kind == "refused" and not self._read(
            lambda st: ownership.permit_may_exist(st, work.occurrence_id, work.attempt)
        ):
            reason = f"worker refused: {result.code}"
            yield from self._commit_quietly(
                core.RecordOutcome(
                    work.occurrence_id, work.attempt, "failed", self._now_s(), reason=reason
                ),
                "outcome",
                reason=reason,
                **ids,
            )
            self._forget(work)
            return
        reason = f"dispatch uncertain: {result.code or ''} {result.detail}".strip()
        if record.state is S.RUNNING:
            yield from self._commit_quietly(
                ownership.mark_unknown_command(
                    self.cfg.remote.namespace, record, reason, self._now_s()
                ),
                "outcome",
                reason=reason,
                **ids,
            )
        # A later confirmed outcome still resolves Unknown: keep observing until the deadline.
        self._start_observing(work)

    def _start_observing(self, work: Work) -> None:
        work.observing = True
        work.poll_s = OBSERVE_FIRST_POLL_S
        self._later(work.poll_s, lambda: self._poll(work))

    def _poll(self, work: Work) -> None:
        if self._work.get(work.occurrence_id) is not work or work.busy:
            return
        eid = self._execution_id(work)
        self._spawn(work, lambda token: ObserveRequest(token, eid))

    def _observed(self, work: Work, result: ObserveResult | Exception) -> Chain[None]:
        """The observation's answer: a confirmed outcome is recorded; past the deadline a
        Running attempt becomes Unknown (and is still asked about, slowly)."""
        work.busy = False
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
                reason = str(document.get("reason") or document.get("error") or outcome)[:200]
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
        if self._wall_s >= work.deadline_s:
            yield from self._observation_deadline(work, record, ids)
            return
        work.poll_s = min(work.poll_s * 2, OBSERVE_POLL_MAX_S)
        self._later(work.poll_s, lambda: self._poll(work))

    def _observation_deadline(self, work: Work, record: Any, ids: dict[str, Any]) -> Chain[None]:
        """No outcome within timeout_seconds + grace: a Running attempt is Unknown."""
        if record.state is S.RUNNING:
            reason = "no outcome within timeout_seconds + grace"
            yield from self._commit_quietly(
                ownership.mark_unknown_command(
                    self.cfg.remote.namespace, record, reason, self._now_s()
                ),
                "outcome",
                reason=reason,
                **ids,
            )
        # Unknown is never retried, but it is still observed: the real result wins.
        work.poll_s = self.unknown_poll_s
        self._later(work.poll_s, lambda: self._poll(work))

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
        record = self._current(work)
        if record is None or record.state is not S.CANCELLING:
            self._forget(work)
            return
        ids = {"occurrence": work.occurrence_id, "attempt": work.attempt}
        answer = result.result if isinstance(result, CancelResult) else None
        now_s = self._now_s()
        if answer == "stopped":
            yield from self._commit_quietly(
                core.ConfirmCancelled(work.occurrence_id, work.attempt, now_s), "outcome", **ids
            )
        elif answer == "fenced_before_consume":
            yield from self._commit_quietly(
                ownership.fence_after_cancel_command(self.cfg.remote.namespace, record, now_s),
                "outcome",
                **ids,
            )
        elif answer == "completed" and isinstance(result, CancelResult):
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
