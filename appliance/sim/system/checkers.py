"""The system simulator's checkers: what must hold in every run, whatever the faults.

Theory of operation. The ``Ledger`` keeps the ground truth the parts of the system cannot see
all at once: the committed log (every index's payload the first time any voter applies it), a
reference replica that applies exactly that log with the real ``Machine``, every permit the log
granted, and every launch the engines saw. Each rule is checked where it can first break:

- on every commit: a committed index never changes (state-machine safety); at most one permit
  per invocation, and only for a claim of the current ownership epoch; no admission at or after
  the grant's expiry (by the committing owner's clock);
  an attempt number rises only if the previous attempt held no committed permit (it was fenced:
  never launched) or its launch ended in an engine-confirmed failure — so an ``Unknown`` with a
  permit (or a lost outcome) is never retried;
  ``Cancelled`` only after the engine confirmed the stop, or for an attempt never launched
  (its fence before consume committed: a launch after that is caught below);
  the operator commands (issue 22): at most one occurrence per ``run_now`` request id, however
  often (and to whichever owner) it is repeated; between a committed ``Pause`` and the next
  committed ``Resume`` no commit creates an occurrence and no claim commits; every claim (and
  every admission) binds the digest of the code its occurrence was created with, not the
  schedule's newest code after an ``update``;
- on every launch: at most one launch per invocation, only with a permit the log granted to
  this incarnation, only after the consume is durable on the worker's disk, only before the
  grant expires by the worker's clock, and never for an attempt the log already moved past or
  cancelled;
- with a fleet (issue 33): the launch rules above hold across workers (one launch per
  invocation, whichever worker), each worker is paced by its own statements, and at the end no
  invocation is consumed in more than one worker's durable store;
- at the end (after the liveness phase): every occurrence is terminal, ``Unknown`` or
  ``Cancelling``; every replica is byte-identical to the reference; every committed schedule is
  still there. The run also counts ``Unknown`` occurrences with and without a committed permit
  (issue 23); ``strict_unknown`` fails any without one.

And everywhere: an exception raised inside an owner is a bug (issue 31). The owners run strict
(``SystemOptions.strict``), so it leaves ``Owner.handle`` and the voter's driver reports it as a
violation (``RULE_OWNER_RAISED``) with the seed, instead of a ``loop_error`` nobody counts.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from appliance.core import state as core
from appliance.core.errors import CoreError
from appliance.core.limits import Limits
from appliance.core.pause import Resume
from appliance.core.runner_parts import admission_of
from appliance.owner.pacing import PACING_PROBE
from appliance.protocol.v1 import payload_sha256
from appliance.runner.machine import Accepted, Machine, decode_command
from appliance.worker.memory_store import MemoryDisk

if TYPE_CHECKING:
    from appliance.sim.system.world import SystemResult, SystemSim

END_STATES = frozenset({"Cancelled", "Succeeded", "Failed", "Abandoned", "Unknown", "Cancelling"})
HELD_BY_OPERATOR = frozenset({"Unknown", "Cancelling"})  # running places until attested or stopped
CONFIRMED_FAILURES = frozenset({"failed", "timed_out"})
RULE_STALE_EPOCH = "a permit only for a claim of the current ownership epoch"
RULE_PAUSED = "nothing selected or claimed while paused"
RULE_RUN_NOW_ONCE = "one occurrence per run_now request id"
RULE_CREATED_CODE = "a claim binds the code its occurrence was created with"
RULE_RETENTION_FLOOR = "the floor W stated to the worker is the committed state's"
RULE_PACED = "a paced owner sends no more than the worker takes"
RULE_OWNER_RAISED = "no exception inside an owner"
RULE_ONE_WORKER = "an invocation is consumed on at most one worker, ever"
RULE_NO_RETRY = (
    "Unknown is never retried (only an engine-confirmed failure starts the next attempt)"
)


class Violation(AssertionError):
    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"{rule}: {detail}")
        self.rule = rule
        self.detail = detail


def execution_id(occurrence: Any, attempt: int) -> str:
    return f"s{occurrence.schedule_id}-o{occurrence.id}-a{attempt}"


class Ledger:
    def __init__(self, sim: SystemSim, limits: Limits, *, strict_unknown: bool = False) -> None:
        self.sim = sim
        self.strict_unknown = strict_unknown
        self.reference = Machine(None, limits)
        self.committed: dict[int, bytes] = {}
        self.permits: dict[tuple[int, int, int], str] = {}  # (schedule, occurrence, attempt)
        self.launches: dict[str, str] = {}  # execution id -> incarnation
        self.events: Counter[str] = Counter()
        self.schedules_seen: dict[int, bytes] = {}
        self.created_digest: dict[int, str] = {}  # occurrence -> its code's digest at creation
        self.run_now_created: dict[str, list[int]] = {}  # request id -> occurrences it created
        self.run_now_epochs: dict[str, int] = {}  # request id -> the epoch of its first commit

    # -- the committed log --

    def on_commit(self, index: int, payload: bytes) -> None:
        known = self.committed.get(index)
        if known is not None:
            if known != payload:
                raise Violation("a committed entry never changes", f"index {index} differs")
            return
        self.committed[index] = payload
        state = self.reference.state
        before = dict(state.occurrences)
        paused_before = core.paused_since(state) is not None
        try:
            command = decode_command(payload)
        except CoreError:
            command = None
        result = self.reference.apply(index, payload)
        outcome = "ok" if isinstance(result, Accepted) else type(result.error).__name__
        self.events[f"{type(command).__name__}:{outcome}"] += 1
        if not isinstance(result, Accepted):
            return
        if isinstance(command, core.Admit) and isinstance(result.value, core.Granted):
            self._on_permit(command, result.value)
        state = self.reference.state  # the apply replaced the state
        created = [oid for oid in state.occurrences if oid not in before]
        for oid in created:
            # The code the occurrence is created with: its schedule's definition right now.
            record = state.occurrences[oid]
            schedule = state.schedules.get(record.schedule_id)
            if schedule is not None:
                self.created_digest[oid] = payload_sha256(schedule.definition.code)
        if isinstance(command, core.Admit):
            self._check_digest(command.binding.occurrence_id, command.binding.payload_sha256)
        if isinstance(command, core.RunNow):
            self._on_run_now(command, created)
        for oid, new in state.occurrences.items():
            old = before.get(oid)
            if old is not new:
                self._on_transition(old, new)
                if new.state.value == "Running" and (
                    old is None or old.state.value != "Running" or old.attempt != new.attempt
                ):
                    self._on_claim(new, paused=paused_before and not isinstance(command, Resume))
        if paused_before and created and not isinstance(command, Resume):
            raise Violation(
                RULE_PAUSED,
                f"{type(command).__name__} created occurrences {created[:4]} while paused",
            )
        for sid, schedule in state.schedules.items():
            self.schedules_seen.setdefault(sid, repr(schedule.definition).encode())

    def _on_run_now(self, command: core.RunNow, created: list[int]) -> None:
        if command.request_id is None:
            return
        epoch = _epoch(self.reference.state)
        first = self.run_now_epochs.setdefault(command.request_id, epoch)
        self.events["run_now"] += 1
        if first != epoch:
            self.events["run_now_repeat_after_takeover"] += 1
        made = self.run_now_created.get(command.request_id)
        if made is None:
            made = self.run_now_created[command.request_id] = []
        else:
            self.events["run_now_repeated"] += 1
        made.extend(created)
        if len(made) > 1:
            raise Violation(
                RULE_RUN_NOW_ONCE, f"request {command.request_id} created occurrences {made}"
            )

    def _on_claim(self, record: Any, *, paused: bool) -> None:
        if paused:
            raise Violation(RULE_PAUSED, f"occurrence {record.id} claimed while paused")
        admission = admission_of(self.reference.state.extra.get, record.id)
        if admission is not None and admission.claim is not None:
            self._check_digest(record.id, admission.claim.payload_sha256)
        self.events["claim_checked_digest"] += 1

    def _check_digest(self, occurrence_id: int, payload_sha256: str) -> None:
        expected = self.created_digest.get(occurrence_id)
        if expected is not None and payload_sha256 != expected:
            raise Violation(
                RULE_CREATED_CODE,
                f"occurrence {occurrence_id} bound to {payload_sha256[:12]}, "
                f"created with {expected[:12]}",
            )

    def paused(self) -> bool:
        return core.paused_since(self.reference.state) is not None

    def _on_permit(self, command: core.Admit, granted: core.Granted) -> None:
        inv = granted.invocation
        key = (inv.schedule_id, inv.occurrence_id, inv.attempt)
        if granted.existing:
            if self.permits.get(key) != granted.incarnation:
                raise Violation("same incarnation, same permit", f"{key}")
            return
        if key in self.permits:
            raise Violation("at most one permit per invocation", f"second permit for {key}")
        ownership = core.current_ownership(self.reference.state)
        if ownership is None or command.binding.epoch != ownership.epoch:
            raise Violation(
                RULE_STALE_EPOCH,
                f"{key}: claim of epoch {command.binding.epoch}, ownership {ownership}",
            )
        if command.at_s >= self.sim.expires_at_s:
            raise Violation(
                "no admission after the grant expires",
                f"{key} admitted at {command.at_s}, grant expires {self.sim.expires_at_s}",
            )
        self.permits[key] = granted.incarnation

    def _on_transition(self, old: Any, new: Any) -> None:
        if old is not None and new.attempt > old.attempt:
            # Without a committed permit the attempt was fenced: provably never launched (a
            # launch after that is caught in on_launch). With one, only a failure the engine
            # confirmed lets the next attempt start.
            eid = execution_id(old, old.attempt)
            # An Unknown that a later observation resolved as failed may be retried: what is
            # checked is the engine's word, not the path the record took.
            if (old.schedule_id, old.id, old.attempt) in self.permits:
                status = self.engine_status(eid)
                if eid not in self.launches or status not in CONFIRMED_FAILURES:
                    raise Violation(
                        RULE_NO_RETRY,
                        f"{eid} ({old.state.value}, permitted, engine says {status}) "
                        f"became attempt {new.attempt}",
                    )
            self.events["retry_after_failure" if eid in self.launches else "retry_after_fence"] += 1
        if new.state.value == "Cancelled" and (old is None or old.state.value != "Cancelled"):
            eid = execution_id(new, new.attempt)
            if eid in self.launches and self.engine_status(eid) != "cancelled":
                raise Violation(
                    "Cancelled only after an engine-confirmed stop",
                    f"{eid} is Cancelled, engine says {self.engine_status(eid)}",
                )
            self.events["cancelled_launched" if eid in self.launches else "cancelled_fenced"] += 1

    # -- retention --

    def on_retained_through(self, value: int) -> None:
        """A request stated the floor W to the worker: W must come from the committed state,
        so it is never above the reference replica's (which has applied every committed index
        any voter has) — every occurrence at or below it left the committed checkpoint."""
        self.events["retained_through_stated"] += 1
        reference = self.reference.state.retained_through()
        if value > reference:
            raise Violation(
                RULE_RETENTION_FLOOR,
                f"a request stated W={value}, the committed log's floor is {reference}",
            )

    # -- launches --

    def on_launch(self, eid: str, incarnation: str, disk: MemoryDisk, wall_s: float) -> None:
        self.events["launch"] += 1
        if eid in self.launches:
            raise Violation("at most one launch per invocation", f"{eid} launched again")
        key = _key_of(eid)
        if self.permits.get(key) != incarnation:
            raise Violation(
                "launch only with this incarnation's committed permit",
                f"{eid} by {incarnation}, permit {self.permits.get(key)}",
            )
        if not _consumed_durably(disk, key, incarnation):
            raise Violation("launch only after the consume is durable", f"{eid}")
        if wall_s >= self.sim.expires_at_s:
            raise Violation("no launch after the grant expires", f"{eid} at {wall_s}")
        record = self.reference.state.occurrences.get(key[1])
        if record is not None and (
            record.attempt > key[2] or record.state.value in ("Cancelled", "Succeeded", "Failed")
        ):
            raise Violation(
                "no launch of a superseded or settled attempt",
                f"{eid}: the log says attempt {record.attempt} {record.state.value}",
            )
        self.launches[eid] = incarnation

    def engine_status(self, eid: str) -> str | None:
        incarnation = self.launches.get(eid) or ""
        engine = next(
            (w.engines[incarnation] for w in self.sim.workers.values() if incarnation in w.engines),
            None,
        )
        if engine is None:
            return None
        status = engine.runs().get(eid)
        if status == "running" and engine.closed:
            return "lost"
        return status

    # -- the liveness phase and the end --

    def draining(self) -> list[str]:
        """The workers a committed drain_worker holds back from new placements (issue 33)."""
        return core.fleet_state(self.reference.state)["draining"]

    def schedule_disabled(self) -> bool:
        schedules = self.reference.state.schedules
        return bool(schedules) and not any(s.enabled for s in schedules.values())

    def end_states(self) -> frozenset[str]:
        """Once the grant expired nothing new is claimed (docs/recovery.md): Pending stays. So
        it does while attempts that only an operator releases (Unknown, Cancelling) hold every
        running place (``limits.running``): the burst profile's faults can leave that many."""
        state = self.reference.state
        if self.sim.wall_s() >= self.sim.expires_at_s:
            return END_STATES | {"Pending"}
        held = sum(1 for o in state.occurrences.values() if o.state.value in HELD_BY_OPERATOR)
        if held >= state.limits.running and held == state.counts().running:
            return END_STATES | {"Pending"}
        return END_STATES

    def all_settled(self) -> bool:
        ends = self.end_states()
        return all(o.state.value in ends for o in self.reference.state.occurrences.values())

    def cancellable(self) -> list[int]:
        return sorted(
            o.id
            for o in self.reference.state.occurrences.values()
            if o.state.value in ("Running", "Pending")
        )

    def describe_unsettled(self) -> str:
        left = [
            f"{o.id}:{o.state.value}/a{o.attempt}"
            for o in self.reference.state.occurrences.values()
            if o.state.value not in self.end_states()
        ]
        return f"disabled={self.schedule_disabled()} unsettled={left[:8]}"

    def final_checks(self, machines: list[Machine]) -> None:
        reference = self.reference.state.to_json()
        for machine in machines:
            if machine.state.to_json() != reference:
                raise Violation("replicas byte-identical", "a voter's state differs")
        for sid in self.schedules_seen:
            if sid not in self.reference.state.schedules:
                raise Violation("no committed schedule lost", f"schedule {sid} is gone")
        consumed: Counter[tuple[int, int, int]] = Counter()
        for worker in self.sim.workers.values():  # issue 33: across the fleet
            consumed.update(_consumed_keys(worker.disk))
        twice = sorted(key for key, n in consumed.items() if n > 1)
        if twice:
            raise Violation(RULE_ONE_WORKER, f"consumed on more than one worker: {twice[:4]}")
        ends = self.end_states()
        for record in self.reference.state.occurrences.values():
            if record.state.value not in ends:
                raise Violation(
                    "every occurrence settles",
                    f"{record.id} ends {record.state.value} attempt {record.attempt}",
                )
            key = (record.schedule_id, record.id, record.attempt)
            if self.strict_unknown and record.state.value == "Unknown" and key not in self.permits:
                raise Violation(
                    "no Unknown without a committed permit",
                    f"{execution_id(record, record.attempt)}",
                )

    # -- paced dispatch (issue 17) --

    def on_owner_turn(self, owner: Any, effects: list[Any]) -> None:
        """After every turn of an owner that sent attempts which waited for capacity: it has no
        more attempts in flight at the worker than the worker said it takes, or the worker's
        latest statement still had room for every exec not answered since. (Attempts it
        re-observes after a takeover were sent by an earlier owner and may exceed it.)"""
        sent = {
            e.fields.get("worker") for e in effects if getattr(e, "event", None) == "capacity_send"
        }
        # Each worker of the fleet is paced by what it said itself (issue 33).
        for worker in sorted(w for w in sent if w is not None) or ([None] if sent else []):
            self._check_paced(owner, worker)

    def _check_paced(self, owner: Any, worker: str | None) -> None:
        pacing = owner.pacing_for(worker)
        if pacing.mode == PACING_PROBE:
            if owner.execs_outstanding(worker) > 1:
                raise Violation(RULE_PACED, f"{owner.node_id}: more than one probe unanswered")
            return
        window = pacing.window()
        in_flight = owner.in_flight(worker)
        capacity = pacing.capacity
        stated = (
            None
            if capacity is None
            else capacity.free_slots + capacity.queue_room - owner.execs_outstanding(worker)
        )
        if window is not None and in_flight > window and (stated is None or stated < 0):
            raise Violation(
                RULE_PACED,
                f"{owner.node_id}: {in_flight} in flight at {worker}, it takes {window}, "
                f"{owner.waiting_for_capacity(worker)} waiting",
            )

    def on_decision(self, event: str, fields: Any) -> None:
        """Count the decisions that show pacing and the fleet at work (``reached``)."""
        if event in ("capacity_wait", "capacity_send", "dispatch_not_dispatched"):
            self.events[f"pacing:{event}"] += 1
        elif event in (
            "worker_unreachable",
            "worker_reachable",
            "unreachable_fenced",
            "placement_wait",
            "placement_found",
        ):
            self.events[f"fleet:{event}"] += 1
        elif event == "loop_error":  # only a lenient run gets here: a strict one fails at once
            self.events["loop_error"] += 1

    def summarize(self, result: SystemResult) -> None:
        occurrences = self.reference.state.occurrences.values()
        result.occurrences = len(self.reference.state.occurrences)
        result.states = dict(Counter(o.state.value for o in occurrences))
        result.permits = len(self.permits)
        result.launches = len(self.launches)
        result.log_entries = len(self.committed)
        result.retained_through = self.reference.state.retained_through()
        result.reached = dict(self.events)
        for record in occurrences:
            if record.state.value == "Unknown":
                if (record.schedule_id, record.id, record.attempt) in self.permits:
                    result.unknown_with_permit += 1
                else:
                    result.unknown_without_permit += 1


def _epoch(state: Any) -> int:
    ownership = core.current_ownership(state)
    return 0 if ownership is None else ownership.epoch


def _key_of(eid: str) -> tuple[int, int, int]:
    s, o, a = eid.split("-")
    return int(s[1:]), int(o[1:]), int(a[1:])


def _consumed_keys(disk: MemoryDisk) -> set[tuple[int, int, int]]:
    """Every invocation the worker's durable store consumed (its disk, however it crashed)."""
    return {
        tuple(stored_key[1:])  # type: ignore[misc]
        for stored_key, body in disk.synced["invocations"].items()
        if body.get("consumed")
    }


def _consumed_durably(disk: MemoryDisk, key: tuple[int, int, int], incarnation: str) -> bool:
    for stored_key, body in disk.synced["invocations"].items():
        if tuple(stored_key[1:]) == key:
            consumed = body.get("consumed")
            return bool(consumed) and consumed.get("incarnation_id") == incarnation
    return False
