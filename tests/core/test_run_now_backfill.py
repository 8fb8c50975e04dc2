"""run_now (through overlap and the limits, deduplicated by request id) and backfill (the slots
with no retained occurrence, bounded, previewable)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core.command_plans import backfill_slots, plan_backfill
from appliance.core.limits import Limits
from appliance.core.occurrence import OccurrenceState
from appliance.core.schedule_commands import (
    BACKFILL_SLOTS_MAX,
    REQUEST_ID_BYTES_MAX,
    RUN_REQUESTS_MAX,
)
from appliance.core.state import (
    Backfill,
    BackfillReport,
    Claim,
    ClaimRefused,
    DisableSchedule,
    InvalidCommand,
    MarkUnknown,
    OutstandingLimitReached,
    RecordOutcome,
    RunNow,
    RunNowResult,
    UnknownSchedule,
    apply,
    command_from_json,
    command_to_json,
    needs_commands_reader,
    preview_backfill,
)
from tests.core.command_helpers import EVERY_MINUTE, MINUTE, T0, reloads_identically, state_with
from tests.core.runner_helpers import bind, claim, owned_state
from tests.core.test_state import observe, rejected

S = OccurrenceState

# ---- run_now ----


def test_run_now_creates_one_occurrence_due_at_the_committed_instant():
    state = state_with()
    result = apply(state, RunNow(1, T0 + 7)).value
    assert result == RunNowResult(1, 1, None)
    record = state.occurrences[1]
    assert (record.state, record.due_s, record.timeline[0].reason) == (S.PENDING, T0 + 7, "run_now")
    assert apply(state, Claim(1, 1, T0 + 7)).value.state is S.RUNNING


def test_a_repeated_request_id_gets_the_first_answer_and_creates_nothing():
    state = state_with(overlap="Concurrent")
    first = apply(state, RunNow(1, T0, "req-1")).value
    again = apply(state, RunNow(1, T0 + 30, "req-1")).value
    assert again == RunNowResult(1, first.occurrence_id, None, repeated=True)
    assert len(state.occurrences) == 1
    assert needs_commands_reader(state)
    reloads_identically(state)
    apply(state, DisableSchedule(1, T0 + 31))
    state2 = state_with()
    rejected(state2, RunNow(2, T0, "req-1"), UnknownSchedule)


def test_a_request_id_reused_for_another_schedule_is_refused():
    state = state_with(overlap="Concurrent")
    state2_def = state.schedules[1].definition
    from appliance.core.state import CreateSchedule

    apply(state, CreateSchedule(state2_def, T0))
    apply(state, RunNow(1, T0, "req-1"))
    rejected(state, RunNow(2, T0, "req-1"), InvalidCommand)


def test_the_request_ids_retained_are_the_newest_bounded_set():
    state = state_with(overlap="Concurrent", limits=Limits(outstanding=128, records=4096))
    for n in range(RUN_REQUESTS_MAX + 1):
        apply(state, RunNow(1, T0 + n, f"r{n}"))
    assert len(state.extra["run_requests"]["requests"]) == RUN_REQUESTS_MAX
    assert apply(state, RunNow(1, T0 + 100, f"r{RUN_REQUESTS_MAX}")).value.repeated
    assert not apply(state, RunNow(1, T0 + 101, "r0")).value.repeated  # forgotten: runs again


@pytest.mark.parametrize(
    "request_id", ["", "x" * (REQUEST_ID_BYTES_MAX + 1), "a b", "é", 7], ids=repr
)
def test_a_malformed_request_id_is_refused(request_id):
    rejected(state_with(), RunNow(1, T0, request_id), InvalidCommand)


def test_a_request_id_of_the_longest_length_is_accepted():
    assert apply(state_with(), RunNow(1, T0, "x" * REQUEST_ID_BYTES_MAX)).value.occurrence_id == 1


def test_run_now_under_skip_with_live_work_creates_nothing_and_says_overlap():
    state = state_with(overlap="Skip")
    observe(state, T0)
    result = apply(state, RunNow(1, T0 + 5, "r")).value
    assert result == RunNowResult(1, None, "overlap")
    assert state.progress[1].dropped_by(state.progress[1].recent[-1].reason) == 1
    assert apply(state, RunNow(1, T0 + 6, "r")).value == RunNowResult(1, None, "overlap", True)


def test_run_now_under_queue_waits_behind_the_live_occurrence():
    state = state_with(overlap="Queue")
    observe(state, T0)
    apply(state, Claim(1, 1, T0 + 1))
    assert apply(state, RunNow(1, T0 + 2)).value.occurrence_id == 2
    rejected(state, Claim(2, 1, T0 + 3), ClaimRefused)
    apply(state, RecordOutcome(1, 1, "completed", T0 + 4))
    assert apply(state, Claim(2, 1, T0 + 5)).value.state is S.RUNNING


def test_run_now_under_concurrent_while_an_unknown_is_live_runs_within_the_running_limit():
    state = owned_state(Limits(running=2, outstanding=8, records=64), overlap="Concurrent")
    binding = claim(state)
    apply(state, MarkUnknown(binding.invocation, "lost", T0 + 2))
    assert state.occurrences[1].state is S.UNKNOWN
    assert apply(state, RunNow(1, T0 + 3)).value.occurrence_id == 2
    claim(state, 2, at_s=T0 + 4)  # the Unknown holds one of the two running places
    assert apply(state, RunNow(1, T0 + 5)).value.occurrence_id == 3
    with pytest.raises(ClaimRefused):
        apply(state, Claim(3, 1, T0 + 6))
    assert state.occurrences[1].state is S.UNKNOWN and state.occurrences[1].attempt == 1


def test_run_now_on_a_disabled_schedule_runs_it():
    state = state_with()
    apply(state, DisableSchedule(1, T0))
    assert apply(state, RunNow(1, T0 + 1)).value.occurrence_id == 1


def test_run_now_at_the_outstanding_limit_creates_nothing_and_says_so():
    state = state_with(overlap="Concurrent", limits=Limits(outstanding=1, records=4, running=1))
    apply(state, RunNow(1, T0))
    assert apply(state, RunNow(1, T0 + 1, "r")).value == RunNowResult(1, None, "outstanding")
    assert len(state.occurrences) == 1


# ---- backfill ----


def _retained(state, schedule_id=1):
    return {r.due_s for r in state.occurrences.values() if r.schedule_id == schedule_id}


@settings(max_examples=80, deadline=None)
@given(
    observed=st.sets(st.integers(0, 59), max_size=20),
    start=st.integers(-30, 59),
    length=st.integers(0, 60),
)
def test_backfill_creates_exactly_the_slots_without_a_retained_occurrence(observed, start, length):
    state = state_with(
        overlap="Concurrent",
        at_s=T0 - 30 * MINUTE - 1,
        limits=Limits(outstanding=128, records=4096),
    )
    for minute in sorted(observed):
        observe(state, T0 + minute * MINUTE)
    start_s, end_s = T0 + start * MINUTE, T0 + (start + length) * MINUTE
    cursor_s = state.progress[1].cursor_s
    command = plan_backfill(state, EVERY_MINUTE, 1, start_s, end_s, T0 + 3600)
    wanted = [s for s in range(start_s, min(end_s, cursor_s) + 1, MINUTE)]
    assert command.slots_s == tuple(wanted)
    before = _retained(state)
    preview = preview_backfill(state, command)
    report = apply(state, command).value
    assert preview == report
    assert [slot for _, slot in report.created] == [s for s in wanted if s not in before]
    assert set(report.existing) == {s for s in wanted if s in before}
    assert all(state.occurrences[oid].timeline[0].reason == "backfill" for oid, _ in report.created)


def test_backfill_allows_slots_before_the_schedules_creation():
    state = state_with(at_s=T0)
    command = plan_backfill(state, EVERY_MINUTE, 1, T0 - 3 * MINUTE, T0, T0 + 5)
    assert command.slots_s == (T0 - 180, T0 - 120, T0 - 60, T0)
    assert len(apply(state, command).value.created) == 4


def test_backfill_never_creates_a_slot_the_schedule_has_not_passed():
    state = state_with(at_s=T0)
    assert plan_backfill(state, EVERY_MINUTE, 1, T0 + 60, T0 + 120, T0 + 200).slots_s == ()
    rejected(state, Backfill(1, T0, T0 + 60, (T0 + 60,), "Queue", T0 + 200), InvalidCommand)


def test_backfill_beyond_the_outstanding_limit_is_refused_whole_and_previewed_as_such():
    state = state_with(overlap="Queue", limits=Limits(outstanding=3, records=16, running=1))
    fits = plan_backfill(state, EVERY_MINUTE, 1, T0 - 4 * MINUTE, T0 - 2 * MINUTE, T0)
    too_many = plan_backfill(state, EVERY_MINUTE, 1, T0 - 4 * MINUTE, T0 - MINUTE, T0)
    before = state.to_json()
    assert isinstance(preview_backfill(state, too_many), OutstandingLimitReached)
    assert isinstance(preview_backfill(state, fits), BackfillReport)
    assert state.to_json() == before  # a preview creates nothing
    error = rejected(state, too_many, OutstandingLimitReached)
    assert "3 of the slots fit" in str(error)
    assert len(apply(state, fits).value.created) == 3


def test_backfill_with_skip_creates_at_most_one_while_work_is_live():
    state = state_with(overlap="Concurrent", at_s=T0)
    command = plan_backfill(state, EVERY_MINUTE, 1, T0 - 3 * MINUTE, T0, T0 + 1, overlap="Skip")
    report = apply(state, command).value
    assert [slot for _, slot in report.created] == [T0 - 180]
    assert report.overlap == (T0 - 120, T0 - 60, T0)


def test_a_backfill_range_holds_at_most_a_documented_number_of_slots():
    assert len(backfill_slots(EVERY_MINUTE, T0, T0 + (BACKFILL_SLOTS_MAX - 1) * MINUTE)) == 512
    with pytest.raises(InvalidCommand, match="more than 512"):
        backfill_slots(EVERY_MINUTE, T0, T0 + BACKFILL_SLOTS_MAX * MINUTE)
    long = tuple(T0 - i * MINUTE for i in range(BACKFILL_SLOTS_MAX + 1))[::-1]
    rejected(state_with(at_s=T0), Backfill(1, long[0], long[-1], long, "Queue", T0), InvalidCommand)


@pytest.mark.parametrize(
    "command",
    [
        Backfill(1, T0, T0 - 1, (), "Queue", T0),
        Backfill(1, T0 - 60, T0, (T0 - 60,), "Buffer", T0),
        Backfill(1, T0 - 60, T0, (T0, T0 - 60), "Queue", T0),
        Backfill(1, T0 - 60, T0, (T0 - 120,), "Queue", T0),
    ],
    ids=["reversed", "overlap", "unsorted", "outside"],
)
def test_a_malformed_backfill_is_refused(command):
    rejected(state_with(at_s=T0), command, InvalidCommand)


def test_run_now_and_backfill_round_trip_on_the_wire():
    for command in (
        RunNow(1, T0),
        RunNow(1, T0, "a.b:c-1"),
        Backfill(1, T0, T0 + 60, (T0,), "Skip", T0),
    ):
        assert command_from_json(command_to_json(command)) == command


def test_the_claimed_binding_of_a_run_now_occurrence_names_its_due_instant():
    state = owned_state(overlap="Concurrent")
    apply(state, RunNow(1, T0 + 9))
    assert bind(state, 2).due_time == "2027-01-15T08:00:09Z"
