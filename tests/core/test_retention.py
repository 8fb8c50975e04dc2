"""Retention and the checkpoint cap (SPEC §3 "Limits", "Accounting")."""

from __future__ import annotations

import heapq

import pytest

from appliance.core.definition import parse_definition
from appliance.core.limits import CHECKPOINT_BYTES_MAX, Limits
from appliance.core.occurrence import RECORD_BYTES_MAX, OccurrenceState
from appliance.core.retention import OldestTerminalFirst, drop_retired
from appliance.core.state import (
    GROWTH_BYTES_MAX,
    HEADROOM_BYTES,
    AcknowledgeStopped,
    Cancel,
    CheckpointFull,
    Claim,
    CreateSchedule,
    DropReason,
    Observe,
    ObservedSchedule,
    RecordOutcome,
    SchedulerState,
    apply,
)
from tests.core.test_state import (
    MINUTE,
    T0,
    definition,
    new_state,
    observe,
    observe_command,
    rejected,
)

S = OccurrenceState


def concurrent_state(limits):
    cap = min(3, limits.outstanding)
    return new_state(limits, overlap="Concurrent", missed={"CatchUp": {"cap": cap}})


def complete(state, occurrence_id, at_s):
    apply(state, Claim(occurrence_id, 1, at_s))
    apply(state, RecordOutcome(occurrence_id, 1, "completed", at_s))


def test_records_beyond_the_limit_retire_the_oldest_terminal_record_first():
    state = concurrent_state(Limits(records=3, outstanding=3, running=3))
    observe(state, T0, T0 + 1, T0 + 2)
    complete(state, 2, T0 + 10)
    complete(state, 1, T0 + 11)  # terminal later, but older
    report = apply(state, observe_cmd(state, T0 + MINUTE)).value
    assert report.retired == (1,)
    assert sorted(state.occurrences) == [2, 3, 4]
    report = apply(state, observe_cmd(state, T0 + 2 * MINUTE)).value
    assert report.retired == (2,)
    assert sorted(state.occurrences) == [3, 4, 5]


def test_non_terminal_records_never_retire_and_the_slot_drops_as_capacity():
    state = concurrent_state(Limits(records=3, outstanding=3, running=3))
    observe(state, T0, T0 + 1, T0 + 2)
    report = apply(state, observe_cmd(state, T0 + MINUTE)).value
    assert report.retired == ()
    assert report.dropped == ((1, DropReason.CAPACITY, 1),)
    assert sorted(state.occurrences) == [1, 2, 3]


def test_ids_keep_increasing_after_retirement():
    state = concurrent_state(Limits(records=1, outstanding=1, running=1))
    for k in range(5):
        observe(state, T0 + k * MINUTE)
        complete(state, k + 1, T0 + k * MINUTE + 1)
    assert sorted(state.occurrences) == [5]
    assert state.next_occurrence_id == 6


def observe_cmd(state, *slots_s):
    return observe_command(state, *slots_s)


def test_oldest_terminal_first_skips_ids_changed_in_the_same_apply():
    heap = [3, 9, 5, 12]
    heapq.heapify(heap)
    chooser = OldestTerminalFirst(heap)
    assert chooser.next(skip={3}) == 5
    assert chooser.next(skip=set()) == 9
    assert sorted(heap) == [3, 5, 9, 12]  # the committed heap is untouched
    drop_retired(heap, {3, 9})
    assert sorted(heap) == [5, 12]


# -- the 4 MiB cap, enforced at apply time with headroom --

BIG_CODE = "x" * 64_000


def big_definition(limits):
    return parse_definition(
        {
            "code": BIG_CODE,
            "cron": "* * * * *",
            "timezone": "UTC",
            "policy": {
                "missed": {"CatchUp": {"cap": 3}},
                "overlap": "Concurrent",
                "retry": {"max_retries": 0, "delay_seconds": 0},
            },
        },
        limits,
    )


