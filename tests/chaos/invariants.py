"""The chaos suite's invariants, checked from the stores after the processes stopped (or froze).

Evidence, read-only (``appliance.store.readonly``: no byte of a store changes):

* each voter's checkpoint (applied index and parts, every part's checksum verified), decoded into
  the core's ``SchedulerState`` exactly as a restarting voter would;
* the worker's own records: one ``execution`` row per submission to the engine (the engine's
  execution records) and one ``invocation`` row per attempt with its consumed permit;
* the voters' decision logs (``claim`` lines), as a cross-check.

Invariants (issue 9 §6), each a :class:`Violation` kind:

``double_submission``   an invocation (namespace, schedule, occurrence, attempt) has more than one
                        engine execution, or a consumed permit naming another execution, or was
                        claimed twice in the decision logs;
``schedule_lost``       a schedule whose creation was committed (config or acknowledged
                        ``create``) is missing from a voter's checkpoint;
``not_settled``         after heal and quiescence an occurrence is neither terminal nor
                        ``Unknown`` / ``Cancelling`` — except a ``Pending`` one that provably
                        must wait: queued (overlap ``Queue``) behind an ``Unknown`` or
                        ``Cancelling`` occurrence of its schedule, which keeps its overlap
                        reservation until resolved (SPEC §3), or held back by the running limit
                        that those reservations fill;
``unknown_retried``     an attempt N+1 exists although attempt N was submitted and its outcome is
                        not a confirmed failure (engine execution not ``failed``/``timed_out``),
                        or a timeline goes from ``Unknown`` at N to attempt N+1 without a
                        confirmed ``Failed`` or a not-launched fence in between;
``checkpoints_differ``  the voters' checkpoints differ (applied index or any part) once healed;
``unclaimed_execution`` the engine ran an attempt the checkpoint never claimed (its occurrence is
                        unknown, or that attempt is later than the record's, or the record's
                        current attempt is still ``Pending``): a permit without a committed
                        claim.
``unknown_without_permit`` an occurrence is ``Unknown`` although the checkpoint holds no permit
                        for its attempt: it provably never launched, so the owner must have
                        fenced it (issue 23) instead of asking a human.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core import state as core
from appliance.core.definition import OverlapPolicy
from appliance.core.limits import Limits
from appliance.core.occurrence import TERMINAL, OccurrenceState
from appliance.runner.machine import state_from_parts
from appliance.store import schema
from appliance.store.checksum import matches
from appliance.store.readonly import open_readonly
from appliance.store.versions import RUNNER_FILE_NAME, WORKER_FILE_NAME

HOLDING = frozenset({OccurrenceState.UNKNOWN, OccurrenceState.CANCELLING})
SETTLED = frozenset(TERMINAL | HOLDING)
HOLDING_NAMES = frozenset(s.value for s in HOLDING)
SETTLED_NAMES = frozenset(s.value for s in SETTLED)
CONFIRMED_FAILURE = frozenset({"failed", "timed_out"})


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass(frozen=True)
class VoterCheckpoint:
    node_id: str
    applied_index: int
    parts: dict[str, bytes]
    state: core.SchedulerState


@dataclass(frozen=True)
class Execution:
    execution_id: str
    key: tuple[str, int, int, int]  # namespace, schedule, occurrence, attempt
    status: str


@dataclass(frozen=True)
class Evidence:
    voters: list[VoterCheckpoint]
    executions: list[Execution]
    consumed: dict[tuple[str, int, int, int], str]  # invocation -> consumed execution id
    claims: Counter[tuple[int, int]]  # (occurrence, attempt) -> "claim" log lines
    committed_schedules: frozenset[int]


def read_voter(node_id: str, data_dir: Path, limits: Limits) -> VoterCheckpoint:
    conn = open_readonly(data_dir / RUNNER_FILE_NAME)
    try:
        (applied, stored), *_ = conn.execute(
            "SELECT applied_index, checksum FROM checkpoint WHERE id = 1"
        ).fetchall()
        if not matches(stored, schema.TAG_CHECKPOINT, applied):
            raise ValueError(f"{node_id}: applied index fails its checksum")
        parts: dict[str, bytes] = {}
        for name, data, part_sum in conn.execute(
            "SELECT name, data, checksum FROM checkpoint_part"
        ):
            if not matches(part_sum, schema.TAG_PART, name, data):
                raise ValueError(f"{node_id}: checkpoint part {name!r} fails its checksum")
            parts[name] = bytes(data)
    finally:
        conn.close()
    return VoterCheckpoint(node_id, int(applied), parts, state_from_parts(limits, parts))


def read_worker(data_dir: Path) -> tuple[list[Execution], dict[tuple[str, int, int, int], str]]:
    conn = open_readonly(data_dir / WORKER_FILE_NAME)
    try:
        executions = [
            Execution(eid, (ns, s, o, a), status)
            for eid, ns, s, o, a, status in conn.execute(
                "SELECT execution_id, namespace, schedule_id, occurrence_id, attempt, status "
                "FROM execution"
            )
        ]
        consumed: dict[tuple[str, int, int, int], str] = {}
        for ns, s, o, a, record in conn.execute(
            "SELECT namespace, schedule_id, occurrence_id, attempt, record FROM invocation"
        ):
            body = json.loads(record)
            if body.get("consumed"):
                consumed[(ns, s, o, a)] = body["consumed"]["execution_id"]
    finally:
        conn.close()
    return executions, consumed


def claims_in_logs(events: Iterable[dict[str, Any]]) -> Counter[tuple[int, int]]:
    claims: Counter[tuple[int, int]] = Counter()
    for event in events:
        if event.get("event") == "claim":
            claims[(int(event["occurrence"]), int(event["attempt"]))] += 1
    return claims


def check(evidence: Evidence) -> list[Violation]:
    return [
        *_double_submission(evidence),
        *_schedules_kept(evidence),
        *_settled(evidence),
        *_unknown_not_retried(evidence),
        *_checkpoints_identical(evidence),
        *_executions_claimed(evidence),
        *_unknown_has_permit(evidence),
    ]


def unknown_by_permit(state: core.SchedulerState) -> tuple[int, int]:
    """(Unknown occurrences whose attempt holds a committed permit, those that hold none)."""
    with_permit = without = 0
    for record in state.occurrences.values():
        if record.state is not OccurrenceState.UNKNOWN:
            continue
        admission = core.admission_record(state, record.id)
        if admission is not None and admission.permit_for(record.attempt) is not None:
            with_permit += 1
        else:
            without += 1
    return with_permit, without


def _unknown_has_permit(ev: Evidence) -> list[Violation]:
    out = []
    for voter in ev.voters:
        for record in voter.state.occurrences.values():
            if record.state is not OccurrenceState.UNKNOWN:
                continue
            admission = core.admission_record(voter.state, record.id)
            if admission is None or admission.permit_for(record.attempt) is None:
                out.append(
                    Violation(
                        "unknown_without_permit",
                        f"{voter.node_id}: occurrence {record.id} attempt {record.attempt} is "
                        "Unknown with no committed permit (it should have been fenced)",
                    )
                )
    return out


def _executions_claimed(ev: Evidence) -> list[Violation]:
    if not ev.voters:
        return []
    state = ev.voters[0].state  # identical on every voter, or checkpoints_differ says so
    out = []
    for execution in ev.executions:
        _, _, occurrence_id, attempt = execution.key
        record = state.occurrences.get(occurrence_id)
        if (
            record is None
            or attempt > record.attempt
            or (attempt == record.attempt and record.state is OccurrenceState.PENDING)
        ):
            out.append(
                Violation(
                    "unclaimed_execution",
                    f"{execution.execution_id} ran occurrence {occurrence_id} attempt {attempt}; "
                    f"checkpoint: {record.state.value if record else 'no such occurrence'}"
                    f"{f' at attempt {record.attempt}' if record else ''}",
                )
            )
    return out


def _double_submission(ev: Evidence) -> list[Violation]:
    out = []
    per_invocation: dict[tuple[str, int, int, int], list[str]] = defaultdict(list)
    for execution in ev.executions:
        per_invocation[execution.key].append(execution.execution_id)
    for key, ids in sorted(per_invocation.items()):
        if len(ids) > 1:
            out.append(Violation("double_submission", f"invocation {key} has executions {ids}"))
        consumed = ev.consumed.get(key)
        if consumed is not None and consumed not in ids:
            out.append(
                Violation("double_submission", f"invocation {key} consumed {consumed}, ran {ids}")
            )
    for key, execution_id in sorted(ev.consumed.items()):
        if key not in per_invocation:
            # Consumed and never recorded as submitted: a lost submission, not a double one;
            # the engine record is written in the consume transaction, so this cannot happen.
            out.append(Violation("double_submission", f"{key} consumed {execution_id}, no record"))
    for (occurrence, attempt), count in sorted(ev.claims.items()):
        if count > 1:
            out.append(
                Violation(
                    "double_submission",
                    f"occurrence {occurrence} attempt {attempt} claimed {count} times",
                )
            )
    return out


def _schedules_kept(ev: Evidence) -> list[Violation]:
    out = []
    for voter in ev.voters:
        missing = sorted(ev.committed_schedules - set(voter.state.schedules))
        if missing:
            out.append(Violation("schedule_lost", f"{voter.node_id} lacks schedules {missing}"))
    return out


def must_wait(
    record: tuple[int, str], records: Iterable[tuple[int, str]], queued: bool, running_max: int
) -> bool:
    """A ``Pending`` record (schedule id, state name) that cannot start until an operator resolves
    a reservation: ``queued`` says its schedule's overlap policy is ``Queue``."""
    if record[1] != OccurrenceState.PENDING.value:
        return False
    holding = [r for r in records if r[1] in HOLDING_NAMES]
    if len(holding) >= running_max:
        return True
    return queued and any(r[0] == record[0] for r in holding)


