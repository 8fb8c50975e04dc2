"""The owner's pulse heap (issue 2 "Must show": a pulse with nothing due touches no schedule)."""

from __future__ import annotations

from appliance.core.calendar import compile_schedule
from appliance.core.limits import Limits
from appliance.core.pulse import Pulse
from appliance.core.state import (
    CreateSchedule,
    DeleteSchedule,
    DisableSchedule,
    SchedulerState,
    apply,
)
from tests.core.test_selection import Counting
from tests.core.test_state import MINUTE, T0, definition

EVERY_MINUTE = compile_schedule("* * * * *", "UTC")
EVERY_FIVE = compile_schedule("*/5 * * * *", "UTC")


def state_with(count: int) -> SchedulerState:
    state = SchedulerState(Limits(schedules=1024, records=65536, outstanding=4096, running=16))
    for _ in range(count):
        apply(state, CreateSchedule(definition(), T0 - 1))
    return state


def test_nothing_due_makes_no_calendar_call_and_plans_nothing():
    state = state_with(3)
    counting = {sid: Counting(EVERY_MINUTE) for sid in state.schedules}
    pulse = Pulse.rebuild(state, counting)
    calls_after_rebuild = sum(len(c.calls) for c in counting.values())
    assert pulse.next_due_s() == T0
    assert pulse.due(T0 - 1) == []
    assert pulse.plan(state, counting, T0 - 1) is None
    assert sum(len(c.calls) for c in counting.values()) == calls_after_rebuild


def test_due_schedules_cost_one_calendar_step_each_and_move_to_their_next_slot():
    state = state_with(3)
    compiled = {1: Counting(EVERY_MINUTE), 2: Counting(EVERY_FIVE), 3: Counting(EVERY_MINUTE)}
    pulse = Pulse.rebuild(state, compiled)
    for c in compiled.values():
        c.calls.clear()
    plan = pulse.plan(state, compiled, T0 + 2)
    assert sorted(plan.cursors_s) == [1, 2, 3]
    assert all(c.calls == ["next_after"] for c in compiled.values())
    report = apply(state, plan.command).value
    assert sorted(report.created) == [(1, 1, T0), (2, 2, T0), (3, 3, T0)]
    pulse.committed(state, plan, compiled)
    assert pulse.next_due_s() == T0 + MINUTE
    assert sorted(pulse.due(T0 + MINUTE)) == [1, 3]
    assert sorted(pulse.due(T0 + 5 * MINUTE - 1)) == [1, 3]
    assert sorted(pulse.due(T0 + 5 * MINUTE)) == [1, 2, 3]


def test_an_uncommitted_plan_leaves_the_heap_as_it_was():
    state = state_with(2)
    compiled = dict.fromkeys(state.schedules, EVERY_MINUTE)
    pulse = Pulse.rebuild(state, compiled)
    assert pulse.plan(state, compiled, T0 + 1) is not None
    assert sorted(pulse.due(T0 + 1)) == [1, 2]


def test_disabled_and_deleted_schedules_leave_the_heap_when_observed():
    state = state_with(3)
    compiled = dict.fromkeys(state.schedules, EVERY_MINUTE)
    pulse = Pulse.rebuild(state, compiled)
    apply(state, DisableSchedule(1, T0))
    apply(state, DeleteSchedule(2, T0))
    plan = pulse.plan(state, compiled, T0 + 1)
    assert [e.schedule_id for e in plan.command.entries] == [3]
    apply(state, plan.command)
    pulse.committed(state, plan, compiled)
    assert len(pulse) == 1
    assert pulse.due(T0 + MINUTE) == [3]
    assert len(Pulse.rebuild(state, compiled)) == 1


def test_rebuild_after_commits_equals_the_incrementally_kept_heap():
    state = state_with(4)
    compiled = {1: EVERY_MINUTE, 2: EVERY_FIVE, 3: EVERY_MINUTE, 4: EVERY_FIVE}
    pulse = Pulse.rebuild(state, compiled)
    for now_s in (T0 + 1, T0 + 61, T0 + 200, T0 + 301, T0 + 3600):
        plan = pulse.plan(state, compiled, now_s)
        if plan is not None:
            apply(state, plan.command)
            pulse.committed(state, plan, compiled)
        fresh = Pulse.rebuild(state, compiled)
        assert fresh.next_due_s() == pulse.next_due_s()
        for probe in (now_s, now_s + 60, now_s + 300):
            assert sorted(fresh.due(probe)) == sorted(pulse.due(probe))


def test_a_backward_clock_step_plans_nothing():
    state = state_with(1)
    compiled = {1: EVERY_MINUTE}
    pulse = Pulse.rebuild(state, compiled)
    plan = pulse.plan(state, compiled, T0 + 3)
    apply(state, plan.command)
    pulse.committed(state, plan, compiled)
    assert pulse.plan(state, compiled, T0 + 2) is None
    assert pulse.plan(state, compiled, T0 - 600) is None


def test_a_schedule_created_after_the_rebuild_is_tracked_from_its_creation_cursor():
    state = state_with(1)
    compiled = {1: EVERY_MINUTE, 2: EVERY_FIVE}
    pulse = Pulse.rebuild(state, compiled)
    schedule_id = apply(state, CreateSchedule(definition(), T0 + 10)).value
    pulse.track(state, schedule_id, compiled[schedule_id])
    assert sorted(pulse.due(T0 + 5 * MINUTE)) == [1, 2]
    assert pulse.due(T0 + 5 * MINUTE - 1) == [1]
    apply(state, DisableSchedule(schedule_id, T0 + 11))
    pulse.track(state, schedule_id, compiled[schedule_id])
    assert len(pulse) == 1
