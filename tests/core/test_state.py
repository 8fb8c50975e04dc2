"""The scheduler state aggregate: commands, preconditions, overlap, limits (SPEC §2, §3)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from appliance.core.calendar import compile_schedule
from appliance.core.definition import parse_definition
from appliance.core.errors import CoreError, IllegalTransition
from appliance.core.limits import Limits
from appliance.core.occurrence import AttestationRequired, OccurrenceState
from appliance.core.selection import plan_observation
from appliance.core.state import (
    AcknowledgeStopped,
    AttemptMismatch,
    Cancel,
    Claim,
    ClaimRefused,
    ConfirmCancelled,
    CreateSchedule,
    DeleteSchedule,
    DisableSchedule,
    DropReason,
    FenceNotLaunched,
    InvalidCommand,
    Observe,
    ObservedSchedule,
    RecordOutcome,
    RetryDue,
    RetryNotDue,
    ScheduleLimitReached,
    SchedulerState,
    UnknownOccurrence,
    UnknownSchedule,
    apply,
    command_from_json,
    command_to_json,
    from_json,
    list_view,
)

S = OccurrenceState
T0 = 1_800_000_000 - 1_800_000_000 % 3600  # a whole hour
MINUTE = 60


def definition(missed="Skip", overlap="Skip", max_retries=0, delay_seconds=0, limits=None):
    return parse_definition(
        {
            "name": "job",
            "code": "console.log('scheduled')",
            "cron": "* * * * *",
            "timezone": "UTC",
            "policy": {
                "missed": missed,
                "overlap": overlap,
                "retry": {"max_retries": max_retries, "delay_seconds": delay_seconds},
            },
        },
        limits or Limits(),
    )


def new_state(limits=None, **policy) -> SchedulerState:
    state = SchedulerState(limits or Limits())
    apply(state, CreateSchedule(definition(limits=limits, **policy), T0 - 1))
    return state


def observe(state, *slots_s, schedule_id=1, missed=0, at_s=None) -> Observe:
    cursor = state.progress[schedule_id].cursor_s
    at_s = at_s if at_s is not None else max(slots_s, default=cursor) + 1
    command = Observe(at_s, (ObservedSchedule(schedule_id, cursor, at_s, tuple(slots_s), missed),))
    apply(state, command)
    return command


def rejected(state, command, error=CoreError):
    """Apply a command that must be refused, and prove it changed nothing."""
    before = state.to_json()
    size_before, budget_before, counts_before = state.size_bytes, state.budget_bytes, state.counts()
    with pytest.raises(error) as caught:
        apply(state, command)
    assert state.to_json() == before
    assert (state.size_bytes, state.budget_bytes, state.counts()) == (
        size_before,
        budget_before,
        counts_before,
    )
    return caught.value


def occ(state, occurrence_id=1):
    return state.occurrences[occurrence_id]


def running(state, occurrence_id=1, at_s=T0 + 1):
    apply(state, Claim(occurrence_id, occ(state, occurrence_id).attempt, at_s))
    return occ(state, occurrence_id)


# -- schedules --


def test_schedule_ids_increase_from_one_and_are_never_reused_after_delete():
    state = new_state()
    assert apply(state, CreateSchedule(definition(), T0)).value == 2
    apply(state, DeleteSchedule(2, T0))
    assert apply(state, CreateSchedule(definition(), T0)).value == 3


def test_schedules_limit_at_max_passes_and_one_more_is_refused():
    limits = Limits(schedules=3)
    state = SchedulerState(limits)
    for _ in range(3):
        apply(state, CreateSchedule(definition(), T0))
    rejected(state, CreateSchedule(definition(), T0), ScheduleLimitReached)
    apply(state, DeleteSchedule(1, T0))
    assert apply(state, CreateSchedule(definition(), T0)).value == 4


def test_creation_cursor_is_the_creation_instant():
    state = new_state()
    assert state.progress[1].cursor_s == T0 - 1


def test_disable_stops_selection_but_pending_work_stays_claimable():
    state = new_state()
    observe(state, T0)
    apply(state, DisableSchedule(1, T0 + 1))
    compiled = {1: compile_schedule("* * * * *", "UTC")}
    assert plan_observation(state, compiled, T0 + 5 * MINUTE, state.limits).entries == ()
    report = apply(state, observe_command(state, T0 + MINUTE)).value
    assert report.ignored == ((1, "disabled"),)
    assert running(state).state is S.RUNNING


def observe_command(state, *slots_s, schedule_id=1):
    cursor = state.progress[schedule_id].cursor_s
    at_s = max(slots_s) + 1
    return Observe(at_s, (ObservedSchedule(schedule_id, cursor, at_s, tuple(slots_s), 0),))


def test_delete_removes_the_definition_cancels_never_admitted_work_and_lets_running_finish():
    state = new_state(overlap="Concurrent", missed={"CatchUp": {"cap": 3}})
    observe(state, T0, T0 + MINUTE, T0 + 2 * MINUTE)
    running(state, 1)
    applied = apply(state, DeleteSchedule(1, T0 + 200))
    assert applied.value == (2, 3)
    assert {"schedule/1", "progress/1"} <= applied.deleted
    assert 1 not in state.schedules
    assert [occ(state, i).state for i in (1, 2, 3)] == [S.RUNNING, S.CANCELLED, S.CANCELLED]
    apply(state, RecordOutcome(1, 1, "completed", T0 + 201))
    assert occ(state, 1).state is S.SUCCEEDED


def test_unknown_schedule_commands_are_refused():
    state = new_state()
    rejected(state, DisableSchedule(9, T0), UnknownSchedule)
    rejected(state, DeleteSchedule(9, T0), UnknownSchedule)


# -- observation: guards, overlap and capacity --


def test_observation_creates_pending_occurrences_with_increasing_ids():
    state = new_state(overlap="Concurrent", missed={"CatchUp": {"cap": 3}})
    report = apply(state, observe_command(state, T0, T0 + MINUTE)).value
    assert report.created == ((1, 1, T0), (1, 2, T0 + MINUTE))
    assert [occ(state, i).state for i in (1, 2)] == [S.PENDING, S.PENDING]
    assert occ(state, 2).due_s == T0 + MINUTE


def test_a_replayed_observation_never_rearms_a_consumed_slot():
    state = new_state(overlap="Concurrent")
    command = observe(state, T0)
    report = apply(state, command).value
    assert report.created == ()
    assert report.ignored == ((1, "stale"),)
    assert len(state.occurrences) == 1


def test_a_backward_plan_carrying_an_old_slot_selects_only_slots_after_the_cursor():
    state = new_state(overlap="Concurrent", missed={"CatchUp": {"cap": 3}})
    observe(state, T0, at_s=T0 + 30)
    # Planned from the creation cursor, overlapping the applied observation.
    late = Observe(
        T0 + MINUTE + 1,
        (ObservedSchedule(1, T0 - 1, T0 + MINUTE + 1, (T0, T0 + MINUTE), 4),),
    )
    report = apply(state, late).value
    assert report.created == ((1, 2, T0 + MINUTE),)
    assert state.progress[1].dropped_by(DropReason.MISSED) == 0
    assert state.progress[1].cursor_s == T0 + MINUTE + 1


def test_missed_slots_are_counted_with_a_recent_drop_event():
    state = new_state()
    observe(state, T0, missed=7, at_s=T0 + 2)
    progress = state.progress[1]
    assert progress.dropped_by(DropReason.MISSED) == 7
    assert progress.recent[-1].reason is DropReason.MISSED
    assert (progress.recent[-1].at_s, progress.recent[-1].count) == (T0 + 2, 7)


def test_recent_drop_events_are_bounded():
    state = new_state()
    for k in range(20):
        observe(state, missed=1, at_s=T0 + k * MINUTE)
    assert len(state.progress[1].recent) == 8
    assert state.progress[1].dropped_by(DropReason.MISSED) == 20


@pytest.mark.parametrize("blocking", ["pending", "running", "unknown", "cancelling", "retry"])
def test_overlap_skip_drops_a_slot_while_the_schedule_has_live_work(blocking):
    state = new_state(max_retries=1, delay_seconds=30)
    observe(state, T0)
    if blocking != "pending":
        running(state)
    if blocking == "unknown":
        apply(state, RecordOutcome(1, 1, "lost", T0 + 2))
    if blocking == "cancelling":
        apply(state, Cancel(1, T0 + 2))
    if blocking == "retry":
        apply(state, RecordOutcome(1, 1, "failed", T0 + 2))
        assert occ(state).retry_waiting
    report = apply(state, observe_command(state, T0 + MINUTE)).value
    assert report.created == ()
    assert report.dropped == ((1, DropReason.OVERLAP, 1),)
    assert state.progress[1].dropped_by(DropReason.OVERLAP) == 1


def test_overlap_skip_selects_again_once_the_work_is_terminal():
    state = new_state()
    observe(state, T0)
    running(state)
    apply(state, RecordOutcome(1, 1, "completed", T0 + 3))
    assert apply(state, observe_command(state, T0 + MINUTE)).value.created == ((1, 2, T0 + MINUTE),)


def test_outstanding_limit_at_max_passes_and_the_next_slot_drops_as_capacity():
    limits = Limits(outstanding=3, running=3, records=10)
    state = new_state(limits, overlap="Concurrent", missed={"CatchUp": {"cap": 3}})
    report = apply(state, observe_command(state, T0, T0 + 1, T0 + 2)).value
    assert len(report.created) == 3
    report = apply(state, observe_command(state, T0 + MINUTE)).value
    assert report.created == ()
    assert report.dropped == ((1, DropReason.CAPACITY, 1),)


def test_queue_creates_every_slot_and_claims_fifo_one_at_a_time():
    state = new_state(overlap="Queue", missed={"CatchUp": {"cap": 3}})
    observe(state, T0, T0 + MINUTE, T0 + 2 * MINUTE)
    rejected(state, Claim(2, 1, T0 + 130), ClaimRefused)
    running(state, 1)
    rejected(state, Claim(2, 1, T0 + 131), ClaimRefused)
    apply(state, RecordOutcome(1, 1, "completed", T0 + 132))
    rejected(state, Claim(3, 1, T0 + 133), ClaimRefused)
    assert running(state, 2).state is S.RUNNING


def test_queue_waits_behind_an_unknown_occurrence():
    state = new_state(overlap="Queue", missed={"CatchUp": {"cap": 2}})
    observe(state, T0, T0 + MINUTE)
    running(state, 1)
    apply(state, RecordOutcome(1, 1, "unreachable", T0 + 70))
    rejected(state, Claim(2, 1, T0 + 71), ClaimRefused)


def test_concurrent_runs_different_occurrences_up_to_the_running_limit():
    limits = Limits(running=2)
    state = new_state(limits, overlap="Concurrent", missed={"CatchUp": {"cap": 3}})
    observe(state, T0, T0 + MINUTE, T0 + 2 * MINUTE)
    running(state, 1)
    running(state, 2)
    assert state.counts().running == 2
    rejected(state, Claim(3, 1, T0 + 200), ClaimRefused)
    apply(state, RecordOutcome(1, 1, "completed", T0 + 201))
    assert running(state, 3).state is S.RUNNING


def test_unknown_and_cancelling_keep_their_running_reservation():
    limits = Limits(running=2)
    state = new_state(limits, overlap="Concurrent", missed={"CatchUp": {"cap": 3}})
    observe(state, T0, T0 + MINUTE, T0 + 2 * MINUTE)
    running(state, 1)
    running(state, 2)
    apply(state, RecordOutcome(1, 1, "lost", T0 + 200))
    apply(state, Cancel(2, T0 + 200))
    assert state.counts().running == 2
    rejected(state, Claim(3, 1, T0 + 201), ClaimRefused)
    apply(state, AcknowledgeStopped(1, True, T0 + 202))
    assert running(state, 3).state is S.RUNNING


# -- outcomes, retries, fences, acknowledgements --


def test_retry_is_claimable_exactly_delay_seconds_after_the_failure():
    state = new_state(max_retries=2, delay_seconds=30)
    observe(state, T0)
    running(state)
    apply(state, RecordOutcome(1, 1, "timed_out", T0 + 10, reason="timeout after 5 s"))
    record = occ(state)
    assert (record.state, record.attempt, record.retries_used) == (S.PENDING, 2, 1)
    assert record.not_before_s == T0 + 40
    assert record.failure_reason == "timeout after 5 s"
    rejected(state, Claim(1, 2, T0 + 40), RetryNotDue)
    assert apply(state, RetryDue(T0 + 39)).value == ()
    assert apply(state, RetryDue(T0 + 40)).value == (1,)
    assert running(state, 1, at_s=T0 + 40).attempt == 2


def test_retries_stop_after_max_retries_additional_attempts():
    state = new_state(max_retries=1)
    observe(state, T0)
    running(state)
    apply(state, RecordOutcome(1, 1, "failed", T0 + 2))
    running(state)
    apply(state, RecordOutcome(1, 2, "failed", T0 + 3))
    assert (occ(state).state, occ(state).attempt) == (S.FAILED, 2)


def test_unknown_never_retries_on_its_own_but_a_confirmed_failure_then_retries():
    state = new_state(max_retries=1)
    observe(state, T0)
    running(state)
    apply(state, RecordOutcome(1, 1, "lost", T0 + 2))
    assert apply(state, RetryDue(T0 + 10_000)).value == ()
    assert occ(state).state is S.UNKNOWN
    apply(state, RecordOutcome(1, 1, "failed", T0 + 20))
    assert (occ(state).state, occ(state).attempt) == (S.PENDING, 2)


def test_a_failure_that_wins_a_cancellation_race_does_not_retry():
    state = new_state(max_retries=3)
    observe(state, T0)
    running(state)
    apply(state, Cancel(1, T0 + 2))
    apply(state, RecordOutcome(1, 1, "failed", T0 + 3))
    assert occ(state).state is S.FAILED


def test_a_fenced_attempt_is_claimed_again_without_counting_against_max_retries():
    state = new_state(max_retries=0)
    observe(state, T0)
    running(state)
    apply(state, FenceNotLaunched(1, 1, T0 + 2))
    assert (occ(state).state, occ(state).attempt, occ(state).retries_used) == (S.PENDING, 2, 0)
    running(state, at_s=T0 + 3)
    rejected(state, FenceNotLaunched(1, 1, T0 + 4), AttemptMismatch)
    apply(state, RecordOutcome(1, 2, "completed", T0 + 5))
    assert occ(state).state is S.SUCCEEDED


def test_a_fenced_attempt_of_a_deleted_schedule_is_cancelled():
    state = new_state()
    observe(state, T0)
    running(state)
    apply(state, DeleteSchedule(1, T0 + 2))
    apply(state, FenceNotLaunched(1, 1, T0 + 3))
    assert occ(state).state is S.CANCELLED


def test_cancel_pending_is_final_and_cancel_running_waits_for_confirmation():
    state = new_state(overlap="Concurrent", missed={"CatchUp": {"cap": 2}})
    observe(state, T0, T0 + MINUTE)
    apply(state, Cancel(1, T0 + 61))
    assert occ(state, 1).state is S.CANCELLED
    running(state, 2)
    apply(state, Cancel(2, T0 + 62))
    assert occ(state, 2).state is S.CANCELLING
    apply(state, ConfirmCancelled(2, 1, T0 + 63))
    assert occ(state, 2).state is S.CANCELLED


def test_acknowledge_stopped_without_attestation_is_refused_and_changes_nothing():
    state = new_state()
    observe(state, T0)
    running(state)
    apply(state, RecordOutcome(1, 1, "lost", T0 + 2))
    rejected(state, AcknowledgeStopped(1, False, T0 + 3), AttestationRequired)
    apply(state, AcknowledgeStopped(1, True, T0 + 3))
    assert occ(state).state is S.ABANDONED


def test_preconditions_are_exact_and_a_rejected_command_changes_nothing():
    state = new_state()
    observe(state, T0)
    running(state)
    rejected(state, Claim(1, 1, T0 + 2), IllegalTransition)
    rejected(state, RecordOutcome(1, 2, "completed", T0 + 2), AttemptMismatch)
    rejected(state, RecordOutcome(1, 1, "exploded", T0 + 2), InvalidCommand)
    rejected(state, RecordOutcome(5, 1, "completed", T0 + 2), UnknownOccurrence)
    rejected(state, ConfirmCancelled(1, 1, T0 + 2), IllegalTransition)
    rejected(state, AcknowledgeStopped(1, True, T0 + 2), IllegalTransition)
    rejected(state, Claim(1, 1, -1), InvalidCommand)
    rejected(state, Observe(T0, (ObservedSchedule(1, T0, T0 - 5, (), 0),)), InvalidCommand)
    unsorted = ObservedSchedule(1, T0 + 1, T0 + 200, (T0 + 120, T0 + 60), 0)
    rejected(state, Observe(T0 + 200, (unsorted,)), InvalidCommand)
    doubled = ObservedSchedule(1, T0 + 1, T0 + 200, (T0 + 60,), 0)
    rejected(state, Observe(T0 + 200, (doubled, doubled)), InvalidCommand)


def test_an_observation_with_one_malformed_entry_changes_nothing_not_even_its_valid_entries():
    state = new_state(overlap="Concurrent", missed={"CatchUp": {"cap": 2}})
    apply(state, CreateSchedule(definition(), T0))
    good = ObservedSchedule(1, T0 - 1, T0 + 200, (T0, T0 + MINUTE), 0)
    bad = ObservedSchedule(2, T0, T0 + 200, (T0 + 500,), 0)  # slot after its cursor
    rejected(state, Observe(T0 + 200, (good, bad)), InvalidCommand)


def test_a_retired_occurrence_is_named_as_retired():
    limits = Limits(records=1, outstanding=1, running=1)
    state = new_state(limits)
    observe(state, T0)
    running(state)
    apply(state, RecordOutcome(1, 1, "completed", T0 + 2))
    observe(state, T0 + MINUTE)
    assert 1 not in state.occurrences
    error = rejected(state, Claim(1, 1, T0 + 62), UnknownOccurrence)
    assert "retired" in str(error)


# -- accounting and views --


def test_counts_follow_the_accounting_rules():
    state = new_state(overlap="Concurrent", missed={"CatchUp": {"cap": 5}})
    observe(state, *(T0 + k * MINUTE for k in range(5)))
    for i in (1, 2, 3, 4):
        running(state, i, at_s=T0 + 300)
    apply(state, RecordOutcome(1, 1, "completed", T0 + 301))
    apply(state, RecordOutcome(2, 1, "lost", T0 + 301))
    apply(state, Cancel(3, T0 + 301))
    counts = state.counts()
    assert (counts.records, counts.outstanding, counts.running) == (5, 4, 3)
    assert counts.by_state["Pending"] == 1
    assert state.schedule_counts(1) == {
        "outstanding": 4,
        "running": 3,
        "pending": 1,
        "retry_waiting": 0,
    }
    view = list_view(state)
    assert [o["id"] for o in view["occurrences"]] == [1, 2, 3, 4, 5]
    assert view["schedules"][0]["id"] == 1
    json.dumps(view)


# -- serialisation --


def test_commands_round_trip_through_json():
    commands = [
        CreateSchedule(definition(missed={"CatchUp": {"cap": 2}}), T0),
        DisableSchedule(1, T0),
        DeleteSchedule(1, T0),
        Observe(T0, (ObservedSchedule(1, T0 - 5, T0, (T0 - 1, T0), 3),)),
        Claim(1, 1, T0),
        RecordOutcome(1, 1, "failed", T0, reason="boom", execution_id="x-1"),
        Cancel(1, T0),
        ConfirmCancelled(1, 1, T0),
        RetryDue(T0),
        FenceNotLaunched(1, 2, T0),
        AcknowledgeStopped(1, True, T0),
    ]
    for command in commands:
        wire = json.loads(json.dumps(command_to_json(command)))
        assert command_from_json(wire) == command


def test_state_round_trips_and_refuses_bytes_that_do_not_re_encode():
    state = new_state(max_retries=1, delay_seconds=5)
    observe(state, T0)
    running(state)
    apply(state, RecordOutcome(1, 1, "failed", T0 + 2, execution_id="ex-1"))
    data = state.to_json()
    again = from_json(data)
    assert again.to_json() == data
    assert again.counts() == state.counts()
    assert again.size_bytes == state.size_bytes == len(data)
    assert again.budget_bytes == state.budget_bytes
    with pytest.raises(CoreError):
        from_json(data.replace(b'"schema":2', b'"schema":3'))
    with pytest.raises(CoreError):
        from_json(data.replace(b"{", b"{ ", 1))


def test_apply_reports_exactly_the_parts_it_touched():
    state = new_state()
    applied = apply(state, observe_command(state, T0))
    assert applied.touched == {"meta", "progress/1", "occurrence/1"}
    applied = apply(state, Claim(1, 1, T0 + 2))
    assert applied.touched == {"occurrence/1"}
    assert applied.size_bytes == len(state.to_json())
    assert replace(applied, value=None).deleted == frozenset()
