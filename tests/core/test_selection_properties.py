"""Selection properties: whatever the observation sequence, no slot is armed twice.

Observations arrive in any order (duplicates, clock steps backwards, replays of old commands,
plans made from a stale cursor); the replicated guard in apply must still select each calendar
slot at most once and never at or before the cursor.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.core.calendar import compile_schedule
from appliance.core.definition import MissedCatchUp, MissedRunOnce, MissedSkip
from appliance.core.limits import Limits
from appliance.core.pulse import Pulse
from appliance.core.selection import plan_with_hints, select, to_datetime, to_instant
from appliance.core.state import (
    CreateSchedule,
    Observe,
    SchedulerState,
    apply,
)
from tests.core.test_state import definition

T0 = int(datetime(2026, 10, 25, 0, 0, tzinfo=UTC).timestamp())
CRONS = ["* * * * *", "*/7 * * * *", "5,6,50 * * * *", "30 1 * * *", "*/20 1-3 * * *"]
ZONES = ["UTC", "Europe/London", "Australia/Lord_Howe"]  # both fall back around T0
MISSED = ["Skip", "RunOnce", {"CatchUp": {"cap": 3}}]

observation = st.one_of(
    st.tuples(st.just("at"), st.integers(-600, 6 * 3600)),  # an instant relative to T0
    st.tuples(st.just("replay"), st.integers(0, 50)),  # re-apply an earlier command
    st.tuples(st.just("pulse"), st.integers(0, 400)),  # move on by a few seconds, via the heap
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cron=st.sampled_from(CRONS),
    zone=st.sampled_from(ZONES),
    missed=st.sampled_from(MISSED),
    steps=st.lists(observation, min_size=1, max_size=30),
)
def test_no_slot_is_selected_at_or_before_the_cursor_or_twice(cron, zone, missed, steps):
    limits = Limits(records=65536, outstanding=65536, running=16)
    state = SchedulerState(limits)
    definition_value = definition(missed=missed, overlap="Concurrent", limits=limits)
    definition_value = type(definition_value)(
        code=definition_value.code,
        cron=cron,
        timezone=zone,
        policy=definition_value.policy,
        name=definition_value.name,
    )
    apply(state, CreateSchedule(definition_value, T0 - 1))
    compiled = {1: compile_schedule(cron, zone)}
    pulse = Pulse.rebuild(state, compiled)
    history: list[Observe] = []
    selected: set[int] = set()
    clock_s = T0
    for kind, value in steps:
        cursor_before = state.progress[1].cursor_s
        if kind == "replay" and history:
            command = history[value % len(history)]
        elif kind == "pulse":
            clock_s += value
            plan = pulse.plan(state, compiled, clock_s)
            if plan is None:
                continue
            command = plan.command
        else:
            clock_s = T0 + value
            command = plan_with_hints(state, compiled, clock_s).command
        history.append(command)
        report = apply(state, command).value
        if kind == "pulse":
            pulse.committed(state, plan, compiled)
        for _, _, due_s in report.created:
            assert due_s > cursor_before
            assert due_s not in selected
            selected.add(due_s)
        assert state.progress[1].cursor_s >= cursor_before
        # The heap always holds exactly the first slot after the committed cursor.
        expected_next = to_instant(compiled[1].next_after(to_datetime(state.progress[1].cursor_s)))
        if kind == "pulse":
            assert pulse.next_due_s() == expected_next


@settings(max_examples=150, deadline=None)
@given(
    cron=st.sampled_from(CRONS),
    zone=st.sampled_from(ZONES),
    missed=st.sampled_from([MissedSkip(), MissedRunOnce(), MissedCatchUp(2), MissedCatchUp(5)]),
    cursor=st.integers(-3600, 4 * 3600),
    span=st.integers(0, 8 * 3600),
    grace=st.integers(0, 59),
)
def test_selection_matches_a_walk_over_every_slot(cron, zone, missed, cursor, span, grace):
    compiled = compile_schedule(cron, zone)
    cursor_s, now_s = T0 + cursor, T0 + cursor + span
    due: list[int] = []
    at = to_datetime(cursor_s)
    while True:
        at = compiled.next_after(at)
        if to_instant(at) > now_s:
            break
        due.append(to_instant(at))
    chosen = select(missed, compiled, cursor_s, now_s, grace)
    if isinstance(missed, MissedSkip):
        expected = due[-1:] if due and now_s - due[-1] <= grace else []
    elif isinstance(missed, MissedRunOnce):
        expected = due[-1:]
    else:
        expected = due[-missed.cap :]
    assert list(chosen.slots_s) == expected
    assert chosen.missed == len(due) - len(expected)
    assert chosen.cursor_s == max(cursor_s, now_s)
