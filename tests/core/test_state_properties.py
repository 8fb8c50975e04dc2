"""State properties over random command sequences (accepted and rejected alike).

* a rejected command changes nothing;
* the part-wise size equals the length of the full serialization, and every part's cached bytes
  equal its canonical JSON inside the full document;
* ``from_json(to_json(state))`` re-encodes to the same bytes, with the same counts and budget;
* the limits hold after every command; the budget never falls below the size.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from appliance.core.calendar import compile_schedule
from appliance.core.canonical import canonical_json
from appliance.core.errors import CoreError
from appliance.core.limits import CHECKPOINT_BYTES_MAX, Limits
from appliance.core.occurrence import OUTCOME_EVENTS
from appliance.core.selection import plan_observation
from appliance.core.state import (
    PROGRESS_BYTES_MAX,
    AcknowledgeStopped,
    Cancel,
    Claim,
    ConfirmCancelled,
    CreateSchedule,
    DeleteSchedule,
    DisableSchedule,
    DropEvent,
    DropReason,
    FenceNotLaunched,
    Progress,
    RecordOutcome,
    RetryDue,
    SchedulerState,
    _progress_json,
    apply,
    command_from_json,
    command_to_json,
    encode_progress,
    from_json,
)
from tests.core.test_state import T0, definition

LIMITS = Limits(schedules=3, records=6, outstanding=4, running=2, grace_seconds=5)
POLICIES = [
    ("Skip", "Skip"),
    ("RunOnce", "Queue"),
    ({"CatchUp": {"cap": 3}}, "Concurrent"),
    ({"CatchUp": {"cap": 2}}, "Queue"),
]
OUTCOMES = sorted(e.value for e in OUTCOME_EVENTS)
EVERY_MINUTE = compile_schedule("* * * * *", "UTC")

action = st.tuples(
    st.sampled_from(
        [
            "create",
            "observe",
            "observe",
            "claim",
            "claim",
            "outcome",
            "outcome",
            "cancel",
            "confirm",
            "retry_due",
            "fence",
            "ack",
            "disable",
            "delete",
        ]
    ),
    st.integers(0, 10),
    st.integers(0, 400),
)


def build(state: SchedulerState, kind: str, pick: int, value: int, clock_s: int):
    ids = sorted(state.occurrences) or [1]
    oid = ids[pick % len(ids)]
    record = state.occurrences.get(oid)
    attempt = record.attempt if record is not None and value % 7 else 1 + value % 3
    if kind == "create":
        missed, overlap = POLICIES[pick % len(POLICIES)]
        return CreateSchedule(
            definition(missed, overlap, pick % 3, value % 50, limits=LIMITS), clock_s
        )
    if kind == "observe":
        compiled = dict.fromkeys(state.schedules, EVERY_MINUTE)
        return plan_observation(state, compiled, clock_s, LIMITS)
    if kind == "claim":
        return Claim(oid, attempt, clock_s)
    if kind == "outcome":
        return RecordOutcome(oid, attempt, OUTCOMES[value % len(OUTCOMES)], clock_s, "why")
    if kind == "cancel":
        return Cancel(oid, clock_s)
    if kind == "confirm":
        return ConfirmCancelled(oid, attempt, clock_s)
    if kind == "retry_due":
        return RetryDue(clock_s)
    if kind == "fence":
        return FenceNotLaunched(oid, attempt, clock_s)
    if kind == "ack":
        return AcknowledgeStopped(oid, pick % 2 == 0, clock_s)
    if kind == "disable":
        return DisableSchedule(1 + pick % 4, clock_s)
    return DeleteSchedule(1 + pick % 4, clock_s)


def check_invariants(state: SchedulerState) -> None:
    data = state.to_json()
    assert state.size_bytes == len(data)
    document = json.loads(data)
    assert canonical_json(document) == data
    assert sorted(document) == state.part_names()
    for name, value in document.items():
        assert state.part_bytes(name) == canonical_json(value)
    assert state.size_bytes <= state.budget_bytes <= CHECKPOINT_BYTES_MAX
    counts = state.counts()
    assert counts.records <= LIMITS.records
    assert counts.outstanding <= LIMITS.outstanding
    assert counts.running <= LIMITS.running
    assert all(oid < state.next_occurrence_id for oid in state.occurrences)
    assert all(sid < state.next_schedule_id for sid in state.schedules)
    again = from_json(data)
    assert again.to_json() == data
    assert again.counts() == counts
    assert again.budget_bytes == state.budget_bytes
    assert again.size_bytes == state.size_bytes
    for sid in state.schedules:
        assert again.schedule_counts(sid) == state.schedule_counts(sid)
        assert again.pending_ids(sid) == state.pending_ids(sid)
    assert again.retry_waiting_ids() == state.retry_waiting_ids()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, min_size=15, max_size=60))
def test_random_command_sequences_keep_every_invariant(actions):
    state = SchedulerState(LIMITS)
    apply(state, CreateSchedule(definition(limits=LIMITS), T0 - 1))
    apply(state, CreateSchedule(definition(*POLICIES[2], max_retries=2, limits=LIMITS), T0 - 1))
    # A second replica receives every command over the wire and must stay byte-identical.
    replica = from_json(state.to_json())
    clock_s = T0
    for kind, pick, value in actions:
        if kind == "observe":
            # Land on the next minute's slot, within or just past the grace window.
            clock_s = (clock_s // 60 + 1 + value % 3) * 60 + value % 8
        else:
            clock_s += value % 30
        command = build(state, kind, pick, value, clock_s)
        before = state.to_json()
        parts_before = {n: state.part_bytes(n) for n in state.part_names()}
        wire = json.loads(json.dumps(command_to_json(command)))
        try:
            applied = apply(state, command)
        except CoreError as refused:
            assert state.to_json() == before
            with pytest.raises(type(refused)):
                apply(replica, command_from_json(wire))
            assert replica.to_json() == before
            continue
        replica_applied = apply(replica, command_from_json(wire))
        assert replica.to_json() == state.to_json()
        assert (replica_applied.touched, replica_applied.deleted) == (
            applied.touched,
            applied.deleted,
        )
        # Exactly the touched and deleted parts changed; everything else is byte-identical.
        for name, data in parts_before.items():
            if name in applied.deleted:
                assert name not in state.part_names()
            elif name not in applied.touched:
                assert state.part_bytes(name) == data
        for name in applied.touched:
            assert name in state.part_names()
        assert applied.size_bytes == state.size_bytes
        if any(name.startswith("occurrence/") for name in applied.deleted):
            event("a record retired")
        check_invariants(state)
    for name, count in state.counts().by_state.items():
        if count:
            event(f"ended with a {name} record")


@settings(max_examples=100, deadline=None)
@given(
    cursor_s=st.integers(0, 253_402_300_799),
    dropped=st.tuples(*(st.integers(0, 2**53 - 1),) * 3),
    recent=st.lists(
        st.tuples(st.integers(0, 253_402_300_799), st.sampled_from(list(DropReason))),
        max_size=8,
    ),
)
def test_the_progress_encoder_is_byte_identical_to_canonical_json(cursor_s, dropped, recent):
    progress = Progress(cursor_s, dropped, tuple(DropEvent(at, r, at % 97) for at, r in recent))
    encoded = encode_progress(progress)
    assert encoded == canonical_json(_progress_json(progress))
    assert len(encoded) <= PROGRESS_BYTES_MAX
