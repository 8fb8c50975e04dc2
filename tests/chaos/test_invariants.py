"""The chaos checker itself: each invariant fires on the evidence that breaks it, and only then.

A checker that can never fail proves nothing, so every rule is shown both ways on hand-built
evidence (no processes: these run in milliseconds).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from appliance.core import state as core
from appliance.core.definition import parse_definition
from appliance.core.limits import Limits
from appliance.core.occurrence import Occurrence, TimelineEntry
from appliance.core.occurrence import OccurrenceState as S
from appliance.core.runner_parts import AdmissionRecord, Permit, admission_part, admission_to_json
from appliance.core.state_parts import Schedule
from tests.chaos.invariants import (
    Evidence,
    Execution,
    VoterCheckpoint,
    check,
    claims_in_logs,
    unknown_by_permit,
)
from tests.chaos.workload import WORKLOAD

NS = "ns-chaos"


def _state(
    *records: Occurrence, overlap: str = "Skip", running: int = 16, permits: bool = True
) -> Any:
    """A checkpoint with ``records``; each Unknown one holds a committed permit unless
    ``permits`` is false."""
    limits = Limits(running=running)
    state = core.SchedulerState(limits)
    body = {**WORKLOAD[0], "policy": {**WORKLOAD[0]["policy"], "overlap": overlap}}
    state.schedules[1] = Schedule(1, parse_definition(body, limits), True, 0)
    for record in records:
        state.occurrences[record.id] = record
        if permits and record.state is S.UNKNOWN:
            permit = Permit(record.attempt, "inc-1", 1, 0)
            state.extra[admission_part(record.id)] = admission_to_json(
                AdmissionRecord(permit=permit)
            )
    return state


def _record(oid: int, state: S, attempt: int = 1, *timeline: tuple[S, int, str]) -> Occurrence:
    entries = tuple(TimelineEntry(s, 0, a, reason) for s, a, reason in timeline)
    return Occurrence(oid, 1, 60 * oid, state, attempt, timeline=entries)


def _evidence(
    *states: Any,
    executions: tuple[Execution, ...] = (),
    consumed: dict[tuple[str, int, int, int], str] | None = None,
    claims: Counter[tuple[int, int]] | None = None,
    committed: frozenset[int] = frozenset({1}),
    applied: tuple[int, ...] = (),
) -> Evidence:
    voters = [
        VoterCheckpoint(f"v{i + 1}", applied[i] if applied else 7, {"meta": b"{}"}, st)
        for i, st in enumerate(states)
    ]
    return Evidence(voters, list(executions), consumed or {}, claims or Counter(), committed)


def _kinds(evidence: Evidence) -> list[str]:
    return sorted(v.invariant for v in check(evidence))


def _execution(oid: int, attempt: int, status: str, eid: str | None = None) -> Execution:
    return Execution(eid or f"s1-o{oid}-a{attempt}", (NS, 1, oid, attempt), status)


def test_clean_evidence_has_no_violation() -> None:
    done = _record(1, S.SUCCEEDED, 1, (S.RUNNING, 1, "claim"), (S.SUCCEEDED, 1, "completed"))
    unknown = _record(2, S.UNKNOWN, 1, (S.RUNNING, 1, "claim"), (S.UNKNOWN, 1, "lost"))
    state = _state(done, unknown)
    evidence = _evidence(
        state, state, state,
        executions=(_execution(1, 1, "completed"), _execution(2, 1, "lost")),
        consumed={(NS, 1, 1, 1): "s1-o1-a1", (NS, 1, 2, 1): "s1-o2-a1"},
        claims=Counter({(1, 1): 1, (2, 1): 1}),
    )  # fmt: skip
    assert check(evidence) == []


def test_two_engine_executions_of_one_attempt_are_a_double_submission() -> None:
    state = _state(_record(1, S.SUCCEEDED))
    twice = (_execution(1, 1, "completed", "a"), _execution(1, 1, "completed", "b"))
    assert _kinds(_evidence(state, executions=twice)) == ["double_submission"]


def test_an_attempt_claimed_twice_in_the_logs_is_a_double_submission() -> None:
    state = _state(_record(1, S.SUCCEEDED))
    assert _kinds(_evidence(state, claims=Counter({(1, 1): 2}))) == ["double_submission"]
    assert _kinds(_evidence(state, claims=Counter({(1, 1): 1}))) == []


def test_a_committed_schedule_missing_from_a_voter_is_lost() -> None:
    state = _state()
    assert _kinds(_evidence(state, committed=frozenset({1}))) == []
    assert _kinds(_evidence(state, committed=frozenset({1, 2}))) == ["schedule_lost"]


def test_running_or_ready_pending_after_quiescence_is_not_settled() -> None:
    for live in (S.RUNNING, S.PENDING):
        assert _kinds(_evidence(_state(_record(1, live)))) == ["not_settled"]
    for settled in (S.UNKNOWN, S.CANCELLING, S.CANCELLED, S.FAILED, S.ABANDONED):
        assert _kinds(_evidence(_state(_record(1, settled)))) == []


def test_pending_queued_behind_an_unknown_of_its_schedule_may_wait() -> None:
    blocked = (_record(1, S.UNKNOWN), _record(2, S.PENDING))
    assert _kinds(_evidence(_state(*blocked, overlap="Queue"))) == []
    # Concurrent does not wait for the Unknown: the Pending one should have run.
    assert _kinds(_evidence(_state(*blocked, overlap="Concurrent"))) == ["not_settled"]


def test_pending_may_wait_exactly_when_reservations_fill_the_running_limit() -> None:
    full = (_record(1, S.UNKNOWN), _record(2, S.CANCELLING), _record(3, S.PENDING))
    assert _kinds(_evidence(_state(*full, overlap="Concurrent", running=2))) == []
    assert _kinds(_evidence(_state(*full, overlap="Concurrent", running=3))) == ["not_settled"]


def test_a_new_attempt_after_a_lost_execution_is_an_unknown_retried() -> None:
    retried = _state(_record(1, S.SUCCEEDED, 2))
    lost = (_execution(1, 1, "lost"), _execution(1, 2, "completed"))
    assert _kinds(_evidence(retried, executions=lost)) == ["unknown_retried"]
    failed = (_execution(1, 1, "failed"), _execution(1, 2, "completed"))
    assert _kinds(_evidence(retried, executions=failed)) == []
    # Attempt 1 never reached the engine (fenced, not launched): attempt 2 is no retry of it.
    assert _kinds(_evidence(retried, executions=(_execution(1, 2, "completed"),))) == []


def test_a_timeline_from_unknown_to_the_next_attempt_needs_a_failure_or_a_fence() -> None:
    def record(*middle: tuple[S, int, str]) -> Occurrence:
        steps = ((S.UNKNOWN, 1, "unreachable"), *middle, (S.RUNNING, 2, "claim"))
        return _record(1, S.RUNNING, 2, *steps)

    def kinds(rec: Occurrence) -> list[str]:
        return [k for k in _kinds(_evidence(_state(rec))) if k != "not_settled"]

    assert kinds(record()) == ["unknown_retried"]
    assert kinds(record((S.PENDING, 2, "fenced_not_launched"))) == []
    assert kinds(record((S.FAILED, 1, "failed"), (S.PENDING, 2, "retry"))) == []


def test_checkpoints_must_match_at_one_applied_index() -> None:
    a = _state(_record(1, S.SUCCEEDED))
    assert _kinds(_evidence(a, a, applied=(7, 8))) == ["checkpoints_differ"]
    same = _evidence(a, a)
    assert check(same) == []
    other = VoterCheckpoint("v2", 7, {"meta": b"{ }"}, a)
    assert _kinds(Evidence([same.voters[0], other], [], {}, Counter(), frozenset({1}))) == [
        "checkpoints_differ"
    ]


def test_claims_are_counted_from_claim_lines_only() -> None:
    events = [
        {"event": "claim", "occurrence": 3, "attempt": 1},
        {"event": "claim_uncertain", "occurrence": 3, "attempt": 1},
        {"event": "claim", "occurrence": 3, "attempt": 2},
    ]
    assert claims_in_logs(events) == Counter({(3, 1): 1, (3, 2): 1})


def test_an_execution_of_an_attempt_the_checkpoint_never_claimed_is_flagged() -> None:
    def kinds(*executions: Execution) -> list[str]:
        claimed = _state(_record(1, S.SUCCEEDED, 2), _record(2, S.PENDING, 1))
        found = _kinds(_evidence(claimed, executions=executions))
        return [k for k in found if k != "not_settled"]  # record 2 is Pending on purpose

    assert kinds(_execution(1, 2, "completed")) == []
    assert kinds(_execution(1, 3, "completed")) == ["unclaimed_execution"]
    assert kinds(_execution(2, 1, "completed")) == ["unclaimed_execution"]
    assert kinds(_execution(9, 1, "completed")) == ["unclaimed_execution"]


def test_an_unknown_without_a_committed_permit_is_a_violation_and_counted_apart() -> None:
    records = (_record(1, S.UNKNOWN), _record(2, S.UNKNOWN, 2), _record(3, S.SUCCEEDED))
    with_permits = _state(*records)
    assert _kinds(_evidence(with_permits)) == []
    assert unknown_by_permit(with_permits) == (2, 0)
    without = _state(*records, permits=False)
    assert _kinds(_evidence(without)) == ["unknown_without_permit"] * 2
    assert unknown_by_permit(without) == (0, 2)
    # A permit for another (earlier) attempt is no permit for the Unknown one.
    stale = _state(_record(1, S.UNKNOWN, 2), permits=False)
    stale.extra[admission_part(1)] = admission_to_json(
        AdmissionRecord(permit=Permit(1, "inc-1", 1, 0))
    )
    assert _kinds(_evidence(stale)) == ["unknown_without_permit"]