def _blocked(state: core.SchedulerState, record: Any) -> bool:
    schedule = state.schedules.get(record.schedule_id)
    queued = schedule is not None and schedule.definition.policy.overlap is OverlapPolicy.QUEUE
    records = [(o.schedule_id, o.state.value) for o in state.occurrences.values()]
    return must_wait(
        (record.schedule_id, record.state.value), records, queued, state.limits.running
    )


def _settled(ev: Evidence) -> list[Violation]:
    out = []
    for voter in ev.voters:
        for record in voter.state.occurrences.values():
            if record.state not in SETTLED and not _blocked(voter.state, record):
                out.append(
                    Violation(
                        "not_settled",
                        f"{voter.node_id}: occurrence {record.id} (schedule "
                        f"{record.schedule_id}) is {record.state.value} at attempt "
                        f"{record.attempt}",
                    )
                )
    return out


def _unknown_not_retried(ev: Evidence) -> list[Violation]:
    out = []
    status_of = {(e.key[2], e.key[3]): e.status for e in ev.executions}
    for voter in ev.voters:
        for record in voter.state.occurrences.values():
            for attempt in range(1, record.attempt):
                status = status_of.get((record.id, attempt))
                if status is not None and status not in CONFIRMED_FAILURE:
                    out.append(
                        Violation(
                            "unknown_retried",
                            f"{voter.node_id}: occurrence {record.id} reached attempt "
                            f"{record.attempt} although attempt {attempt} ran and ended "
                            f"{status!r} (not a confirmed failure)",
                        )
                    )
            out.extend(_timeline_violations(voter.node_id, record))
    return out


