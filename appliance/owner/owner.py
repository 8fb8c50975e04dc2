"""The owner core: every decision of a voter, as a plain object fed events that returns effects.

Contract
--------
``Owner(cfg=, state=, time_scale=, unknown_poll_s=, gate=)``; then ``owner.handle(event, wall_s)``
returns the list of effects to carry out, in order. No threads, clocks, sockets, sleeps or queues
inside: ``wall_s`` is the wall instant (Unix seconds, possibly scaled) at which the driver hands
the event over, and ``state`` is anything with ``read(fn) -> fn(SchedulerState)`` over the
*committed* state (``Machine`` in the runner; a simulator may pass its own). ``gate`` is the
version gate's question (appliance/capabilities.py): why a command kind may not be proposed yet,
or None; a gated command is never proposed and counts as a definite refusal. Events and effects
are the frozen dataclasses of appliance/owner/events.py. The class is assembled from small
modules: owner_serial.py (tokens, continuations, timers), owner_attempts.py (one attempt's
dispatch, observation, Unknown and cancellation), owner_requests.py (admission and operator
commands) and this one (leadership, ownership, the pulse and claims).

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
driver. An owner waits for every answer it asked for: the driver bounds each proposal and barrier
(a timeout is a ``FailedAnswer``) and each worker call. A process that crashes discards its Owner;
the next one starts empty and rebuilds what it needs from the committed state after acquiring
ownership (re-observing admitted attempts, resuming cancellations). A proposal whose outcome is
``FailedAnswer`` may still commit: the owner treats it as uncertain and re-derives what it needs
from the committed state later (a claim it sees committed is adopted and dispatched then, for the
first time; nothing dispatched is ever dispatched again).

The decision points, one method each (owner_attempts.py): ``_exec_done`` (the dispatch answer),
``_observed`` and ``_observation_deadline`` (an observed outcome; past timeout_seconds + grace a
fence without a permit, Unknown with one), ``_perform`` (carries out what the pure
appliance/owner/dispatch_outcome.py decided: re-send, ``FenceDispatch``, Unknown, Failed),
``_resend`` (the re-send timer), ``_cancel_done`` (Cancelled only on a confirmed stop).

Serial decisions, as the loop made them: where a decision waits on a commit (observe → folded
claim → claim-ready; barrier → acquire → seed; an outcome; an operator mutation → reply), the
owner keeps a continuation keyed by the tokens it awaits and holds every other event, in order,
until those answers arrive (the loop blocked on the commit and took nothing else from its queue).
The claims of one pulse are proposed together, so Raft batches their appends. Admissions are
not serial: their ``Admit`` is proposed at once, while other decisions wait, and the driver may
answer the worker as soon as it commits (see ``Propose.answers_admission``). Outcomes
(``RecordOutcome``) are not serial either (appliance/owner/pacing.py): the attempt is
forgotten as soon as the worker reported it, whatever the commit's result, as before.

Theory of operation (SPEC §2 "One serialized runner loop", §3, §6; issue 5 §3-§6)
---------------------------------------------------------------------------------
Only the *acquired owner* schedules: after this voter becomes leader it runs a read barrier and
then commits the ownership transition (``AcquireOwnership``); only with that committed epoch does
it pulse, claim and dispatch. Leadership loss clears the epoch at once.

An observation that creates occurrences claims them in the same commit (``ObserveAndClaim``,
appliance/core/observe_claim.py) when the owner may claim; what the apply leaves Pending (running
limit, overlap) is claimed by ``ClaimOccurrence`` on the same pass.

Conservatism (SPEC §1, §11): an attempt is dispatched once, and sent again only after a definite
"not dispatched" answer (the same binding, with backoff, until the grant expires). An ambiguous
send or an unreachable worker with **no committed permit** is fenced (``FenceDispatch``: proven
not launched; the next attempt is claimed, no retry spent; refused if an ``Admit`` committed
first). With a permit the attempt is observed and becomes Unknown — never retried automatically —
only when its outcome stays lost at ``timeout_seconds`` + ``OBSERVE_GRACE_S`` after the last send
(or the worker reports it fenced before consume), its reason naming the missing evidence; it is
still asked about every ``unknown_poll_s``, so a later confirmed outcome still resolves it. While
the version gate holds ``FenceDispatch`` back, the attempt is Unknown as before, its reason
saying why. Cancellation commits
Cancelling before the worker is contacted; only a confirmed stop makes it Cancelled, and a
completion that won keeps its result.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from appliance.config.runner import RunnerConfig
from appliance.core import state as core
from appliance.core.calendar import compile_schedule
from appliance.core.claims import claimable
from appliance.core.errors import CoreError
from appliance.core.occurrence import OccurrenceState
from appliance.core.pulse import Pulse
from appliance.owner import contract_state, ownership
from appliance.owner.applied import Accepted, NotYetApplicable, Refused
from appliance.owner.attempts import (
    OBSERVE_GRACE_S,
    UNKNOWN_POLL_S,
    Work,
)
from appliance.owner.binding import authority_of, make_binding
from appliance.owner.events import (
    AdmissionRequest,
    CancelAnswered,
    Drain,
    Effect,
    Event,
    ExecAnswered,
    LeadershipChanged,
    NotLeaderAnswer,
    ObserveAnswered,
    OperatorRequest,
    ProposalDone,
    ReplyFailed,
    Tick,
    TimerFired,
)
from appliance.owner.fleet_decisions import FleetDecisions
from appliance.owner.queue import QueueView
from appliance.owner.serial import Chain, Gate, NotOwner, StateReader, Uncertain

__all__ = ["OBSERVE_GRACE_S", "UNKNOWN_POLL_S", "Owner", "StateReader", "Work"]

S = OccurrenceState


class Owner(FleetDecisions):
    def __init__(
        self,
        *,
        cfg: RunnerConfig,
        state: StateReader,
        time_scale: float = 1.0,
        unknown_poll_s: float = UNKNOWN_POLL_S,
        gate: Gate | None = None,
        check_env: Callable[[str], str | None] | None = None,
    ) -> None:
        super().__init__(state, time_scale, gate)
        # Why a credential variable an add_worker names cannot serve this voter (the driver
        # reads its environment); None: not checked (tests, the simulator).
        self._check_env = check_env
        # The genesis contract's remote and limits; ``cfg`` folds the committed amendments in.
        self._genesis_cfg = cfg
        self._cfg_in_force: tuple[Any, RunnerConfig] = (None, cfg)
        self.node_id = cfg.node_id
        self.unknown_poll_s = unknown_poll_s
        self._tasks: dict[int, Work] = {}  # worker-call token -> its work
        self._admissions: dict[int, tuple[int, Mapping[str, Any]]] = {}  # token -> request
        self._draining = False
        # Owner state: valid only while self.epoch is not None.
        self.term = 0
        self.leader_hint: str | None = None
        self.epoch: int | None = None
        self._acquire_wanted = False
        self._charging_wanted = False  # propose AdoptCharging(2) once the gate allows
        self._seed_wanted = False  # the initial schedules wait for the version gate
        self._pulse: Pulse | None = None
        self._compiled: dict[int, Any] = {}
        self._compile_cache: dict[tuple[str, str], Any] = {}
        self._work: dict[int, Work] = {}  # occurrence id -> dispatched attempt
        self._queue: QueueView[Work] = QueueView()  # last seen waiting in the worker's queue
        self._last_observe_s = 0
        self._orphans_possible = False
        self._owner_term = 0

    @property
    def cfg(self) -> RunnerConfig:
        """The config with the contract in force: the remote and limits are the genesis with
        every committed amendment applied (appliance/owner/contract_state.py), never what a
        config file says. Rebuilt only when the committed amendment part changes."""
        key = self._read(lambda st: (core.amendment_index(st), st.limits))
        cached_key, cached = self._cfg_in_force
        if cached_key != key:
            genesis = self._genesis_cfg
            remote = self._read(lambda st: contract_state.remote_in_force(genesis.remote, st))
            cached = replace(genesis, remote=remote, limits=key[1])
            self._cfg_in_force = (key, cached)
        return cached

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
        if self._chain is None:
            self._pace()  # send what waits for the worker's capacity (owner_pacing.py)
        out, self._out = self._out, []
        return out

    def next_due_s(self) -> float | None:
        """The wall instant of the next due slot this owner will observe, if it schedules. None
        while a decision waits for its commit: a tick then could do nothing, and a driver that
        woke for it would spin (the answer's own event brings the next tick)."""
        if self.epoch is None or self._pulse is None or self._draining or self._chain is not None:
            return None
        return self._pulse.next_due_s()

    def has_open_tasks(self) -> bool:
        """Whether a worker call is in flight or an attempt is still observed."""
        return bool(self.open_occurrences())

    def open_occurrences(self) -> list[int]:
        """The occurrences with a worker call in flight or an observation still going."""
        return sorted(w.occurrence_id for w in self._work.values() if w.busy or w.observing)

    @property
    def draining(self) -> bool:
        return self._draining

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
        elif isinstance(event, ProposalDone) and event.token in self._outcomes:
            self._outcome_done(event.token, event.outcome)
        elif isinstance(event, ProposalDone) and event.token in self._notes:
            self._note_done(event.token, event.outcome)
        elif isinstance(event, ProposalDone) and event.token in self._admissions:
            request, binding = self._admissions.pop(event.token)
            self._admit_done(request, binding, event.outcome)
        elif isinstance(event, OperatorRequest):
            self._run(self._operator_reply(event.request, event.command), event.request)
        elif isinstance(event, AdmissionRequest):
            self._admit(event.request, event.binding, event.incarnation, event.caller)
        elif isinstance(event, Drain):
            self._draining = True
            self._emit_log("draining", open_tasks=sum(1 for w in self._work.values() if w.busy))

    def _worker_answered(self, event: ExecAnswered | ObserveAnswered | CancelAnswered) -> None:
        if self._probe_answered(event):  # a fleet probe (appliance/owner/fleet_decisions.py)
            return
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
        if self.epoch is not None and self._seed_wanted:
            command = core.SeedInitialSchedules(tuple(self.cfg.schedules), self._now_s())
            if self._gated(command) is None:
                try:
                    yield from self._seed(self._now_s())
                except (NotOwner, Uncertain) as exc:
                    self._emit_log("initial_schedules_refused", reason=str(exc))
        if self.epoch is not None and self._charging_wanted:
            yield from self._adopt_charging()
        if self.epoch is not None and not self._draining:
            yield from self._schedule()

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
        self._queue.clear()
        # The fleet's knowledge is this owner's: the next one learns again (owner/fleet.py).
        self._fleet.clear()
        self._placement_waits.clear()
        self._fleet_ticks += 1  # stops the fleet timer
        self._fleet_ticking = False
        self._seed_wanted = False  # the next owner sees needs_seed in its takeover

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
        self._charging_wanted = True
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

    def _adopt_charging(self) -> Chain[None]:
        """Switch the checkpoint to charging rules 2 (appliance/core/charging.py) once every
        voter can apply it; while the version gate says no, nothing is proposed and the next
        tick asks again. A committed refusal is logged and left until the next acquisition."""
        if self._read(core.charging_rules) == 2:
            self._charging_wanted = False
            return
        command = core.AdoptCharging(2)
        if self._gated(command) is not None:
            return
        try:
            result = yield from self._propose(command)
        except (NotOwner, Uncertain) as exc:
            self._emit_log("charging_retry", reason=str(exc))
            return
        self._charging_wanted = False
        if isinstance(result, Refused):
            self._emit_log("charging_refused", reason=result.message)
        else:
            self._emit_log("charging_adopted", rules=2)

    def _commit_ownership(self, at_s: int) -> Chain[ownership.Acquired]:
        """Commit ownership (and, on a new store, the initial schedules); raise on failure."""
        result = yield from self._propose(core.AcquireOwnership(self.node_id, self.term, at_s))
        if isinstance(result, Refused):
            raise ownership.OwnershipRefused(result.message)
        takeover: core.Takeover = result.value
        if takeover.needs_seed:
            yield from self._seed(at_s)
        return ownership.acquired_of(takeover)

    def _seed(self, at_s: int) -> Chain[None]:
        """Create the config's initial schedules (ids 1…N). A definition with a feature not every
        voter applies yet (``placement``, jitter) is held back by the version gate: then it is
        asked again at every tick, and operator mutations wait (503, not accepted) so no other
        schedule takes those ids meanwhile."""
        seeded = yield from self._propose(
            core.SeedInitialSchedules(tuple(self.cfg.schedules), at_s)
        )
        self._seed_wanted = isinstance(seeded, Refused) and isinstance(
            seeded.error, NotYetApplicable
        )
        if isinstance(seeded, Refused):
            self._emit_log("initial_schedules_refused", reason=seeded.message)
        else:
            self._emit_log("initial_schedules", ids=list(seeded.value))
            self._rebuild_pulse()

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

    def _track_schedule(self, schedule_id: int) -> None:
        """After a command that changed one schedule (create, enable, update, disable, delete):
        only its pulse entry changes. A full rebuild takes one calendar step per schedule, so
        creating the 1,000th schedule cost 1,000 of them."""
        pulse = self._pulse
        if pulse is None:
            self._rebuild_pulse()
            return

        def track(st: core.SchedulerState) -> None:
            schedule = st.schedules.get(schedule_id)
            if schedule is None:
                self._compiled.pop(schedule_id, None)
                pulse.forget(schedule_id)
                return
            compiled = self._compiled_for(schedule.definition)
            self._compiled[schedule_id] = compiled
            pulse.track(st, schedule_id, compiled)

        self._read(track)

    # ---- scheduling: pulse, retry-due, claims ------------------------------------------------

    def _schedule(self) -> Chain[None]:
        self._start_fleet_ticks()  # once the fleet has two workers (an add_worker, a takeover)
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
        if pulse is None or self._read(core.paused_since) is not None:
            return  # paused: nothing is selected (resume decides about the span)
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
        if len(remote.fleet) > 1:  # a worker per observed schedule (core/observe_place.py)
            placements = self._read(lambda st: self._placements(st, observe))
            return core.ObserveAndPlace(
                observe, self.epoch, remote.namespace, placements, authority
            )
        worker = self._fold_worker()  # one worker for every claim: only a fleet of one
        if worker is None:
            return None
        return core.ObserveAndClaim(observe, self.epoch, remote.namespace, worker, authority)

    def _dispatch_claimed(self, record: Any) -> None:
        """Dispatch a claim this owner just committed (its committed binding, its code)."""
        binding = self._read(lambda st: ownership.binding_of(st, record))
        code = self._code_of(record.id)
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
            worker=binding["worker_id"],
            late_ms=self._late_ms(record.due_s),
        )
        self._start_exec(record, binding, code)

    def _code_of(self, occurrence_id: int) -> str | None:
        """The code the occurrence was created with: an update keeps it for live records
        (appliance/core/live_code.py), so the dispatch matches the claim's digest."""
        return self._read(lambda st: core.record_code(st, occurrence_id))

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
        load: Counter[str] = Counter()  # this pass's claims per worker (placement's load)
        ready = self._read(claimable)
        base = self._candidates(Counter()) if ready else []
        for oid, attempt in ready:
            record, schedule = self._read(
                lambda st, oid=oid: (
                    st.occurrences.get(oid),
                    st.schedules.get(st.occurrences[oid].schedule_id)
                    if oid in st.occurrences
                    else None,
                )
            )
            code = self._code_of(oid)
            if record is None or schedule is None or code is None:
                continue
            worker = self._choose_worker(oid, schedule.definition.placement, load, base)
            if worker is None:
                continue  # no worker may run it now: it waits Pending, its reason in status
            binding = make_binding(
                self.cfg.remote,
                schedule_id=schedule.id,
                schedule_name=schedule.definition.name,
                occurrence_id=oid,
                attempt=attempt,
                owner=self.node_id,
                epoch=epoch,
                code=code,
                due_s=record.due_s,
                worker_id=worker,
            )
            planned.append((record, code, binding))
        commands = [ownership.claim_command(r, b, now_s) for r, _, b in planned]
        outcomes = yield from self._proposals(commands)
        for (record, code, binding), outcome in zip(planned, outcomes, strict=True):
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
                schedule=record.schedule_id,
                attempt=attempt,
                epoch=self.epoch,
                worker=binding["worker_id"],
                late_ms=self._late_ms(record.due_s),
            )
            self._start_exec(record, binding, code)

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
            code = self._code_of(record.id)
            if code is None:
                continue
            self._emit_log("claim_adopted", occurrence=record.id, attempt=record.attempt)
            self._start_exec(record, binding, code)
