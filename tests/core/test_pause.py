"""pause / resume: a committed, cluster-wide switch (issue 22, item 4)."""

from __future__ import annotations

from appliance.core.command_plans import plan_resume
from appliance.core.occurrence import OccurrenceState
from appliance.core.selection import plan_observation
from appliance.core.state import (
    Backfill,
    Cancel,
    Claim,
    ClaimOccurrence,
    ClaimRefused,
    Pause,
    Paused,
    RecordOutcome,
    Resume,
    RunNow,
    Skipped,
    apply,
    command_from_json,
    command_to_json,
    current_epoch,
    list_view,
    needs_commands_reader,
    paused_since,
)
from tests.core.command_helpers import EVERY_MINUTE, MINUTE, T0, reloads_identically, state_with
from tests.core.runner_helpers import bind, owned_state
from tests.core.test_state import observe, rejected

S = OccurrenceState


def test_while_paused_no_slot_is_selected_and_no_cursor_moves():
    state = state_with()
    assert apply(state, Pause(T0 - 1)).value is True
    report = apply(state, plan_observation(state, {1: EVERY_MINUTE}, T0 + 5 * MINUTE)).value
    assert report.created == () and report.ignored == ((1, "paused"),)
    assert state.progress[1].cursor_s == T0 - 1
    assert paused_since(state) == T0 - 1 and list_view(state)["paused"] == {"at": T0 - 1}


def test_while_paused_pending_work_is_not_claimed_but_running_work_goes_on():
    state = state_with(overlap="Concurrent")
    observe(state, T0, T0 + MINUTE)
    apply(state, Claim(1, 1, T0 + 61))
    apply(state, Pause(T0 + 62))
    rejected(state, Claim(2, 1, T0 + 63), ClaimRefused)
    assert apply(state, Cancel(1, T0 + 64)).value.state is S.CANCELLING
    assert apply(state, RecordOutcome(1, 1, "completed", T0 + 65)).value.state is S.SUCCEEDED
    rejected(state, RunNow(1, T0 + 66), Paused)
    rejected(state, Backfill(1, T0 - 60, T0 - 60, (T0 - 60,), "Queue", T0 + 66), Paused)


def test_a_bound_claim_is_refused_while_paused():
    state = owned_state(overlap="Queue")
    binding = bind(state)
    apply(state, Pause(T0 + 1))
    rejected(state, ClaimOccurrence(1, 1, current_epoch(state), binding, T0 + 1), ClaimRefused)


def test_resume_applies_no_backlog_and_counts_the_skipped_slots_missed():
    state = state_with(missed={"CatchUp": {"cap": 5}})
    apply(state, Pause(T0))
    at_s = T0 + 10 * MINUTE + 30
    command = plan_resume(state, {1: EVERY_MINUTE}, at_s)
    assert command.skipped == (Skipped(1, T0 - 1, 11),)
    assert apply(state, command).value == (1,)
    assert state.progress[1].cursor_s == at_s and state.progress[1].dropped[0] == 11
    later = apply(state, plan_observation(state, {1: EVERY_MINUTE}, T0 + 11 * MINUTE)).value
    assert [due for _, _, due in later.created] == [T0 + 11 * MINUTE]  # nothing extra
    assert not needs_commands_reader(state)


def test_resume_with_catch_up_applies_the_missed_policy_to_the_paused_span():
    state = state_with(missed={"CatchUp": {"cap": 3}})
    apply(state, Pause(T0))
    apply(state, plan_resume(state, {1: EVERY_MINUTE}, T0 + 10 * MINUTE, catch_up=True))
    assert state.progress[1].cursor_s == T0 - 1
    report = apply(state, plan_observation(state, {1: EVERY_MINUTE}, T0 + 10 * MINUTE)).value
    assert [due for _, _, due in report.created] == [T0 + m * MINUTE for m in (8, 9, 10)]


def test_a_count_planned_from_another_cursor_is_not_recorded():
    state = state_with()
    apply(state, Pause(T0))
    apply(state, Resume(T0 + MINUTE, False, (Skipped(1, T0 - 100, 7),)))
    assert state.progress[1].cursor_s == T0 + MINUTE and state.progress[1].dropped[0] == 0


def test_pause_twice_keeps_the_first_instant_and_resume_when_running_changes_nothing():
    state = state_with()
    apply(state, Pause(T0))
    before = state.to_json()
    assert apply(state, Pause(T0 + 5)).value is False
    assert state.to_json() == before
    apply(state, Resume(T0 + 6))
    before = state.to_json()
    assert apply(state, Resume(T0 + 7)).value == ()
    assert state.to_json() == before


def test_paused_raises_the_reader_version_and_reloads_identically():
    state = state_with()
    assert not needs_commands_reader(state)
    apply(state, Pause(T0))
    assert needs_commands_reader(state)
    reloads_identically(state)
    apply(state, Resume(T0 + 1))
    assert not needs_commands_reader(state)


def test_pause_and_resume_round_trip_on_the_wire():
    for command in (Pause(T0), Resume(T0, True), Resume(T0, False, (Skipped(1, T0 - 1, 3),))):
        assert command_from_json(command_to_json(command)) == command