def _timeline_violations(node_id: str, record: Any) -> list[Violation]:
    unknown_attempt: int | None = None
    for entry in record.timeline:
        if entry.state is OccurrenceState.UNKNOWN:
            unknown_attempt = entry.attempt
            continue
        if unknown_attempt is None:
            continue
        if entry.attempt == unknown_attempt and entry.state is OccurrenceState.FAILED:
            unknown_attempt = None  # the engine's confirmed failure resolved it
        elif entry.reason == "fenced_not_launched":
            unknown_attempt = None  # proven never launched
        elif entry.attempt > unknown_attempt:
            return [
                Violation(
                    "unknown_retried",
                    f"{node_id}: occurrence {record.id} went from Unknown at attempt "
                    f"{unknown_attempt} to attempt {entry.attempt} ({entry.reason})",
                )
            ]
    return []


def _checkpoints_identical(ev: Evidence) -> list[Violation]:
    if len(ev.voters) < 2:
        return []
    first, *rest = ev.voters
    out = []
    for other in rest:
        if other.applied_index != first.applied_index:
            out.append(
                Violation(
                    "checkpoints_differ",
                    f"applied index {first.node_id}={first.applied_index}, "
                    f"{other.node_id}={other.applied_index}",
                )
            )
            continue
        differing = sorted(
            name
            for name in set(first.parts) | set(other.parts)
            if first.parts.get(name) != other.parts.get(name)
        )
        if differing:
            out.append(
                Violation(
                    "checkpoints_differ",
                    f"{first.node_id} and {other.node_id} at index {first.applied_index} "
                    f"differ in parts {differing[:10]}",
                )
            )
    return out
