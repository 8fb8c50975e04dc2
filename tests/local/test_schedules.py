"""One-shot, interval and cron schedules, with checked arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from appliance.core.calendar import next_fire_times
from appliance.core.errors import InvalidSchedule
from appliance.local import ScheduledTask, TaskSchedule, TaskState
from tests.local.conftest import START, WAIT_S

DATETIME_MAX = datetime.max.replace(tzinfo=UTC)


def test_naive_instants_are_refused():
    with pytest.raises(InvalidSchedule, match="naive"):
        TaskSchedule.once(datetime(2026, 1, 1))
    with pytest.raises(InvalidSchedule, match="naive"):
        TaskSchedule.every(timedelta(seconds=1), start_at=datetime(2026, 1, 1))


def test_interval_bounds_are_inclusive():
    assert TaskSchedule.every(timedelta(milliseconds=1)).interval == timedelta(milliseconds=1)
    assert TaskSchedule.every(timedelta(days=3650)).interval == timedelta(days=3650)
    with pytest.raises(InvalidSchedule, match="interval"):
        TaskSchedule.every(timedelta(microseconds=999))
    with pytest.raises(InvalidSchedule, match="interval"):
        TaskSchedule.every(timedelta(days=3650, microseconds=1))


def test_one_shot_has_no_next_run():
    schedule = TaskSchedule.once(START)
    assert schedule.first_due(START - timedelta(days=1)) == START
    assert schedule.next_due(START, START) is None


def test_interval_next_run_stays_on_the_grid():
    schedule = TaskSchedule.every(timedelta(seconds=10))
    assert schedule.first_due(START) == START + timedelta(seconds=10)
    assert schedule.next_due(START, START) == START + timedelta(seconds=10)
    assert schedule.next_due(START, START + timedelta(seconds=10)) == START + timedelta(seconds=20)
    assert schedule.next_due(START, START + timedelta(seconds=95)) == START + timedelta(seconds=100)


def test_interval_next_run_past_datetime_max_raises_invalid_schedule():
    schedule = TaskSchedule.every(timedelta(seconds=1))
    last = DATETIME_MAX - timedelta(seconds=1)
    assert schedule.next_due(last, last) == DATETIME_MAX
    with pytest.raises(InvalidSchedule):
        schedule.next_due(last + timedelta(microseconds=1), last)


def test_cron_uses_the_shared_calendar_core():
    schedule = TaskSchedule.cron("*/15 9-17 * * 1-5", "Europe/Lisbon")
    expected = next_fire_times("*/15 9-17 * * 1-5", "Europe/Lisbon", START, 3)
    assert schedule.first_due(START) == expected[0]
    assert schedule.next_due(expected[0], START) == expected[1]
    assert schedule.next_due(expected[1], expected[1]) == expected[2]


def test_cron_expression_is_validated_at_construction():
    with pytest.raises(InvalidSchedule):
        TaskSchedule.cron("0 0 31 2 *", "UTC")
    with pytest.raises(InvalidSchedule):
        TaskSchedule.cron("* * * * *", "Not/AZone")
    with pytest.raises(InvalidSchedule, match="256"):
        TaskSchedule.cron("*" + " " * 300 + "* * * *", "UTC")


def test_cron_task_runs_at_its_calendar_slot(make_scheduler, clock):
    scheduler = make_scheduler(clock=clock)
    dues = []
    task = ScheduledTask(
        "cron", TaskSchedule.cron("*/5 * * * *", "UTC"), lambda c: dues.append(c.due)
    )
    handle = scheduler.schedule(task)
    assert handle.snapshot().next_due == START + timedelta(minutes=5)
    clock.advance(timedelta(minutes=5))
    snapshot = handle.wait_until(lambda s: s.runs_completed == 1, WAIT_S)
    assert dues == [START + timedelta(minutes=5)]
    assert snapshot.next_due == START + timedelta(minutes=10)
    assert snapshot.state is TaskState.SCHEDULED


def test_describe_is_stable_text():
    assert TaskSchedule.once(START).describe() == "once:2026-01-01T12:00:00.000000Z"
    assert TaskSchedule.every(timedelta(seconds=2)).describe() == "every:2000000us"
    assert TaskSchedule.cron("0 * * * *", "UTC").describe() == "cron:0 * * * *@UTC"


def test_schedules_must_come_from_the_constructors():
    with pytest.raises(InvalidSchedule, match=r"TaskSchedule\.once/every/cron"):
        TaskSchedule(kind="hourly")
    with pytest.raises(InvalidSchedule):
        TaskSchedule(kind="cron", expression="* * * * *", timezone="UTC")
