"""The owner core: every decision of a voter, as a plain object fed events that returns effects.

Contract
--------
``Owner(cfg=, state=, time_scale=, unknown_poll_s=)``; then ``owner.handle(event, wall_s)``
returns the list of effects to carry out, in order. No threads, clocks, sockets, sleeps or queues
inside: ``wall_s`` is the wall instant (Unix seconds, possibly scaled) at which the driver hands
the event over, and ``state`` is anything with ``read(fn) -> fn(SchedulerState)`` over the
*committed* state (``Machine`` in the runner; a simulator may pass its own). Events and effects
are the frozen dataclasses of appliance/runner/owner_events.py.

Who feeds what (the driver, appliance/runner/loop.py, or a simulator):

- ``LeadershipChanged`` from the replication layer's subscription.
- ``Tick`` after every other event handed over, and whenever the driver wakes: at least every
  ``WAKE_S_MAX`` real seconds and at ``next_due_s()`` (a wall instant; divide the wait by the
  time scale). A tick acquires ownership when it is wanted, else pulses, retries and claims.
- ``ProposalDone(token, outcome)`` for every ``Propose(token, ...)``; ``BarrierDone`` for every
  ``ReadBarrier``; ``ExecAnswered`` / ``ObserveAnswered`` / ``CancelAnswered`` for every
  ``DispatchRequest`` / ``ObserveRequest`` / ``CancelRequest``; ``TimerFired`` for every
  ``SetTimer`` once its real delay has passed. Each exactly once, in any order, carrying the
  token of the effect it answers. A worker call that raised is answered with the exception.
- ``OperatorRequest`` / ``AdmissionRequest`` with a ``request`` id the driver chose; exactly one
  ``Reply`` (or ``ReplyFailed``) comes back for it, possibly many events later.
- ``Drain`` when the process stops: no more scheduling; admissions, observation and
  cancellation go on. ``has_open_tasks()`` says whether observation or cancellation is pending.

Tokens are chosen by the owner (one counter; unique per Owner instance) and only echoed by the
driver. A proposal whose outcome is ``FailedAnswer`` may still commit: the owner treats it as
uncertain and re-derives what it needs from the committed state later (never by re-proposing a
dispatch).

Serial decisions, as the loop made them: where a decision waits on a commit (observe → folded
claim → claim-ready; barrier → acquire → seed; an outcome; an operator mutation → reply), the
owner keeps a continuation keyed by the tokens it awaits and holds every other event, in order,
until those answers arrive (the loop blocked on the commit and took nothing else from its queue).
The claims of one pulse are proposed together, so Raft batches their appends. Admissions are
not serial: their ``Admit`` is proposed at once, while other decisions wait, and the driver may
answer the worker as soon as it commits (see ``Propose.answers_admission``).

Theory of operation (SPEC §2 "One serialized runner loop", §3, §6; issue 5 §3-§6)
---------------------------------------------------------------------------------
Only the *acquired owner* schedules: after this voter becomes leader it runs a read barrier and
then commits the ownership transition (``AcquireOwnership``); only with that committed epoch does
it pulse, claim and dispatch. Leadership loss clears the epoch at once.

An observation that creates occurrences claims them in the same commit (``ObserveAndClaim``,
appliance/core/observe_claim.py) when the owner may claim; what the apply leaves Pending (running
limit, overlap) is claimed by ``ClaimOccurrence`` on the same pass.

Conservatism (SPEC §1): an attempt is dispatched once; a lost acknowledgement, an ambiguous send
or an unreachable worker marks it Unknown and it is never retried automatically; observation
records Unknown at ``timeout_seconds`` + ``OBSERVE_GRACE_S`` after dispatch, then keeps asking
every ``unknown_poll_s``, so a later confirmed outcome still resolves it. Cancellation commits
Cancelling before the worker is contacted; only a confirmed stop makes it Cancelled, and a
completion that won keeps its result. The decision points are the methods ``_exec_done``
(dispatch result), ``_observed`` (observation result and deadline) and ``_cancel_done``
(cancellation result).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from appliance.config.rfc3339 import format_utc
from appliance.config.runner import RunnerConfig
from appliance.core import state as core
from appliance.core.calendar import compile_schedule
from appliance.core.claims import claimable
from appliance.core.definition import parse_definition
from appliance.core.errors import CoreError
from appliance.core.occurrence import OccurrenceState
from appliance.core.pulse import Pulse
from appliance.runner import ownership
from appliance.runner.applied import Accepted, Refused
from appliance.runner.binding import authority_of, execution_id, make_binding
from appliance.runner.operator import (
    MUTATIONS,
    OperatorCommand,
    OperatorError,
    build_mutation,
    error_reply,
)
from appliance.runner.owner_events import (
    AdmissionRequest,
    BarrierDone,
    CancelAnswered,
    CancelRequest,
    DispatchRequest,
    Drain,
    Effect,
    Event,
    ExecAnswered,
    FailedAnswer,
    LeadershipChanged,
    LogRecord,
    LostAnswer,
    NotLeaderAnswer,
    ObserveAnswered,
    ObserveRequest,
    OperatorRequest,
    Outcome,
    ProposalDone,
    Propose,
    ReadBarrier,
    Reply,
    ReplyFailed,
    SetTimer,
    Tick,
    TimerFired,
)
from appliance.runner.worker_answers import CancelResult, ExecResult, ObserveResult

S = OccurrenceState
T = TypeVar("T")

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

# What a serial decision yields: the proposals / barriers it waits for, all at once.
Asks = tuple[Propose | ReadBarrier, ...]
Chain = Generator[Asks, list[Any], T]


class StateReader(Protocol):
    def read(self, fn: Callable[[core.SchedulerState], T]) -> T: ...


class Uncertain(Exception):
    """A proposal whose fate is unknown: it may still commit."""


class NotOwner(Exception):
    """This voter is not the acquired owner (or stopped being it)."""


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


class Owner:
    def __init__(
        self,
        *,
        cfg: RunnerConfig,
        state: StateReader,
        time_scale: float = 1.0,
        unknown_poll_s: float = UNKNOWN_POLL_S,
    ) -> None:
        self.cfg = cfg
        self.node_id = cfg.node_id
        self.time_scale = time_scale
        self.unknown_poll_s = unknown_poll_s
        self._read = state.read
        self._tokens = itertools.count(1)
        self._out: list[Effect] = []
        self._wall_s = 0.0
        # The serial decision in progress: its continuation, its caller, the answers it awaits.
        self._chain: Chain[Any] | None = None
        self._chain_request: int | None = None
        self._awaited: dict[int, Any] = {}
        self._awaited_order: list[int] = []
        self._backlog: deque[Event] = deque()
        self._timers: dict[int, Callable[[], None]] = {}
        self._tasks: dict[int, Work] = {}  # worker-call token -> its work
        self._admissions: dict[int, tuple[int, Mapping[str, Any]]] = {}  # token -> request
        self._draining = False
        # Owner state: valid only while self.epoch is not None.
        self.term = 0
        self.leader_hint: str | None = None
        self.epoch: int | None = None
        self._acquire_wanted = False
        self._pulse: Pulse | None = None
        self._compiled: dict[int, Any] = {}
        self._compile_cache: dict[tuple[str, str], Any] = {}
        self._work: dict[int, Work] = {}  # occurrence id -> dispatched attempt
        self._last_observe_s = 0
        self._orphans_possible = False
        self._owner_term = 0
        self._dirty = True

    # ---- the interface -----------------------------------------------------------------------

    def handle(self, event: Event, wall_s: float) -> list[Effect]:
        """Feed one event at wall instant ``wall_s``; the effects to carry out, in order."""
        self._wall_s = wall_s
        self._out = []
        if self._chain is not None:
            if self._awaits(event):
                self._deliver(event)
            elif isinstance(event, Tick) and self._backlog and isinstance(self._backlog[-1], Tick):
                pass  # one pending look at the clock is enough
            else:
                self._backlog.append(event)
        else:
            self._handle_now(event)
        self._drain_backlog()
        out, self._out = self._out, []
        return out

    def next_due_s(self) -> float | None:
        """The wall instant of the next due slot this owner will observe, if it schedules."""
        if self.epoch is None or self._pulse is None or self._draining:
            return None
        return self._pulse.next_due_s()

    def has_open_tasks(self) -> bool:
        """Whether a worker call is in flight or an attempt is still observed."""
        return any(w.busy or w.observing for w in list(self._work.values()))

    @property
    def draining(self) -> bool:
        return self._draining

    # ---- serial decisions (continuations keyed by token) --------------------------------------

    def _awaits(self, event: Event) -> bool:
        return isinstance(event, ProposalDone | BarrierDone) and event.token in self._awaited

    def _deliver(self, event: ProposalDone | BarrierDone) -> None:
        self._awaited[event.token] = event.outcome if isinstance(event, ProposalDone) else event
        if any(v is None for v in self._awaited.values()):
            return
        answers = [self._awaited[t] for t in self._awaited_order]
        self._awaited, self._awaited_order = {}, []
        self._step(answers)

    def _run(self, chain: Chain[Any], request: int | None = None) -> None:
        self._chain, self._chain_request = chain, request
        self._step(None)

    def _step(self, answers: list[Any] | None) -> None:
        chain = self._chain
        if chain is None:
            return
        try:
            asks = chain.send(answers)  # type: ignore[arg-type]
        except StopIteration:
            self._chain = self._chain_request = None
            return
        except Exception as exc:  # a bug must not kill scheduling silently
            self._emit_log("loop_error", error=repr(exc))
            if self._chain_request is not None:
                self._out.append(ReplyFailed(self._chain_request, repr(exc)))
            self._chain = self._chain_request = None
            return
        self._awaited = {ask.token: None for ask in asks}
        self._awaited_order = [ask.token for ask in asks]
        self._out.extend(asks)

    def _drain_backlog(self) -> None:
        while self._chain is None and self._backlog:
            self._handle_now(self._backlog.popleft())

    def _proposals(self, commands: list[Any]) -> Chain[list[Outcome]]:
        """Propose independent commands at once, so Raft batches their appends and fsyncs; the
        raw outcomes in the same order."""
        if not commands:
            return []
        return (yield tuple(Propose(next(self._tokens), c) for c in commands))

    def _propose(self, command: Any) -> Chain[Accepted | Refused]:
        (outcome,) = yield from self._proposals([command])
        return self._interpret(outcome)

    def _barrier(self) -> Chain[BarrierDone]:
        (done,) = yield (ReadBarrier(next(self._tokens)),)
        return done  # type: ignore[no-any-return]

    def _interpret(self, outcome: Outcome) -> Accepted | Refused:
        """A proposal's outcome, or NotOwner / Uncertain."""
        if isinstance(outcome, NotLeaderAnswer):
            self._lose_ownership(outcome.leader_hint)
            raise NotOwner("not the leader")
        if isinstance(outcome, LostAnswer):
            raise Uncertain(f"the proposal was overwritten: {outcome.detail}")
        if isinstance(outcome, FailedAnswer):
            raise Uncertain(outcome.detail)
        self._dirty = True
        return outcome

    # ---- events ------------------------------------------------------------------------------

    def _handle_now(self, event: Event) -> None:
        try:
            self._dispatch(event)
        except Exception as exc:  # a bug must not kill scheduling silently
            self._emit_log("loop_error", error=repr(exc))
            request = getattr(event, "request", None)
            if isinstance(request, int):
                self._out.append(ReplyFailed(request, repr(exc)))

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, Tick):
            self._run(self._tick())
        elif isinstance(event, LeadershipChanged):
            self._leadership(event)
        elif isinstance(event, TimerFired):
            fn = self._timers.pop(event.token, None)
            if fn is not None:
                fn()
        elif isinstance(event, ExecAnswered | ObserveAnswered | CancelAnswered):
            self._worker_answered(event)
        elif isinstance(event, ProposalDone) and event.token in self._admissions:
            request, binding = self._admissions.pop(event.token)
            self._admit_done(request, binding, event.outcome)
        elif isinstance(event, OperatorRequest):
            self._run(self._operator_reply(event.request, event.command), event.request)
        elif isinstance(event, AdmissionRequest):
            self._admit(event.request, event.binding, event.incarnation)
        elif isinstance(event, Drain):
            self._draining = True
            self._emit_log("draining", open_tasks=sum(1 for w in self._work.values() if w.busy))

    def _worker_answered(self, event: ExecAnswered | ObserveAnswered | CancelAnswered) -> None:
        work = self._tasks.pop(event.token, None)
        if work is None:
            return
        if isinstance(event, ExecAnswered):
            self._run(self._exec_done(work, event.result))
        elif isinstance(event, ObserveAnswered):
            self._run(self._observed(work, event.result))
        else:
            self._run(self._cancel_done(work, event.result))

    def _tick(self) -> Chain[None]:
        if self.epoch is None and self._acquire_wanted:
            yield from self._acquire()
        if self.epoch is not None and not self._draining:
            yield from self._schedule()

    # ---- small helpers -----------------------------------------------------------------------

    def _emit_log(self, event: str, **fields: Any) -> None:
        self._out.append(LogRecord(event, fields))

    def _now_s(self) -> int:
        return int(self._wall_s)

    def _late_ms(self, due_s: int) -> float:
        """How long after its due instant something happened, in real milliseconds."""
        return round((self._wall_s - due_s) * 1000 / self.time_scale, 2)

    def _later(self, delay_s: float, fn: Callable[[], None]) -> None:
        token = next(self._tokens)
        self._timers[token] = fn
        self._out.append(SetTimer(token, delay_s))

    def _deadline_s(self) -> float:
        return self._wall_s + self.cfg.remote.timeout_seconds + OBSERVE_GRACE_S

    # ---- leadership and ownership ------------------------------------------------------------

    def _leadership(self, leadership: LeadershipChanged) -> None:
        self.term = leadership.term
        self.leader_hint = leadership.leader_id
        if leadership.is_leader:
            if self.epoch is not None and leadership.term != self._owner_term:
                self._lose_ownership(leadership.leader_id)  # re-elected: a new epoch is due
            if self.epoch is None:
                self._acquire_wanted = True
        elif self.epoch is not None or self._acquire_wanted:
            self._lose_ownership(leadership.leader_id)

    def _lose_ownership(self, hint: str | None) -> None:
        if self.epoch is not None:
            self._emit_log("ownership_lost", epoch=self.epoch, leader_hint=hint)
        self.epoch = None
        self._acquire_wanted = False
        self.leader_hint = hint
        self._pulse = None
        self._work.clear()

    def _acquire(self) -> Chain[None]:
        """Barrier, then commit the ownership transition; only then schedule."""
        done = yield from self._barrier()
        if isinstance(done.failure, NotLeaderAnswer):
            self._acquire_wanted = False
            return
        if done.failure is not None:
            self._emit_log("ownership_retry", reason=done.failure.detail)
            return
        try:
            acquired = yield from self._commit_ownership(self._now_s())
        except (NotOwner, Uncertain, CoreError) as exc:
            self._emit_log("ownership_retry", reason=str(exc))
            return
        self._acquire_wanted = False
        self.epoch = acquired.epoch
        self._owner_term = self.term
        self._emit_log(
            "ownership_acquired",
            epoch=acquired.epoch,
            term=self.term,
            reobserve=list(acquired.reobserve),
            resume_cancelling=list(acquired.resume_cancelling),
            fenced=list(acquired.fenced),
        )
        self._rebuild_pulse()
        deadline = self._deadline_s()
        for oid in acquired.reobserve:
            work = self._work_for_existing(oid, deadline)
            if work is not None:
                self._start_observing(work)
        for oid in acquired.resume_cancelling:
            work = self._work_for_existing(oid, deadline)
            if work is not None:
                self._send_cancel(work)

    def _commit_ownership(self, at_s: int) -> Chain[ownership.Acquired]:
        """Commit ownership (and, on a new store, the initial schedules); raise on failure."""
        result = yield from self._propose(core.AcquireOwnership(self.node_id, self.term, at_s))
        if isinstance(result, Refused):
            raise ownership.OwnershipRefused(result.message)
        takeover: core.Takeover = result.value
        if takeover.needs_seed:
            seeded = yield from self._propose(
                core.SeedInitialSchedules(tuple(self.cfg.schedules), at_s)
            )
            if isinstance(seeded, Refused):
                self._emit_log("initial_schedules_refused", reason=seeded.message)
            else:
                self._emit_log("initial_schedules", ids=list(seeded.value))
        return ownership.acquired_of(takeover)

    def _work_for_existing(self, occurrence_id: int, deadline_s: float) -> Work | None:
        found = self._read(lambda st: st.occurrences.get(occurrence_id))
        if found is None or found.terminal:
            return None
        binding = self._read(lambda st: ownership.binding_of(st, found))
        if binding is None:
            self._emit_log("binding_unknown", occurrence=occurrence_id, attempt=found.attempt)
            return None
        work = Work(occurrence_id, found.attempt, binding, deadline_s, found.due_s)
        self._work[occurrence_id] = work
        return work

    def _compiled_for(self, definition: Any) -> Any:
        key = (definition.cron, definition.timezone)
        compiled = self._compile_cache.get(key)
        if compiled is None:
            compiled = compile_schedule(definition.cron, definition.timezone)
            self._compile_cache[key] = compiled
        return compiled

    def _rebuild_pulse(self) -> None:
        def build(st: core.SchedulerState) -> Pulse:
            self._compiled = {
                sid: self._compiled_for(s.definition) for sid, s in st.schedules.items()
            }
            return Pulse.rebuild(st, self._compiled)

        self._pulse = self._read(build)

    # ---- scheduling: pulse, retry-due, claims ------------------------------------------------

    def _schedule(self) -> Chain[None]:
        now_s = max(self._now_s(), self._last_observe_s)  # a clock step back observes nothing new
        self._last_observe_s = now_s
        try:
            yield from self._observe(now_s)
            yield from self._retry_due(now_s)
            if self._dirty:
                self._dirty = False
                if self._orphans_possible:
                    self._adopt_orphans()
                yield from self._claim_ready(now_s)
        except NotOwner:
            return
        except Uncertain as exc:
            self._emit_log("proposal_uncertain", reason=str(exc))
            self._rebuild_pulse()

    def _observe(self, now_s: int) -> Chain[None]:
        pulse = self._pulse
        if pulse is None:
            return
        plan = self._read(lambda st: pulse.plan(st, self._compiled, now_s))
        if plan is None:
            return
        folded = self._with_claims(plan.command, now_s)
        try:
            result = yield from self._propose(folded or plan.command)
        except Uncertain:
            if folded is not None:
                self._orphans_possible = True  # its claims may commit later: adopt them then
            raise
        if folded is not None and isinstance(result, Refused):
            # Only the observation itself should refuse the folded command; whatever it was,
            # observing alone is never worse than before the fold.
            reason = f"ObserveAndClaim refused, observing alone: {result.message}"
            self._emit_log("observation_refused", at=now_s, reason=reason)
            result = yield from self._propose(plan.command)
        if isinstance(result, Refused):
            self._emit_log("observation_refused", at=now_s, reason=result.message)
            self._rebuild_pulse()
            return
        self._read(lambda st: pulse.committed(st, plan, self._compiled))
        report: core.ObserveReport = result.value  # ObservedAndClaimed is one too
        claimed = report.claimed if isinstance(report, core.ObservedAndClaimed) else ()
        self._emit_log(
            "selection",
            at=now_s,
            created=[list(c) for c in report.created],
            dropped=[[sid, reason.value, n] for sid, reason, n in report.dropped],
            ignored=[list(i) for i in report.ignored],
            retired=list(report.retired),
            late_ms=self._late_ms(min(c[2] for c in report.created)) if report.created else None,
        )
        for record in claimed:
            self._dispatch_claimed(record)

    def _may_claim(self, now_s: int) -> bool:
        """Claim only as the acquired owner, and only while a permit can still be granted:
        claiming after the grant expired would only strand work."""
        return self.epoch is not None and now_s < int(self.cfg.remote.expires_at.timestamp())

    def _with_claims(self, observe: core.Observe, now_s: int) -> Any:
        """The observation that also claims what it creates, or None when this owner may not
        claim now (the same gates as ``_claim_ready``)."""
        if not self._may_claim(now_s) or self.epoch is None:
            return None
        remote = self.cfg.remote
        authority = core.Authority(**authority_of(remote))
        return core.ObserveAndClaim(
            observe, self.epoch, remote.namespace, remote.worker_id, authority
        )

    def _dispatch_claimed(self, record: Any) -> None:
        """Dispatch a claim this owner just committed (its committed binding, its code)."""
        binding = self._read(lambda st: ownership.binding_of(st, record))
        code = self._code_of(record.schedule_id)
        if binding is None or code is None:  # cannot happen right after the commit; never guess
            self._emit_log("binding_unknown", occurrence=record.id, attempt=record.attempt)
            self._orphans_possible = True
            return
        self._emit_log(
            "claim",
            occurrence=record.id,
            schedule=record.schedule_id,
            attempt=record.attempt,
            epoch=self.epoch,
            late_ms=self._late_ms(record.due_s),
        )
        self._start_exec(record, binding, code)

    def _code_of(self, schedule_id: int) -> str | None:
        return self._read(
            lambda st: (
                st.schedules[schedule_id].definition.code if schedule_id in st.schedules else None
            )
        )

    def _start_exec(self, record: Any, binding: dict[str, Any], code: str) -> None:
        work = Work(record.id, record.attempt, binding, self._deadline_s(), record.due_s)
        self._work[record.id] = work
        self._spawn(work, lambda token: DispatchRequest(token, binding, code))

    def _retry_due(self, now_s: int) -> Chain[None]:
        due = self._read(lambda st: st.next_retry_due_s())
        if due is not None and due <= now_s:
            result = yield from self._propose(core.RetryDue(now_s))
            if isinstance(result, Accepted) and result.value:
                self._emit_log("retry_due", occurrences=list(result.value))

    def _claim_ready(self, now_s: int) -> Chain[None]:
        if not self._may_claim(now_s) or self.epoch is None:
            return
        epoch = self.epoch
        planned: list[tuple[Any, Any, dict[str, Any]]] = []
        for oid, attempt in self._read(claimable):
            record, schedule = self._read(
                lambda st, oid=oid: (
                    st.occurrences.get(oid),
                    st.schedules.get(st.occurrences[oid].schedule_id)
                    if oid in st.occurrences
                    else None,
                )
            )
            if record is None or schedule is None:
                continue
            binding = make_binding(
                self.cfg.remote,
                schedule_id=schedule.id,
                schedule_name=schedule.definition.name,
                occurrence_id=oid,
                attempt=attempt,
                owner=self.node_id,
                epoch=epoch,
                code=schedule.definition.code,
                due_s=record.due_s,
            )
            planned.append((record, schedule, binding))
        commands = [ownership.claim_command(r, b, now_s) for r, _, b in planned]
        outcomes = yield from self._proposals(commands)
        for (record, schedule, binding), outcome in zip(planned, outcomes, strict=True):
            oid, attempt = record.id, record.attempt
            try:
                result = self._interpret(outcome)
            except Uncertain as exc:
                self._emit_log("claim_uncertain", occurrence=oid, attempt=attempt, reason=str(exc))
                self._orphans_possible = True  # it may commit later: adopt it then
                continue
            if isinstance(result, Refused):
                self._emit_log(
                    "claim_refused", occurrence=oid, attempt=attempt, reason=result.message
                )
                continue
            self._emit_log(
                "claim",
                occurrence=oid,
                schedule=schedule.id,
                attempt=attempt,
                epoch=self.epoch,
                late_ms=self._late_ms(record.due_s),
            )
            self._start_exec(record, binding, schedule.definition.code)

    def _adopt_orphans(self) -> None:
        """Dispatch this epoch's committed claims whose proposal outcome was unknown here.

        They were never dispatched (no ``Work`` exists for them), so dispatching now is still
        the first and only dispatch of that attempt.
        """
        self._orphans_possible = False
        epoch = self.epoch
        running = self._read(
            lambda st: [r for r in st.occurrences.values() if r.state is S.RUNNING]
        )
        for record in running:
            if record.id in self._work:
                continue
            binding = self._read(lambda st, r=record: ownership.binding_of(st, r))
            if binding is None or binding["epoch"] != epoch or binding["owner"] != self.node_id:
                continue
            if self._read(lambda st, r=record: ownership.permit_may_exist(st, r.id, r.attempt)):
                continue
            code = self._code_of(record.schedule_id)
            if code is None:
                continue
            self._emit_log("claim_adopted", occurrence=record.id, attempt=record.attempt)
            self._start_exec(record, binding, code)

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

    # ---- admission ---------------------------------------------------------------------------

    def _not_owner_answer(self, message: str) -> tuple[int, dict[str, Any]]:
        return 409, {
            "error": {"code": "not_owner", "message": message, "leader_hint": self.leader_hint}
        }

    def _admit(self, request: int, binding: Mapping[str, Any], incarnation: str) -> None:
        """Propose ``Admit`` without waiting, so concurrent permit requests share Raft appends;
        the driver may answer a committed outcome at once (``answers_admission``)."""
        if self.epoch is None:
            self._answer_admission(request, binding, self._not_owner_answer("not the owner"))
            return
        command = ownership.admit_command(binding, incarnation, self._now_s())
        if isinstance(command, tuple):  # a definite refusal before any proposal
            self._answer_admission(request, binding, command)
            return
        token = next(self._tokens)
        self._admissions[token] = (request, binding)
        self._out.append(Propose(token, command, answers_admission=request))

    def _admit_done(self, request: int, binding: Mapping[str, Any], outcome: Outcome) -> None:
        try:
            result = self._interpret(outcome)
        except NotOwner:
            reply = self._not_owner_answer("ownership lost")
        except Uncertain as exc:
            reply = 503, {"error": {"code": "uncertain", "message": str(exc)}}
        else:
            reply = ownership.admit_answer(result)
        self._answer_admission(request, binding, reply)

    def _answer_admission(
        self, request: int, binding: Mapping[str, Any], reply: tuple[int, dict[str, Any]]
    ) -> None:
        status, body = reply
        oid = binding.get("occurrence_id") if isinstance(binding, Mapping) else None
        work = self._work.get(oid) if isinstance(oid, int) else None
        self._emit_log(
            "admission",
            status=status,
            occurrence=oid,
            attempt=binding.get("attempt") if isinstance(binding, Mapping) else None,
            epoch=binding.get("epoch") if isinstance(binding, Mapping) else None,
            late_ms=self._late_ms(work.due_s) if work is not None else None,
            refusal=(body.get("error") or {}).get("code") if status != 200 else None,
        )
        self._out.append(Reply(request, reply))

    # ---- operator commands -------------------------------------------------------------------

    def _not_owner(self) -> OperatorError:
        return OperatorError(
            409,
            "not_owner",
            "this voter is not the acquired owner; send the command to the leader",
            leader_hint=self.leader_hint,
        )

    def _operator_reply(self, request: int, command: OperatorCommand) -> Chain[None]:
        try:
            reply = yield from self._operator(command)
        except OperatorError as err:
            reply = err.reply()
        self._out.append(Reply(request, reply))

    def _operator(self, command: OperatorCommand) -> Chain[dict[str, Any]]:
        action = command.action
        if action == "list":
            view = self._read(core.list_view)
            return {"ok": True, "stale_local_view": True, "node": self.node_id, **view}
        if self.epoch is None:
            raise self._not_owner()
        if action == "status":
            return (yield from self._status())
        if self._draining:
            raise OperatorError(503, "draining", "the runner is shutting down", accepted=False)
        if action not in MUTATIONS:
            raise OperatorError(400, "invalid_command", f"action: {action} is not a mutation")
        return (yield from self._mutate(command))

    def _status(self) -> Chain[dict[str, Any]]:
        done = yield from self._barrier()
        if isinstance(done.failure, NotLeaderAnswer):
            self._lose_ownership(self.leader_hint)
            raise self._not_owner()
        if done.failure is not None:
            raise OperatorError(
                503, "unavailable", f"no quorum confirmed leadership: {done.failure.detail}"
            )
        if self.epoch is None:
            raise self._not_owner()
        raft = done.raft_status
        counts = self._read(lambda st: st.counts())
        reply: dict[str, Any] = {
            "ok": True,
            "node": self.node_id,
            "term": raft.get("term", self.term),
            "ownership": {"node": self.node_id, "epoch": self.epoch},
            "commit_index": raft.get("commit_index"),
            "applied_index": raft.get("applied_index"),
            "grant_expires_at": format_utc(self.cfg.remote.expires_at),
            "grant_expired": self._wall_s >= self.cfg.remote.expires_at.timestamp(),
            "counts": {
                "records": counts.records,
                "outstanding": counts.outstanding,
                "running": counts.running,
                "by_state": counts.by_state,
            },
        }
        if self.time_scale != 1.0:
            reply["time_scale"] = self.time_scale
        return reply

    def _mutate(self, command: OperatorCommand) -> Chain[dict[str, Any]]:
        action, args = command.action, command.args
        cmd = build_mutation(command, self._now_s(), self._check_definition)
        try:
            result = yield from self._propose(cmd)
        except NotOwner:
            raise self._not_owner() from None
        except Uncertain as exc:
            raise OperatorError(
                503, "uncertain", str(exc), outcome="uncertain", retry_safe=False
            ) from None
        if isinstance(result, Refused):
            self._emit_log("operator_refused", action=action, reason=result.message)
            return error_reply(400, "refused", result.message)
        self._emit_log("operator", action=action, **_ids(args))
        return self._after_mutation(action, args, result.value)

    def _check_definition(self, document: Any) -> Any:
        """A create's definition, parsed and compiled, or a 400 naming the problem."""
        try:
            definition = parse_definition(document, self.cfg.limits, "definition")
            self._compiled_for(definition)
        except CoreError as err:
            raise OperatorError(400, "invalid_definition", str(err)) from None
        return definition

    def _after_mutation(self, action: str, args: dict[str, Any], value: Any) -> dict[str, Any]:
        if action == "create":
            self._rebuild_pulse()
            return {"ok": True, "action": action, "id": value}
        if action in ("disable", "delete"):
            self._rebuild_pulse()
            return {"ok": True, "action": action, "id": args["id"]}
        oid = args["occurrence_id"]
        state = getattr(value, "state", None)
        reply = {"ok": True, "action": action, "occurrence_id": oid, "state": state.value}
        if action == "cancel" and state is S.CANCELLING:
            work = self._work.get(oid) or self._work_for_existing(oid, self._deadline_s())
            if work is not None:
                work.cancel_attempts = 0
                self._send_cancel(work)
        if action == "acknowledge_stopped":
            self._work.pop(oid, None)
        return reply


def _ids(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k in ("id", "occurrence_id")}
