"""The owner core: every decision of a voter, as a plain object fed events that returns effects.

Contract
--------
``Owner(cfg=, state=, time_scale=, unknown_poll_s=, gate=, strict=)``; then ``owner.handle(event,
wall_s)`` returns the list of effects to carry out, in order. No threads, clocks, sockets, sleeps
or queues inside: ``wall_s`` is the wall instant (Unix seconds, possibly scaled) at which the
driver hands the event over, and ``state`` is anything with ``read(fn) -> fn(SchedulerState)`` over
the *committed* state (``Machine`` in the runner; a simulator may pass its own). ``gate`` is the
version gate's question (appliance/capabilities.py): why a command kind may not be proposed yet, or
None; a gated command is never proposed and counts as a definite refusal. ``strict`` says what an
exception inside a decision does: with it (the simulator, the tests) it is raised out of
``handle``, since a bug is a bug; without it (production, the default) it is logged as
``loop_error``, the decision is dropped and its caller answered ``ReplyFailed``. Events and effects
are the frozen dataclasses of appliance/owner/events.py.

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

The decision points, one method each (attempts.py): ``_exec_done`` (the dispatch answer),
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
(``RecordOutcome``) are not serial either (``Commits.outcome``, appliance/owner/commits.py): the
attempt is forgotten as soon as the worker reported it, whatever the commit's result.

Composition (issue 31): the ``Owner`` is assembled from parts, each a plain object it owns and
none a base class; they share one ``Serial`` and one ``Standing`` and call each other only
through the methods named here.

==========================  ===================================================================
part (module)               its one job
==========================  ===================================================================
``Serial`` (serial.py)      tokens, effects, timers, the wall instant, the one suspended
                            decision and the events held behind it; proposes and interprets
``Standing`` (standing.py)  term, leader hint, ownership epoch, draining: written only here
``ConfigInForce``           the genesis config with the committed amendments folded in
``Calendars``               compiled calendars and the pulse (what falls due next)
``Attempts`` (attempts.py)  every dispatched attempt: send, observe, Unknown, fence, cancel;
                            each a ``Work`` (work.py) in one phase of one table
                            (attempt_phase.py); asks ``Pacing`` (may one more go? it learns
                            from each answer), keeps ``CapacityWaits``, commits through
                            ``Commits``
``Requests`` (requests.py)  admission requests and operator commands
``FleetDecisions``          the fleet (issue 33): which worker a claim binds (placement), the
(fleet_decisions.py)        workers' health timer, probes, the fence of an unreachable
                            worker's attempts without a permit
``Owner`` (this module)     events in, effects out; leadership, acquisition, pulse, claims
==========================  ===================================================================

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
from collections.abc import Callable
from typing import Any

from appliance.config.runner import RunnerConfig
from appliance.core import state as core
from appliance.core.claims import claimable
from appliance.core.errors import CoreError
from appliance.core.occurrence import OccurrenceState
from appliance.owner import ownership
from appliance.owner.applied import Accepted, NotYetApplicable, Refused
from appliance.owner.attempts import Attempts
from appliance.owner.binding import authority_of, make_binding
from appliance.owner.calendars import Calendars
from appliance.owner.config_in_force import ConfigInForce
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
    Tick,
    TimerFired,
)
from appliance.owner.fleet_decisions import FleetDecisions
from appliance.owner.pacing import Pacing
from appliance.owner.requests import Requests
from appliance.owner.serial import Chain, Gate, NotOwner, Serial, StateReader, Uncertain
from appliance.owner.standing import Standing
from appliance.owner.work import OBSERVE_GRACE_S, UNKNOWN_POLL_S, Work

__all__ = ["OBSERVE_GRACE_S", "UNKNOWN_POLL_S", "Owner", "StateReader", "Work"]

S = OccurrenceState


class Owner:
    def __init__(
        self,
        *,
        cfg: RunnerConfig,
        state: StateReader,
        time_scale: float = 1.0,
        unknown_poll_s: float = UNKNOWN_POLL_S,
        gate: Gate | None = None,
        strict: bool = False,
        check_env: Callable[[str], str | None] | None = None,
    ) -> None:
        self.node_id = cfg.node_id
        self._standing = Standing(cfg.node_id)
        self._serial = Serial(
            state, time_scale, gate=gate, strict=strict, lost_leadership=self._lose_ownership
        )
        self._config = ConfigInForce(cfg, state)
        self._calendars = Calendars(state)
        self._attempts = Attempts(self._serial, self._standing, self._config, unknown_poll_s)
        # The fleet (issue 33): placement per claim, the workers' health, failover.
        self._fleet = FleetDecisions(self._serial, self._standing, self._config, self._attempts)
        self._requests = Requests(
            self._serial,
            self._standing,
            self._config,
            self._attempts,
            self._calendars,
            fleet=self._fleet,
            check_env=check_env,
        )
        self._acquire_wanted = False
        self._charging_wanted = False  # propose AdoptCharging(2) once the gate allows
        self._last_observe_s = 0
        self._orphans_possible = False
        self._owner_term = 0

    @property
    def cfg(self) -> RunnerConfig:
        """The config with the contract in force (appliance/owner/config_in_force.py)."""
        return self._config.get()

    # ---- where this voter stands (read by the driver, status views and tests) ---------------

    @property
    def epoch(self) -> int | None:
        """The acquired ownership epoch; None while this voter does not schedule."""
        return self._standing.epoch

    @property
    def term(self) -> int:
        return self._standing.term

    @property
    def leader_hint(self) -> str | None:
        return self._standing.leader_hint

    @property
    def draining(self) -> bool:
        return self._standing.draining

    @property
    def strict(self) -> bool:
        return self._serial.strict

    @property
    def time_scale(self) -> float:
        return self._serial.time_scale

    @property
    def unknown_poll_s(self) -> float:
        """Real seconds between two looks at an Unknown attempt."""
        return self._attempts.unknown_poll_s

    @property
    def pacing(self) -> Pacing:
        """The paced dispatch's view of the (first) worker (the simulator's checker reads it)."""
        return self._attempts.pacing

    def pacing_for(self, worker: str | None) -> Pacing:
        """The paced dispatch's view of one fleet worker (None: the first)."""
        return self._attempts.pacing_for(worker)

    # ---- the interface -----------------------------------------------------------------------

    def handle(self, event: Event, wall_s: float) -> list[Effect]:
        """Feed one event at wall instant ``wall_s``; the effects to carry out, in order."""
        serial = self._serial
        serial.begin(wall_s)
        if not serial.suspended:
            self._handle_now(event)
        elif serial.awaits(event):
            serial.deliver(event)  # type: ignore[arg-type]
        else:
            serial.hold(event)
        held = serial.next_held()
        while held is not None:
            self._handle_now(held)
            held = serial.next_held()
        if not serial.suspended:
            self._attempts.pace()  # send what waits for the worker's capacity
        return serial.take_effects()

    def next_due_s(self) -> float | None:
        """The wall instant of the next due slot this owner will observe, if it schedules. None
        while a decision waits for its commit: a tick then could do nothing, and a driver that
        woke for it would spin (the answer's own event brings the next tick)."""
        pulse = self._calendars.pulse
        if self.epoch is None or pulse is None or self.draining or self._serial.suspended:
            return None
        return pulse.next_due_s()

    def has_open_tasks(self) -> bool:
        """Whether a worker call is in flight or an attempt is still observed."""
        return bool(self.open_occurrences())

    def open_occurrences(self) -> list[int]:
        """The occurrences with a worker call in flight or an observation still going."""
        return self._attempts.open_occurrences()

    def waiting_for_capacity(self, worker: str | None = None) -> int:
        """Claimed attempts waiting, unsent, for a worker's capacity (all: None; pacing.py)."""
        return self._attempts.waiting(worker)

    def in_flight(self, worker: str | None = None) -> int:
        """Attempts this owner counts as held at a worker (all: None; pacing.py)."""
        return self._attempts.in_flight(worker)

    def execs_outstanding(self, worker: str | None = None) -> int:
        """Exec requests sent and not answered yet (to a worker, or to all: None)."""
        return self._attempts.execs_outstanding(worker)

    def fleet_status(self) -> list[dict[str, Any]]:
        """Every worker in force: drain state, reachability, load (appliance/owner/fleet.py)."""
        return self._fleet.status()

    def placement_waits(self) -> list[dict[str, Any]]:
        return self._fleet.placement_waits()

    def pacing_view(self) -> dict[str, Any]:
        return self._attempts.pacing_view()

    # ---- events ------------------------------------------------------------------------------

    def _handle_now(self, event: Event) -> None:
        try:
            self._dispatch(event)
        except Exception as exc:  # a bug must not kill scheduling silently
            if self.strict:
                raise
            request = getattr(event, "request", None)
            self._serial.fail(request if isinstance(request, int) else None, exc)

    def _dispatch(self, event: Event) -> None:
        attempts, requests = self._attempts, self._requests
        if isinstance(event, Tick):
            self._serial.run(self._tick())
        elif isinstance(event, LeadershipChanged):
            self._leadership(event)
        elif isinstance(event, TimerFired):
            self._serial.fire(event.token)
        elif isinstance(event, ExecAnswered | ObserveAnswered | CancelAnswered):
            if not self._fleet.probe_answered(event):  # a fleet probe (fleet_decisions.py)
                attempts.answered(event)
        elif isinstance(event, ProposalDone) and attempts.commits.awaits(event.token):
            attempts.commits.answered(event.token, event.outcome)
        elif isinstance(event, ProposalDone) and attempts.waits.awaits(event.token):
            attempts.waits.noted(event.token, event.outcome)
        elif isinstance(event, ProposalDone) and requests.awaits_admission(event.token):
            requests.admission_committed(event.token, event.outcome)
        elif isinstance(event, OperatorRequest):
            self._serial.run(requests.operator_reply(event.request, event.command), event.request)
        elif isinstance(event, AdmissionRequest):
            requests.admit(event.request, event.binding, event.incarnation, event.caller)
        elif isinstance(event, Drain):
            self._standing.draining = True
            self._serial.log("draining", open_tasks=attempts.busy_count())

    def _tick(self) -> Chain[None]:
        if self.epoch is None and self._acquire_wanted:
            yield from self._acquire()
        if self.epoch is not None and self._standing.seeding:
            at_s = self._serial.now_s()
            command = core.SeedInitialSchedules(tuple(self.cfg.schedules), at_s)
            if self._serial.gated(command) is None:
                try:
                    yield from self._seed(at_s)
                except (NotOwner, Uncertain) as exc:
                    self._serial.log("initial_schedules_refused", reason=str(exc))
        if self.epoch is not None and self._charging_wanted:
            yield from self._adopt_charging()
        if self.epoch is not None and not self.draining:
            yield from self._schedule()

    # ---- leadership and ownership ------------------------------------------------------------

    def _leadership(self, leadership: LeadershipChanged) -> None:
        standing = self._standing
        standing.term = leadership.term
        standing.leader_hint = leadership.leader_id
        if leadership.is_leader:
            if standing.epoch is not None and leadership.term != self._owner_term:
                self._lose_ownership(leadership.leader_id)  # re-elected: a new epoch is due
            if standing.epoch is None:
                self._acquire_wanted = True
        elif standing.epoch is not None or self._acquire_wanted:
            self._lose_ownership(leadership.leader_id)

    def _lose_ownership(self, hint: str | None) -> None:
        standing = self._standing
        if standing.epoch is not None:
            self._serial.log("ownership_lost", epoch=standing.epoch, leader_hint=hint)
        standing.epoch = None
        self._acquire_wanted = False
        standing.leader_hint = hint
        standing.seeding = False  # the next owner sees needs_seed in its takeover
        self._calendars.drop()
        self._attempts.clear()
        self._fleet.clear()

    def _acquire(self) -> Chain[None]:
        """Barrier, then commit the ownership transition; only then schedule."""
        serial = self._serial
        done = yield from serial.barrier()
        if isinstance(done.failure, NotLeaderAnswer):
            self._acquire_wanted = False
            return
        if done.failure is not None:
            serial.log("ownership_retry", reason=done.failure.detail)
            return
        try:
            acquired = yield from self._commit_ownership(serial.now_s())
        except (NotOwner, Uncertain, CoreError) as exc:
            serial.log("ownership_retry", reason=str(exc))
            return
        self._acquire_wanted = False
        self._standing.epoch = acquired.epoch
        self._owner_term = self.term
        self._charging_wanted = True
        serial.log(
            "ownership_acquired",
            epoch=acquired.epoch,
            term=self.term,
            reobserve=list(acquired.reobserve),
            resume_cancelling=list(acquired.resume_cancelling),
            fenced=list(acquired.fenced),
        )
        self._calendars.rebuild()
        attempts = self._attempts
        deadline = attempts.deadline_s()
        for oid in acquired.reobserve:
            work = attempts.adopt_existing(oid, deadline)
            if work is not None:
                attempts.observe(work)
        for oid in acquired.resume_cancelling:
            work = attempts.adopt_existing(oid, deadline)
            if work is not None:
                attempts.cancel(work)

    def _adopt_charging(self) -> Chain[None]:
        """Switch the checkpoint to charging rules 2 (appliance/core/charging.py) once every
        voter can apply it; while the version gate says no, nothing is proposed and the next
        tick asks again. A committed refusal is logged and left until the next acquisition."""
        serial = self._serial
        if serial.read(core.charging_rules) == 2:
            self._charging_wanted = False
            return
        command = core.AdoptCharging(2)
        if serial.gated(command) is not None:
            return
        try:
            result = yield from serial.propose(command)
        except (NotOwner, Uncertain) as exc:
            serial.log("charging_retry", reason=str(exc))
            return
        self._charging_wanted = False
        if isinstance(result, Refused):
            serial.log("charging_refused", reason=result.message)
        else:
            serial.log("charging_adopted", rules=2)

    def _commit_ownership(self, at_s: int) -> Chain[ownership.Acquired]:
        """Commit ownership (and, on a new store, the initial schedules); raise on failure."""
        serial = self._serial
        result = yield from serial.propose(core.AcquireOwnership(self.node_id, self.term, at_s))
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
        serial = self._serial
        seeded = yield from serial.propose(
            core.SeedInitialSchedules(tuple(self.cfg.schedules), at_s)
        )
        self._standing.seeding = isinstance(seeded, Refused) and isinstance(
            seeded.error, NotYetApplicable
        )
        if isinstance(seeded, Refused):
            serial.log("initial_schedules_refused", reason=seeded.message)
        else:
            serial.log("initial_schedules", ids=list(seeded.value))
            self._calendars.rebuild()

    # ---- scheduling: pulse, retry-due, claims ------------------------------------------------

    def _schedule(self) -> Chain[None]:
        self._fleet.start_ticks()  # once the fleet has two workers (an add_worker, a takeover)
        now_s = max(
            self._serial.now_s(), self._last_observe_s
        )  # a clock step back observes nothing new
        self._last_observe_s = now_s
        try:
            yield from self._observe(now_s)
            yield from self._retry_due(now_s)
            if self._serial.dirty:
                self._serial.dirty = False
                if self._orphans_possible:
                    self._adopt_orphans()
                yield from self._claim_ready(now_s)
        except NotOwner:
            return
        except Uncertain as exc:
            self._serial.log("proposal_uncertain", reason=str(exc))
            self._calendars.rebuild()

    def _observe(self, now_s: int) -> Chain[None]:
        pulse = self._calendars.pulse
        if pulse is None or self._serial.read(core.paused_since) is not None:
            return  # paused: nothing is selected (resume decides about the span)
        plan = self._serial.read(lambda st: pulse.plan(st, self._calendars.compiled, now_s))
        if plan is None:
            return
        folded = self._with_claims(plan.command, now_s)
        try:
            result = yield from self._serial.propose(folded or plan.command)
        except Uncertain:
            if folded is not None:
                self._orphans_possible = True  # its claims may commit later: adopt them then
            raise
        if folded is not None and isinstance(result, Refused):
            # Only the observation itself should refuse the folded command; whatever it was,
            # observing alone is never worse than before the fold.
            reason = f"ObserveAndClaim refused, observing alone: {result.message}"
            self._serial.log("observation_refused", at=now_s, reason=reason)
            result = yield from self._serial.propose(plan.command)
        if isinstance(result, Refused):
            self._serial.log("observation_refused", at=now_s, reason=result.message)
            self._calendars.rebuild()
            return
        self._serial.read(lambda st: pulse.committed(st, plan, self._calendars.compiled))
        report: core.ObserveReport = result.value  # ObservedAndClaimed is one too
        claimed = report.claimed if isinstance(report, core.ObservedAndClaimed) else ()
        self._serial.log(
            "selection",
            at=now_s,
            created=[list(c) for c in report.created],
            dropped=[[sid, reason.value, n] for sid, reason, n in report.dropped],
            ignored=[list(i) for i in report.ignored],
            retired=list(report.retired),
            late_ms=self._serial.late_ms(min(c[2] for c in report.created))
            if report.created
            else None,
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
            placements = self._serial.read(lambda st: self._fleet.placements(st, observe))
            return core.ObserveAndPlace(
                observe, self.epoch, remote.namespace, placements, authority
            )
        worker = self._fleet.fold_worker()  # one worker for every claim: only a fleet of one
        if worker is None:
            return None
        return core.ObserveAndClaim(observe, self.epoch, remote.namespace, worker, authority)

    def _dispatch_claimed(self, record: Any) -> None:
        """Dispatch a claim this owner just committed (its committed binding, its code)."""
        binding = self._serial.read(lambda st: ownership.binding_of(st, record))
        code = self._code_of(record.id)
        if binding is None or code is None:  # cannot happen right after the commit; never guess
            self._serial.log("binding_unknown", occurrence=record.id, attempt=record.attempt)
            self._orphans_possible = True
            return
        self._serial.log(
            "claim",
            occurrence=record.id,
            schedule=record.schedule_id,
            attempt=record.attempt,
            epoch=self.epoch,
            worker=binding["worker_id"],
            late_ms=self._serial.late_ms(record.due_s),
        )
        self._attempts.start(record, binding, code)

    def _code_of(self, occurrence_id: int) -> str | None:
        """The code the occurrence was created with: an update keeps it for live records
        (appliance/core/live_code.py), so the dispatch matches the claim's digest."""
        return self._serial.read(lambda st: core.record_code(st, occurrence_id))

    def _retry_due(self, now_s: int) -> Chain[None]:
        due = self._serial.read(lambda st: st.next_retry_due_s())
        if due is not None and due <= now_s:
            result = yield from self._serial.propose(core.RetryDue(now_s))
            if isinstance(result, Accepted) and result.value:
                self._serial.log("retry_due", occurrences=list(result.value))

    def _claim_ready(self, now_s: int) -> Chain[None]:
        if not self._may_claim(now_s) or self.epoch is None:
            return
        epoch = self.epoch
        planned: list[tuple[Any, Any, dict[str, Any]]] = []
        load: Counter[str] = Counter()  # this pass's claims per worker (placement's load)
        ready = self._serial.read(claimable)
        base = self._fleet.candidates(Counter()) if ready else []
        for oid, attempt in ready:
            record, schedule = self._serial.read(
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
            worker = self._fleet.choose_worker(oid, schedule.definition.placement, load, base)
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
        outcomes = yield from self._serial.proposals(commands)
        for (record, code, binding), outcome in zip(planned, outcomes, strict=True):
            oid, attempt = record.id, record.attempt
            try:
                result = self._serial.interpret(outcome)
            except Uncertain as exc:
                self._serial.log(
                    "claim_uncertain", occurrence=oid, attempt=attempt, reason=str(exc)
                )
                self._orphans_possible = True  # it may commit later: adopt it then
                continue
            if isinstance(result, Refused):
                self._serial.log(
                    "claim_refused", occurrence=oid, attempt=attempt, reason=result.message
                )
                continue
            self._serial.log(
                "claim",
                occurrence=oid,
                schedule=record.schedule_id,
                attempt=attempt,
                epoch=self.epoch,
                worker=binding["worker_id"],
                late_ms=self._serial.late_ms(record.due_s),
            )
            self._attempts.start(record, binding, code)

    def _adopt_orphans(self) -> None:
        """Dispatch this epoch's committed claims whose proposal outcome was unknown here.

        They were never dispatched (no ``Work`` exists for them), so dispatching now is still
        the first and only dispatch of that attempt.
        """
        self._orphans_possible = False
        epoch = self.epoch
        running = self._serial.read(
            lambda st: [r for r in st.occurrences.values() if r.state is S.RUNNING]
        )
        for record in running:
            if record.id in self._attempts.work:
                continue
            binding = self._serial.read(lambda st, r=record: ownership.binding_of(st, r))
            if binding is None or binding["epoch"] != epoch or binding["owner"] != self.node_id:
                continue
            if self._serial.read(
                lambda st, r=record: ownership.permit_may_exist(st, r.id, r.attempt)
            ):
                continue
            code = self._code_of(record.id)
            if code is None:
                continue
            self._serial.log("claim_adopted", occurrence=record.id, attempt=record.attempt)
            self._attempts.start(record, binding, code)
