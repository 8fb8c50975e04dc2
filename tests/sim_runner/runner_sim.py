"""A deterministic simulation of the runner's state machine under takeovers and a faulty worker.

Theory of operation
-------------------
One ``random.Random(seed)`` drives everything, so a seed reproduces a run exactly. The replicated
log is a list of committed commands; every command goes through ``command_to_json`` → JSON →
``command_from_json`` and is applied with the real ``apply`` to three replica states, which must
agree on every result (accepted with equal values, or refused with the same error) and end
byte-identical. Replicas crash and restart from their checkpoint bytes plus the log tail.

Owners take over in turn: a new Raft term elects a node, which commits ``AcquireOwnership`` (the
takeover fence) and then pulses (half the time with ``ObserveAndClaim``, claiming what the
observation creates in the same commit), claims with full bindings, dispatches to the fake worker,
observes, cancels and retries — a miniature of the runner loop, reading only its own replica.
A deposed owner's proposals may still be committed late (Raft can commit an old leader's entry
after an election), so stale claims and outcomes reach the log.

The fake worker reserves durably, asks for admission (an ``Admit`` command), consumes and
launches; its exec acknowledgement may be lost, its admission request delayed past a takeover or
duplicated, and it may crash (a new incarnation; running work becomes ``lost``).

After the SAFETY phase (all faults) a LIVENESS phase heals the worker and the network, keeps one
owner, stops new slots (the schedule is disabled) and runs until the work settles. The checkers:

* at most one permit per invocation attempt (from every ``Admit`` result), and the worker
  launches each invocation at most once, only with a permit granted to its own incarnation;
* an attempt number rises only after a confirmed failure (retry) or a fence of an attempt that
  never held a permit — so ``Unknown`` is never retried automatically;
* at the end no occurrence is silently lost: each is terminal, ``Unknown`` or ``Cancelling``;
* replicas are byte-identical.

Operator commands beyond the seeds (issue 22) come from a stream of their own (so each seed's
fault sequence is unchanged): ``run_now`` with request ids (repeated, also by a later owner and
committed late by a deposed one; even seeds only, so the odd ones keep exactly their earlier
runs), ``update`` of the code mid-run, ``pause``/``resume``,
``disable``/``enable`` and ``backfill``. Their checkers: a request id yields at most one
occurrence, every claim binds the digest of the code its occurrence was created with, and while
paused nothing is created by observation and nothing is claimed.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from appliance.core.binding import payload_sha256
from appliance.core.definition import parse_definition
from appliance.core.errors import CoreError
from appliance.core.limits import Limits
from appliance.core.state import (
    AcknowledgeStopped,
    AcquireOwnership,
    Admit,
    Authority,
    Backfill,
    Binding,
    Cancel,
    ClaimOccurrence,
    ConfirmCancelled,
    DisableSchedule,
    EnableSchedule,
    FenceAfterCancel,
    Granted,
    MarkUnknown,
    Observe,
    ObserveAndClaim,
    ObservedAndClaimed,
    ObservedSchedule,
    Pause,
    RecordOutcome,
    Resume,
    RetryDue,
    RunNow,
    RunNowResult,
    SchedulerState,
    SeedInitialSchedules,
    Skipped,
    Takeover,
    UpdateSchedule,
    admission_record,
    apply,
    binding_for,
    command_from_json,
    command_to_json,
    current_ownership,
    from_json,
)

NODES = ("voter-a", "voter-b", "voter-c")
NAMESPACE = "sim"
WORKER_ID = "worker-1"
START_S = 1_800_000_000
SLOT_S = 60
AUTHORITY = Authority("2099-01-01T00:00:00Z", 120, 64, "sim")
OBSERVE_TIMEOUT_S = 300  # Running with nothing observable past this → unreachable → Unknown
LIMITS = Limits(schedules=4, records=256, outstanding=64, running=16)
DEFINITION = {
    "name": "every-minute",
    "code": "console.log('tick')",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": {"CatchUp": {"cap": 3}},
        "overlap": "Concurrent",
        "retry": {"max_retries": 1, "delay_seconds": 30},
    },
}
FAILURES = frozenset({"failed", "timed_out", "out_of_memory"})
END_STATES = frozenset({"Cancelled", "Succeeded", "Failed", "Abandoned", "Unknown", "Cancelling"})


class Violation(AssertionError):
    def __init__(self, seed: int, rule: str, detail: str):
        super().__init__(f"seed {seed}: {rule}: {detail}")
        self.seed = seed
        self.rule = rule


@dataclass(frozen=True)
class Faults:
    leader_change: float = 0.04
    replica_crash: float = 0.02
    worker_crash: float = 0.02
    lost_ack: float = 0.15
    delayed_admission: float = 0.15
    duplicate_admission: float = 0.1
    late_proposal: float = 0.3
    cancel: float = 0.05
    deferred_dispatch: float = 0.3
    cancel_unanswered: float = 0.3


NO_FAULTS = Faults(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


# ---- the replicated log ------------------------------------------------------------------------


class Cluster:
    """The committed log and three replicas applying it."""

    def __init__(self, seed: int, rng: random.Random):
        self.seed = seed
        self.rng = rng
        self.log: list[Any] = []
        self.replicas = [SchedulerState(LIMITS) for _ in NODES]
        self.applied = [0 for _ in NODES]
        self.down: dict[int, bytes] = {}  # replica index -> its checkpoint at the crash
        self.permits: dict[tuple[int, int], str] = {}  # (occurrence, attempt) -> incarnation
        self.checker = TransitionChecker(seed, self.permits)
        self.events: Counter = Counter()  # (command, outcome) -> how often, for coverage
        self.created_digest: dict[int, str] = {}  # occurrence id -> its code's digest at creation
        self.requests: dict[str, int | None] = {}  # run_now request id -> its occurrence

    def commit(self, command: Any) -> Any:
        """Append to the log and apply on every live replica; the result (value or CoreError)."""
        wire = json.loads(json.dumps(command_to_json(command)))
        decoded = command_from_json(wire)
        if decoded != command:
            raise Violation(self.seed, "wire", f"{command!r} does not round-trip")
        self.log.append(decoded)
        watched = self.replicas[self._watcher()]
        paused_before = "paused" in watched.extra
        created_before = watched.next_occurrence_id
        results = []
        for index, replica in enumerate(self.replicas):
            if index in self.down:
                continue
            results.append(self._apply(index, replica, decoded))
        first = results[0]
        outcome = type(first).__name__ if isinstance(first, CoreError) else "ok"
        self.events[(type(command).__name__, outcome)] += 1
        if isinstance(first, Takeover):
            self.events[("takeover", "fenced")] += len(first.fenced)
            self.events[("takeover", "reobserve")] += len(first.reobserve)
            self.events[("takeover", "resume_cancelling")] += len(first.resume_cancelling)
        if isinstance(first, Granted) and first.existing:
            self.events[("Admit", "existing")] += 1
        if isinstance(first, ObservedAndClaimed):
            self.events[("ObserveAndClaim", "claimed")] += len(first.claimed)
            for _oid, why in first.unclaimed:
                self.events[("ObserveAndClaim", why.split(":")[0])] += 1
        for other in results[1:]:
            if _describe(other) != _describe(first):
                raise Violation(self.seed, "replicas agree", f"{first!r} vs {other!r}")
        if isinstance(first, Granted) and not first.existing:
            key = (first.invocation.occurrence_id, first.invocation.attempt)
            if key in self.permits:
                raise Violation(self.seed, "one permit per invocation", f"second permit {key}")
            self.permits[key] = first.incarnation
        self._check_operator_rules(decoded, first, paused_before, created_before)
        return first

    def _check_operator_rules(
        self, command: Any, result: Any, paused_before: bool, created_before: int
    ) -> None:
        state = self.replicas[self._watcher()]
        for oid in range(created_before, state.next_occurrence_id):
            record = state.occurrences.get(oid)
            schedule = None if record is None else state.schedules.get(record.schedule_id)
            if schedule is not None:
                self.created_digest[oid] = payload_sha256(schedule.definition.code)
            if paused_before and isinstance(command, Observe | ObserveAndClaim):
                raise Violation(self.seed, "nothing selected while paused", f"occurrence {oid}")
        claims = []
        if isinstance(command, ClaimOccurrence) and not isinstance(result, CoreError):
            claims.append(command.binding)
        if isinstance(result, ObservedAndClaimed):
            for record in result.claimed:
                admission = admission_record(state, record.id)
                if admission is not None and admission.claim_for(record.attempt) is not None:
                    claims.append(admission.claim_for(record.attempt))
        for binding in claims:
            if paused_before:
                raise Violation(self.seed, "nothing claimed while paused", repr(binding))
            created = self.created_digest.get(binding.occurrence_id)
            if created is not None and binding.payload_sha256 != created:
                raise Violation(
                    self.seed,
                    "a live occurrence keeps its code",
                    f"occurrence {binding.occurrence_id} claimed with another code",
                )
            schedule = state.schedules.get(binding.schedule_id)
            if schedule is not None and payload_sha256(schedule.definition.code) != created:
                self.events[("claim", "kept code")] += 1
        if isinstance(command, RunNow) and isinstance(result, RunNowResult):
            if command.request_id is not None:
                first = self.requests.setdefault(command.request_id, result.occurrence_id)
                if first != result.occurrence_id:
                    raise Violation(
                        self.seed, "one occurrence per request id", f"{command.request_id}"
                    )
            self.events[("RunNow", "repeated" if result.repeated else "first")] += 1

    def _apply(self, index: int, replica: SchedulerState, command: Any) -> Any:
        watch = index == self._watcher()
        before = dict(replica.occurrences) if watch else None
        try:
            applied = apply(replica, command)
        except CoreError as refused:
            self.applied[index] += 1
            return refused
        self.applied[index] += 1
        if before is not None:
            self.checker.check(before, replica, applied.touched)
        return applied.value

    def _watcher(self) -> int:
        return min(i for i in range(len(NODES)) if i not in self.down)

    def crash_replica(self, index: int) -> None:
        if index in self.down or len(self.down) >= 1:
            return  # keep a majority up
        self.down[index] = self.replicas[index].to_json()

    def restart_replicas(self) -> None:
        for index, snapshot in list(self.down.items()):
            replica = from_json(snapshot)
            for command in self.log[self.applied[index] :]:
                with contextlib.suppress(CoreError):
                    apply(replica, command)
                self.applied[index] += 1
            self.replicas[index] = replica
            del self.down[index]

    def check_identical(self) -> None:
        first = self.replicas[0].to_json()
        for replica in self.replicas[1:]:
            if replica.to_json() != first:
                raise Violation(self.seed, "replicas byte-identical", "checkpoints differ")


def _describe(result: Any) -> Any:
    if isinstance(result, CoreError):
        return (type(result).__name__, str(result))
    return result


class TransitionChecker:
    """An attempt number rises only after a confirmed failure or a fence of an unpermitted one."""

    def __init__(self, seed: int, permits: dict[tuple[int, int], str]):
        self.seed = seed
        self.permits = permits

    def check(self, before: dict, state: SchedulerState, touched: frozenset[str]) -> None:
        for name in touched:
            if not name.startswith("occurrence/"):
                continue
            oid = int(name.partition("/")[2])
            old, new = before.get(oid), state.occurrences.get(oid)
            if old is None or new is None or new.attempt == old.attempt:
                continue
            failed = any(e.attempt == old.attempt and e.reason in FAILURES for e in new.timeline)
            if (oid, old.attempt) in self.permits and not failed:
                raise Violation(
                    self.seed,
                    "no automatic retry without a confirmed failure",
                    f"occurrence {oid}: {old.state.value} attempt {old.attempt} (permitted) "
                    f"became attempt {new.attempt}",
                )


# ---- the fake worker ---------------------------------------------------------------------------


@dataclass
class Execution:
    incarnation: str
    finish_s: int
    outcome: str
    status: str = "running"  # running | completed | failed | cancelled | lost


@dataclass
class FakeWorker:
    seed: int
    rng: random.Random
    cluster: Cluster
    faults: Faults
    generation: int = 1
    reservations: dict[tuple[int, int], str] = field(default_factory=dict)
    executions: dict[tuple[int, int], Execution] = field(default_factory=dict)
    launches: Counter = field(default_factory=Counter)
    parked: list[tuple[Binding, str, int]] = field(default_factory=list)
    consumed_permits: dict[tuple[int, int], str] = field(default_factory=dict)

    @property
    def incarnation(self) -> str:
        return f"inc-{self.generation}"

    def exec(self, binding: Binding, now_s: int) -> str:
        """accepted | existing | refused | ambiguous (the runner cannot tell what happened)."""
        key = (binding.occurrence_id, binding.attempt)
        if key in self.reservations:
            return "existing"
        self.reservations[key] = "reserved"
        if self.rng.random() < self.faults.delayed_admission:
            self.parked.append((binding, self.incarnation, now_s))
            return "ambiguous"  # the exec times out while admission is still in flight
        result = self.cluster.commit(Admit(binding, self.incarnation, now_s))
        if not isinstance(result, Granted):
            self.reservations[key] = "refused"
            return "refused"
        self._consume_and_launch(key, result, now_s)
        if self.rng.random() < self.faults.duplicate_admission:
            self._duplicate(binding, now_s)
        return "ambiguous" if self.rng.random() < self.faults.lost_ack else "accepted"

    def _duplicate(self, binding: Binding, now_s: int) -> None:
        again = self.cluster.commit(Admit(binding, self.incarnation, now_s))
        if not (isinstance(again, Granted) and again.existing):
            raise Violation(self.seed, "same incarnation, same permit", repr(again))
        other = self.cluster.commit(Admit(binding, f"{self.incarnation}-other", now_s))
        if isinstance(other, Granted):
            raise Violation(self.seed, "another incarnation is refused", repr(other))

    def deliver_parked(self, now_s: int, all_of_them: bool = False) -> None:
        keep = []
        for binding, incarnation, _sent_s in self.parked:
            if not all_of_them and self.rng.random() < 0.5:
                keep.append((binding, incarnation, _sent_s))
                continue
            key = (binding.occurrence_id, binding.attempt)
            result = self.cluster.commit(Admit(binding, incarnation, now_s))
            if not isinstance(result, Granted):
                if self.reservations.get(key) == "reserved":
                    self.reservations[key] = "refused"
                continue
            # The permit answer reaches the worker only if the asking incarnation still runs and
            # the reservation was not fenced by a cancel meanwhile.
            if incarnation == self.incarnation and self.reservations.get(key) == "reserved":
                self._consume_and_launch(key, result, now_s)
        self.parked = keep

    def _consume_and_launch(self, key: tuple[int, int], permit: Granted, now_s: int) -> None:
        if self.cluster.permits.get(key) != permit.incarnation:
            raise Violation(self.seed, "launch needs this incarnation's permit", f"{key}")
        self.reservations[key] = "consumed"
        self.consumed_permits[key] = permit.incarnation
        self.launches[key] += 1
        if self.launches[key] > 1:
            raise Violation(self.seed, "at most one submission per invocation", f"{key}")
        outcome = "completed" if self.rng.random() < 0.8 else "failed"
        finish = now_s + self.rng.randint(5, 150)
        self.executions[key] = Execution(self.incarnation, finish, outcome)

    def status(self, key: tuple[int, int], now_s: int) -> str | None:
        execution = self.executions.get(key)
        if execution is None:
            return None
        if execution.status == "running" and now_s >= execution.finish_s:
            execution.status = execution.outcome
        return execution.status

    def cancel(self, key: tuple[int, int], now_s: int) -> str:
        reservation = self.reservations.get(key)
        if reservation in (None, "reserved", "refused", "fenced"):
            self.reservations[key] = "fenced"
            return "fenced_before_consume"
        status = self.status(key, now_s)
        if status == "running":
            self.executions[key].status = "cancelled"
            return "stopped"
        if status == "lost":
            return "unknown"
        return status or "unknown"

    def crash(self) -> None:
        self.generation += 1
        for execution in self.executions.values():
            if execution.status == "running":
                execution.status = "lost"


# ---- the owner (a miniature runner loop) --------------------------------------------------------


@dataclass
class Owner:
    node: str
    replica: int
    term: int
    acquired: bool = False
    dispatched: dict[int, tuple[int, int]] = field(default_factory=dict)  # oid -> (attempt, at)
    cancelling: set[int] = field(default_factory=set)
    to_dispatch: list[Binding] = field(default_factory=list)  # claimed, dispatch still queued


class Simulation:
    def __init__(self, seed: int, steps: int = 120, settle_steps: int = 60):
        self.seed = seed
        self.rng = random.Random(seed)
        # Whether an owner folds its claims into the observation: a stream of its own, so the
        # fault sequence of a seed stays the one it was before the fold existed.
        self.fold_rng = random.Random(seed ^ 0x5EED)
        self.steps = steps
        self.settle_steps = settle_steps
        self.cluster = Cluster(seed, self.rng)
        self.faults = Faults()
        self.worker = FakeWorker(seed, self.rng, self.cluster, self.faults)
        self.now_s = START_S
        self.term = 0
        self.owner: Owner | None = None
        self.late: list[Any] = []  # a deposed owner's proposals, committed later
        self.zombie_dispatches: list[Binding] = []  # a deposed owner's dispatches, still running
        self.definition = parse_definition(DEFINITION, LIMITS)
        self.disabled = False
        # The operator's commands: a stream of their own, like fold_rng.
        self.ops_rng = random.Random(seed ^ 0x0FE4A7)
        self.operator_on = seed % 2 == 0  # even seeds only: odd ones keep their old runs
        self.versions = 0
        self.request_ids: list[str] = []

    # -- driving --

    def run(self) -> None:
        self._elect()
        for _ in range(self.steps):
            self._step()
        self._heal()
        for _ in range(self.settle_steps):
            self._step()
        self._final_checks()

    def _step(self) -> None:
        rng, faults = self.rng, self.faults
        self.now_s += rng.randint(1, 20)
        if rng.random() < faults.leader_change:
            self._elect()
        if rng.random() < faults.replica_crash:
            self.cluster.crash_replica(rng.randrange(len(NODES)))
        elif self.cluster.down and rng.random() < 0.3:
            self.cluster.restart_replicas()
        if rng.random() < faults.worker_crash:
            self.worker.crash()
        if self.late and rng.random() < faults.late_proposal:
            self.cluster.commit(self.late.pop(0))
        if self.worker.parked:
            self.worker.deliver_parked(self.now_s)
        if self.zombie_dispatches and rng.random() < 0.3:
            self.worker.exec(self.zombie_dispatches.pop(0), self.now_s)
        self._owner_tick()
        self._operator()

    def _operator(self) -> None:
        """One operator command now and then, proposed through the current owner."""
        rng, owner = self.ops_rng, self.owner
        if not self.operator_on or self.faults is NO_FAULTS:
            return  # odd seeds run as before; in the liveness phase the operator has stopped
        if owner is None or not owner.acquired or rng.random() > 0.25:
            return
        state = self._state()
        progress = state.progress.get(1)
        if progress is None or 1 not in state.schedules:
            return
        now, cursor = self.now_s, progress.cursor_s
        skipped = (Skipped(1, cursor, max(0, now // SLOT_S - cursor // SLOT_S)),)
        choice = rng.random()
        if choice < 0.3:
            if self.request_ids and rng.random() < 0.5:
                request_id = rng.choice(self.request_ids)  # a client repeating after no answer
            else:
                request_id = f"req-{len(self.request_ids)}"
                self.request_ids.append(request_id)
            command = RunNow(1, now, request_id)
            self._propose(command)
            if rng.random() < 0.3:
                self.late.append(command)  # the same request, also committed late
        elif choice < 0.5:
            self.versions += 1
            current = state.schedules[1].definition
            new = replace(current, code=f"console.log('v{self.versions}')")
            self._propose(UpdateSchedule(1, new, ("code",), now))
        elif choice < 0.65 and not self.disabled:
            if "paused" in state.extra:
                self._propose(Resume(now, rng.random() < 0.5, skipped))
            else:
                self._propose(Pause(now))
        elif choice < 0.8 and not self.disabled:
            if state.schedules[1].enabled:
                self._propose(DisableSchedule(1, now))
            else:
                self._propose(EnableSchedule(1, now, rng.random() < 0.5, skipped))
        else:
            end = cursor - rng.randint(0, 600)
            start = end - rng.randint(0, 900)
            slots = tuple(range((start // SLOT_S + 1) * SLOT_S, end + 1, SLOT_S))[:20]
            overlap = rng.choice(("Skip", "Queue", "Concurrent"))
            self._propose(Backfill(1, start, end, slots, overlap, now))

    def _propose(self, command: Any) -> Any:
        return self.cluster.commit(command)

    def _elect(self) -> None:
        old = self.owner
        if old is not None and self.rng.random() < 0.5:
            # The deposed owner had a proposal in flight: a stale claim of an occurrence it saw.
            state = self.cluster.replicas[old.replica]
            pending = [o.id for o in state.occurrences.values() if o.state.value == "Pending"]
            ownership = current_ownership(state)
            if pending and ownership is not None and ownership.node == old.node:
                oid = self.rng.choice(pending)
                binding = self._binding(state, oid)
                if binding is not None:
                    command = ClaimOccurrence(
                        oid, binding.attempt, binding.epoch, binding, self.now_s
                    )
                    self.late.append(command)
        if old is not None and old.acquired and self.fold_rng.random() < 0.5:
            # ... or its folded observation, which may commit before or after the takeover.
            state = self.cluster.replicas[old.replica]
            ownership = current_ownership(state)
            observe = self._observation(state)
            if observe is not None and ownership is not None and ownership.node == old.node:
                self.late.append(self._folded(observe, ownership.epoch))
        if old is not None:
            self.zombie_dispatches.extend(old.to_dispatch)
        candidates = [i for i in range(len(NODES)) if i not in self.cluster.down]
        index = self.rng.choice(candidates)
        self.term += 1
        self.owner = Owner(NODES[index], index, self.term)

    def _heal(self) -> None:
        self.faults = NO_FAULTS
        self.worker.faults = NO_FAULTS
        self.cluster.restart_replicas()
        for command in self.late:
            self.cluster.commit(command)
        self.late = []
        self.worker.deliver_parked(self.now_s, all_of_them=True)
        for binding in self.zombie_dispatches:
            self.worker.exec(binding, self.now_s)
        self.zombie_dispatches = []
        self._propose(Resume(self.now_s, False, ()))  # the liveness phase runs unpaused
        self._owner_tick()
        result = self._propose(DisableSchedule(1, self.now_s))
        self.disabled = not isinstance(result, CoreError)

    # -- the owner's loop --

    def _state(self) -> SchedulerState:
        if self.owner is None:
            raise RuntimeError("no owner")
        if self.owner.replica in self.cluster.down:
            self.cluster.restart_replicas()
        return self.cluster.replicas[self.owner.replica]

    def _binding(self, state: SchedulerState, oid: int) -> Binding | None:
        try:
            return binding_for(
                state, oid, namespace=NAMESPACE, worker_id=WORKER_ID, authority=AUTHORITY
            )
        except CoreError:
            return None

    def _owner_tick(self) -> None:
        owner = self.owner
        if owner is None:
            return
        state = self._state()
        if not owner.acquired:
            takeover = self._propose(AcquireOwnership(owner.node, owner.term, self.now_s))
            if not isinstance(takeover, Takeover):
                raise Violation(self.seed, "acquire", repr(takeover))
            owner.acquired = True
            if takeover.needs_seed:
                self._propose(SeedInitialSchedules((self.definition,), self.now_s))
            for oid in takeover.reobserve:
                owner.dispatched[oid] = (state.occurrences[oid].attempt, self.now_s)
            owner.cancelling.update(takeover.resume_cancelling)
        self._pulse(state)
        due = state.next_retry_due_s()
        if due is not None and due <= self.now_s:
            self._propose(RetryDue(self.now_s))
        self._claim_and_dispatch(state)
        self._observe(state)
        self._cancel(state)
        if self.faults is NO_FAULTS:
            self._operator_acknowledges(state)

    def _operator_acknowledges(self, state: SchedulerState) -> None:
        """The human step of the recovery guide: once the worker provably runs nothing for an
        Unknown or unresolved Cancelling attempt, attest it (the sim knows the truth)."""
        for record in list(state.occurrences.values()):
            if record.state.value not in ("Unknown", "Cancelling"):
                continue
            if self.worker.status((record.id, record.attempt), self.now_s) == "running":
                continue
            self._propose(AcknowledgeStopped(record.id, True, self.now_s))

    def _observation(self, state: SchedulerState) -> Observe | None:
        progress = state.progress.get(1)
        schedule = state.schedules.get(1)
        if progress is None or schedule is None or not schedule.enabled:
            return None
        cursor = progress.cursor_s
        slots = list(range((cursor // SLOT_S + 1) * SLOT_S, self.now_s + 1, SLOT_S))
        if not slots:
            return None
        chosen = tuple(slots[-3:])
        entry = ObservedSchedule(1, cursor, self.now_s, chosen, len(slots) - len(chosen))
        return Observe(self.now_s, (entry,))

    @staticmethod
    def _folded(observe: Observe, epoch: int) -> ObserveAndClaim:
        return ObserveAndClaim(observe, epoch, NAMESPACE, WORKER_ID, AUTHORITY)

    def _pulse(self, state: SchedulerState) -> None:
        observe = self._observation(state)
        if observe is None:
            return
        owner, ownership = self.owner, current_ownership(state)
        if owner is None or ownership is None or ownership.node != owner.node:
            self._propose(observe)
            return
        if self.fold_rng.random() < 0.5:
            self._propose(observe)
            return
        result = self._propose(self._folded(observe, ownership.epoch))
        if not isinstance(result, ObservedAndClaimed):
            return
        for record in result.claimed:  # committed claims: dispatch like any other
            admission = admission_record(self._state(), record.id)
            binding = None if admission is None else admission.claim_for(record.attempt)
            if binding is None:
                raise Violation(self.seed, "folded claim bound", f"occurrence {record.id}")
            if self.rng.random() < self.faults.deferred_dispatch:
                owner.to_dispatch.append(binding)
            else:
                self._dispatch(binding)

    def _claim_and_dispatch(self, state: SchedulerState) -> None:
        owner = self.owner
        ownership = current_ownership(state)
        if owner is None or ownership is None or ownership.node != owner.node:
            return
        queued, owner.to_dispatch = owner.to_dispatch, []
        for binding in queued:
            self._dispatch(binding)
        for oid in list(state.pending_ids(1)):
            record = state.occurrences[oid]
            if record.retry_waiting:
                continue
            binding = self._binding(state, oid)
            if binding is None:
                continue
            command = ClaimOccurrence(oid, binding.attempt, binding.epoch, binding, self.now_s)
            if isinstance(self._propose(command), CoreError):
                continue
            if self.rng.random() < self.faults.deferred_dispatch:
                owner.to_dispatch.append(binding)  # the dispatch task runs later
            else:
                self._dispatch(binding)

    def _dispatch(self, binding: Binding) -> None:
        owner = self.owner
        if owner is None:
            return
        answer = self.worker.exec(binding, self.now_s)
        owner.dispatched[binding.occurrence_id] = (binding.attempt, self.now_s)
        if answer == "ambiguous":
            self._propose(MarkUnknown(binding.invocation, "exec: no answer", self.now_s))

    def _observe(self, state: SchedulerState) -> None:
        owner = self.owner
        if owner is None:
            return
        for oid, (attempt, since_s) in list(owner.dispatched.items()):
            record = state.occurrences.get(oid)
            if record is None or record.attempt != attempt or record.terminal:
                del owner.dispatched[oid]
                continue
            if record.state.value == "Cancelling":
                owner.cancelling.add(oid)
                continue
            status = self.worker.status((oid, attempt), self.now_s)
            if status in ("completed", "failed", "cancelled"):
                self._propose(RecordOutcome(oid, attempt, status, self.now_s, "sim"))
            elif status == "lost" and record.state.value == "Running":
                self._propose(RecordOutcome(oid, attempt, "lost", self.now_s))
            elif (
                status is None
                and record.state.value == "Running"
                and self.now_s - since_s > OBSERVE_TIMEOUT_S
            ):
                self._propose(RecordOutcome(oid, attempt, "unreachable", self.now_s))

    def _cancel(self, state: SchedulerState) -> None:
        owner = self.owner
        if owner is None:
            return
        running = [
            o.id for o in state.occurrences.values() if o.state.value in ("Running", "Unknown")
        ]
        if running and self.rng.random() < self.faults.cancel:
            oid = self.rng.choice(running)
            if not isinstance(self._propose(Cancel(oid, self.now_s)), CoreError):
                owner.cancelling.add(oid)
        for oid in sorted(owner.cancelling):
            record = state.occurrences.get(oid)
            if record is None or record.state.value != "Cancelling":
                owner.cancelling.discard(oid)
                continue
            admission = admission_record(state, oid)
            claim = admission.claim_for(record.attempt) if admission else None
            if claim is None:
                continue
            if self.rng.random() < self.faults.cancel_unanswered:
                continue  # the cancel request timed out; asked again on a later tick
            answer = self.worker.cancel((oid, record.attempt), self.now_s)
            if answer == "fenced_before_consume":
                self._propose(FenceAfterCancel(claim.invocation, self.now_s))
            elif answer == "stopped":
                self._propose(ConfirmCancelled(oid, record.attempt, self.now_s))
            elif answer in ("completed", "failed", "cancelled"):
                self._propose(RecordOutcome(oid, record.attempt, answer, self.now_s, "sim"))

    # -- the final checks --

    def _final_checks(self) -> None:
        self.cluster.restart_replicas()
        self.cluster.check_identical()
        state = self.cluster.replicas[0]
        reloaded = from_json(state.to_json())
        if (reloaded.budget_bytes, reloaded.size_bytes) != (state.budget_bytes, state.size_bytes):
            raise Violation(self.seed, "budgets survive a reload", "budget or size differs")
        if not state.size_bytes <= state.budget_bytes:
            raise Violation(self.seed, "size within budget", f"{state.size_bytes}")
        for record in state.occurrences.values():
            if record.state.value not in END_STATES:
                raise Violation(
                    self.seed,
                    "no occurrence silently lost",
                    f"occurrence {record.id} ends {record.state.value} attempt {record.attempt}",
                )
        for key, incarnation in self.worker.consumed_permits.items():
            if self.cluster.permits.get(key) != incarnation:
                raise Violation(self.seed, "consumed permits were granted", f"{key}")

    def summary(self) -> Counter:
        state = self.cluster.replicas[0]
        counts: Counter = Counter(o.state.value for o in state.occurrences.values())
        counts["permits"] = len(self.cluster.permits)
        counts["log"] = len(self.cluster.log)
        counts["terms"] = self.term
        return counts


def run_seed(seed: int, steps: int = 120, settle_steps: int = 60) -> Simulation:
    simulation = Simulation(seed, steps, settle_steps)
    simulation.run()
    return simulation


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.sim_runner.runner_sim SEED [SEED ...]``: replay seeds, print summaries."""
    import sys

    seeds = [int(a) for a in (argv if argv is not None else sys.argv[1:])] or [0]
    for seed in seeds:
        simulation = run_seed(seed)
        print(seed, dict(sorted(simulation.summary().items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
