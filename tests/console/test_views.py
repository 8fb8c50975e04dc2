"""The pages' data: sorting and paging the schedules, next and upcoming runs, the run chart."""

from __future__ import annotations

import pytest

from appliance.console.chart import run_chart
from appliance.console.views import (
    PAGE_ROWS,
    Calendars,
    last_outcomes,
    run_points,
    schedule_detail,
    schedule_rows,
    snapshot,
    sorted_page,
    upcoming_runs,
)
from appliance.core import state as core
from appliance.core.jitter import jittered_instant_s
from tests.console.state_samples import T0, S, definition, finished, state_with


def rows_of(count: int) -> list:
    return schedule_rows(snapshot(state_with(count)), T0 + 30, Calendars())


def test_a_page_holds_exactly_page_rows_and_one_more_makes_a_second_page() -> None:
    assert sorted_page(rows_of(PAGE_ROWS), "id", "asc", 1).pages == 1
    listing = sorted_page(rows_of(PAGE_ROWS + 1), "id", "asc", 2)
    assert listing.pages == 2 and [r.id for r in listing.rows] == [PAGE_ROWS + 1]


def test_a_page_beyond_the_last_shows_the_last() -> None:
    listing = sorted_page(rows_of(3), "id", "asc", 99)
    assert listing.page == 1 and len(listing.rows) == 3


@pytest.mark.parametrize(("sort", "order"), [("bogus", "asc"), ("id", "sideways")])
def test_an_unknown_sort_or_order_is_refused_by_name(sort: str, order: str) -> None:
    with pytest.raises(ValueError, match=r"^(sort|order):"):
        sorted_page(rows_of(1), sort, order, 1)


def test_sorting_by_name_descending() -> None:
    listing = sorted_page(rows_of(5), "name", "desc", 1)
    assert [r.name for r in listing.rows] == [f"job-{i:04d}" for i in (4, 3, 2, 1, 0)]


def test_next_run_is_the_next_slot_and_a_disabled_schedule_has_none() -> None:
    st = state_with(2)
    core.apply(st, core.DisableSchedule(2, T0))
    rows = {r.id: r for r in schedule_rows(snapshot(st), T0 + 30, Calendars())}
    assert rows[1].next_s == T0 + 60
    assert rows[2].next_s is None and rows[2].status == "disabled"
    ordered = sorted_page(list(rows.values()), "next", "asc", 1).rows
    assert [r.id for r in ordered] == [1, 2]  # the disabled one after every scheduled one


def test_the_next_run_cache_moves_on_once_the_slot_passed() -> None:
    calendars = Calendars()
    assert calendars.next_after("* * * * *", "UTC", T0 + 30) == T0 + 60
    assert calendars.next_after("* * * * *", "UTC", T0 + 59) == T0 + 60
    assert calendars.next_after("* * * * *", "UTC", T0 + 60) == T0 + 120


def test_the_last_outcome_is_the_newest_finished_record() -> None:
    old = finished(1, 1, T0, T0 + 1, T0 + 2, S.SUCCEEDED)
    new = finished(2, 1, T0 + 60, T0 + 61, T0 + 65, S.FAILED)
    assert last_outcomes({1: old, 2: new})[1] is new


def test_upcoming_runs_carry_the_same_jitter_as_the_owner() -> None:
    st = core.SchedulerState(state_with(0).limits)
    core.apply(st, core.CreateSchedule(definition("j", jitter_seconds=30), T0))
    schedule = st.schedules[1]
    runs = upcoming_runs(schedule, T0, Calendars(), count=5)
    assert [u.due_s for u in runs] == [T0 + 60 * k for k in range(1, 6)]
    for u in runs:
        assert u.start_s == jittered_instant_s(1, u.due_s, 30, u.due_s + 60)
        assert u.due_s <= u.start_s <= u.due_s + 30


def test_run_points_measure_lateness_and_duration_from_the_timeline() -> None:
    records = [
        finished(1, 1, T0, T0 + 2, T0 + 7, S.SUCCEEDED),
        finished(2, 1, T0 + 60, T0 + 60, T0 + 61, S.FAILED),
    ]
    points = run_points(records)
    assert [(p.lateness_s, p.duration_s, p.state) for p in points] == [
        (2, 5, "Succeeded"),
        (0, 1, "Failed"),
    ]
    duration, lateness = run_chart(points)
    assert duration.max_value == 5 and lateness.max_value == 2
    assert duration.bars[0].height > duration.bars[1].height
    assert [b.css for b in duration.bars] == ["state-succeeded", "state-failed"]
    assert duration.bars[0].href == "/occurrences/1"


def test_a_schedule_detail_holds_its_whole_definition_and_newest_history_first() -> None:
    st = state_with(1)
    snap = snapshot(st)
    snap.occurrences.update(
        {
            1: finished(1, 1, T0 + 60, T0 + 61, T0 + 62, S.SUCCEEDED),
            2: finished(2, 1, T0 + 120, T0 + 121, T0 + 122, S.SUCCEEDED),
        }
    )
    detail = schedule_detail(snap, 1, T0 + 130, Calendars())
    assert detail is not None
    assert detail.definition["code"] == "console.log('job-0000')"
    assert [r.id for r in detail.history] == [2, 1]
    assert detail.upcoming[0].due_s == T0 + 180
    assert schedule_detail(snap, 99, T0, Calendars()) is None