def fill_with_schedules(state):
    created = 0
    while True:
        try:
            apply(state, CreateSchedule(big_definition(state.limits), T0 - 1))
        except CheckpointFull:
            return created
        created += 1


def test_creation_stops_short_of_the_cap_and_the_refusal_changes_nothing():
    limits = Limits(schedules=1024, records=4096, outstanding=128, running=16)
    state = SchedulerState(limits)
    created = fill_with_schedules(state)
    assert 55 <= created <= 66
    assert state.budget_bytes <= GROWTH_BYTES_MAX
    assert state.budget_bytes + 64_000 > GROWTH_BYTES_MAX
    rejected(state, CreateSchedule(big_definition(limits), T0), CheckpointFull)
    assert state.size_bytes == len(state.to_json()) < CHECKPOINT_BYTES_MAX - HEADROOM_BYTES


def test_observation_near_the_cap_drops_as_capacity_and_completions_still_fit():
    limits = Limits(schedules=1024, records=4096, outstanding=128, running=128)
    state = SchedulerState(limits)
    fill_with_schedules(state)
    # Observe every schedule: records are created while each still has a full reservation.
    report = apply(state, observe_all(state, T0, T0 + 1, T0 + 2)).value
    assert report.created
    assert any(reason is DropReason.CAPACITY for _, reason, _ in report.dropped)
    assert state.budget_bytes <= GROWTH_BYTES_MAX
    # Every outstanding record now runs and ends with the largest outcome: all of it fits.
    long_reason = "\x00" * 10_000
    for oid in sorted(state.occurrences):
        apply(state, Claim(oid, 1, T0 + 10))
    for index, oid in enumerate(sorted(state.occurrences)):
        if index % 3 == 0:
            apply(state, RecordOutcome(oid, 1, "failed", T0 + 11, long_reason, "e" * 500))
        elif index % 3 == 1:
            apply(state, RecordOutcome(oid, 1, "lost", T0 + 11, None, "e" * 500))
            apply(state, AcknowledgeStopped(oid, True, T0 + 12))
        else:
            apply(state, Cancel(oid, T0 + 11))
            apply(state, RecordOutcome(oid, 1, "cancelled", T0 + 12))
    assert state.size_bytes <= CHECKPOINT_BYTES_MAX - HEADROOM_BYTES
    assert all(o.terminal for o in state.occurrences.values())


def observe_all(state, *slots_s):
    at_s = max(slots_s) + 1
    return Observe(
        at_s,
        tuple(
            ObservedSchedule(sid, state.progress[sid].cursor_s, at_s, slots_s, 0)
            for sid in sorted(state.schedules)
        ),
    )


def test_terminal_history_retires_to_make_room_before_anything_is_refused():
    limits = Limits(schedules=1024, records=65536, outstanding=4096, running=16)
    state = SchedulerState(limits)
    apply(state, CreateSchedule(definition("RunOnce", "Concurrent", limits=limits), T0 - 1))
    # Thousands of small terminal records, then big schedules until the budget is tight.
    slot_s = T0
    for _ in range(1500):
        observe(state, slot_s)
        oid = state.next_occurrence_id - 1
        complete(state, oid, slot_s)
        slot_s += MINUTE
    records_before = len(state.occurrences)
    created = fill_with_schedules(state)
    assert created > 0
    assert len(state.occurrences) < records_before  # history made room
    assert min(state.occurrences) > 1  # oldest first
    assert state.budget_bytes <= GROWTH_BYTES_MAX


def test_record_bytes_max_is_a_real_bound():
    assert 1_000 < RECORD_BYTES_MAX < 4_000


@pytest.mark.parametrize("outstanding", [1, 2])
def test_outstanding_exactly_at_the_limit_passes(outstanding):
    limits = Limits(records=4, outstanding=outstanding, running=1)
    state = concurrent_state(limits)
    slots = [T0 + k for k in range(outstanding)]
    report = apply(state, observe_cmd(state, *slots)).value
    assert len(report.created) == outstanding
    assert state.counts().outstanding == outstanding
