"""Missed-run selection (SPEC §3 "Missed-run selection"), against the real calendar."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from appliance.core.calendar import compile_schedule
from appliance.core.definition import MissedCatchUp, MissedRunOnce, MissedSkip
from appliance.core.selection import Selection, select, to_datetime, to_instant

MINUTE = 60
T0 = int(datetime(2026, 3, 2, 12, 0, tzinfo=UTC).timestamp())  # a whole minute
EVERY_MINUTE = compile_schedule("* * * * *", "UTC")


class Counting:
    """Wraps a compiled schedule and counts calendar work, to prove selection is O(cap)."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.slots_materialised = 0
        self.calls: list[str] = []

    def next_after(self, after):
        self.calls.append("next_after")
        self.slots_materialised += 1
        return self.compiled.next_after(after)

    def latest_at_or_before(self, instant, count, after=None):
        self.calls.append("latest_at_or_before")
        found = self.compiled.latest_at_or_before(instant, count, after)
        self.slots_materialised += len(found)
        return found

    def count_between(self, after, until):
        self.calls.append("count_between")
        return self.compiled.count_between(after, until)


def run(policy, cursor_s, now_s, grace=5, compiled=EVERY_MINUTE, hint=None) -> Selection:
    return select(policy, compiled, cursor_s, now_s, grace, hint)


# -- Skip: the latest slot, only within the inclusive grace window --


def test_skip_selects_a_slot_exactly_at_the_grace_window():
    chosen = run(MissedSkip(), T0 - 30, T0 + 5, grace=5)
    assert chosen.slots_s == (T0,)
    assert chosen.missed == 0
    assert chosen.cursor_s == T0 + 5


def test_skip_drops_a_slot_one_second_past_the_grace_window():
    chosen = run(MissedSkip(), T0 - 30, T0 + 6, grace=5)
    assert chosen.slots_s == ()
    assert chosen.missed == 1
    assert chosen.cursor_s == T0 + 6


def test_skip_with_zero_grace_selects_only_an_observation_at_the_slot_itself():
    assert run(MissedSkip(), T0 - 30, T0, grace=0).slots_s == (T0,)
    assert run(MissedSkip(), T0 - 30, T0 + 1, grace=0).slots_s == ()


def test_skip_after_downtime_takes_only_the_latest_slot_and_counts_the_rest_missed():
    chosen = run(MissedSkip(), T0 - 10 * MINUTE - 1, T0 + 2)
    assert chosen.slots_s == (T0,)
    assert chosen.missed == 10


# -- RunOnce and CatchUp --


def test_run_once_coalesces_all_unobserved_slots_into_the_newest():
    chosen = run(MissedRunOnce(), T0 - 10 * MINUTE - 1, T0 + 40)
    assert chosen.slots_s == (T0,)
    assert chosen.missed == 10


def test_catch_up_selects_the_newest_cap_slots_in_chronological_order():
    chosen = run(MissedCatchUp(cap=3), T0 - 10 * MINUTE - 1, T0 + 40)
    assert chosen.slots_s == (T0 - 2 * MINUTE, T0 - MINUTE, T0)
    assert chosen.missed == 8


def test_catch_up_with_fewer_due_slots_than_cap_takes_them_all():
    chosen = run(MissedCatchUp(cap=5), T0 - 2 * MINUTE - 1, T0)
    assert chosen.slots_s == (T0 - 2 * MINUTE, T0 - MINUTE, T0)
    assert chosen.missed == 0


def test_catch_up_cap_exactly_equal_to_due_slots_misses_none():
    chosen = run(MissedCatchUp(cap=3), T0 - 3 * MINUTE, T0)
    assert chosen.slots_s == (T0 - 2 * MINUTE, T0 - MINUTE, T0)
    assert chosen.missed == 0
    chosen = run(MissedCatchUp(cap=3), T0 - 3 * MINUTE - 1, T0)
    assert chosen.missed == 1


# -- the cursor --


def test_a_slot_at_the_cursor_is_consumed_and_never_selected():
    assert run(MissedCatchUp(cap=5), T0, T0 + 30).slots_s == ()


def test_creation_schedules_strictly_after_creation_time():
    # A schedule created exactly at a slot instant does not run that slot.
    chosen = run(MissedRunOnce(), T0, T0 + MINUTE)
    assert chosen.slots_s == (T0 + MINUTE,)


@pytest.mark.parametrize("now_s", [T0 - 100, T0 - 1, T0])
def test_duplicate_or_backward_observations_select_nothing_and_keep_the_cursor(now_s):
    chosen = run(MissedCatchUp(cap=5), T0, now_s)
    assert chosen == Selection((), 0, T0, None)


def test_cursor_moves_to_now_even_when_the_slot_is_dropped():
    assert run(MissedSkip(), T0 - 1, T0 + 50).cursor_s == T0 + 50


# -- cost after a long downtime --


def test_a_year_of_downtime_costs_o_of_cap_not_a_walk_over_every_slot():
    compiled = Counting(EVERY_MINUTE)
    year_s = 365 * 24 * 3600
    chosen = run(MissedCatchUp(cap=4), T0 - year_s, T0, compiled=compiled)
    assert chosen.slots_s == tuple(T0 - k * MINUTE for k in (3, 2, 1, 0))
    assert chosen.missed == year_s // MINUTE - 4
    assert compiled.slots_materialised <= 5
    assert compiled.calls == ["latest_at_or_before", "count_between"]


def test_skip_after_a_year_of_downtime_counts_every_missed_slot_exactly():
    year_s = 365 * 24 * 3600
    chosen = run(MissedSkip(), T0 - year_s, T0 + 3)
    assert chosen.slots_s == (T0,)
    assert chosen.missed == year_s // MINUTE - 1


# -- the pulse hint (next due already known) --


def test_the_hint_path_costs_one_calendar_step_when_one_slot_is_due():
    compiled = Counting(EVERY_MINUTE)
    chosen = run(MissedSkip(), T0 - 30, T0 + 2, compiled=compiled, hint=T0)
    assert chosen == Selection((T0,), 0, T0 + 2, T0 + MINUTE)
    assert compiled.calls == ["next_after"]


def test_the_hint_path_with_nothing_due_makes_no_calendar_call():
    compiled = Counting(EVERY_MINUTE)
    chosen = run(MissedSkip(), T0 - 30, T0 - 1, compiled=compiled, hint=T0)
    assert chosen.slots_s == ()
    assert compiled.calls == []


@pytest.mark.parametrize("policy", [MissedSkip(), MissedRunOnce(), MissedCatchUp(cap=3)])
@pytest.mark.parametrize("now_offset", [0, 5, 6, 59, 60, 61, 7 * MINUTE + 3])
def test_the_hint_path_agrees_with_the_general_path(policy, now_offset):
    cursor_s = T0 - 17
    general = run(policy, cursor_s, T0 + now_offset)
    hinted = run(policy, cursor_s, T0 + now_offset, hint=T0)
    assert (hinted.slots_s, hinted.missed, hinted.cursor_s) == (
        general.slots_s,
        general.missed,
        general.cursor_s,
    )


def test_selection_follows_the_calendar_across_a_dst_gap():
    # America/New_York springs forward at 2026-03-08 02:00 local: "30 2 * * *" moves to 03:00.
    compiled = compile_schedule("30 2 * * *", "America/New_York")
    before = int(datetime(2026, 3, 8, 5, 0, tzinfo=UTC).timestamp())
    expected = to_instant(compiled.next_after(to_datetime(before)))
    chosen = run(MissedRunOnce(), before, expected + 1, compiled=compiled)
    assert chosen.slots_s == (expected,)
    assert to_datetime(expected) == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)


class WithIntegerEntry(Counting):
    """A calendar that also offers the integer-seconds entry point."""

    def next_after_s(self, after_s):
        self.calls.append("next_after_s")
        return to_instant(self.compiled.next_after(to_datetime(after_s)))


def test_the_integer_entry_point_is_preferred_when_the_calendar_has_one():
    compiled = WithIntegerEntry(EVERY_MINUTE)
    chosen = run(MissedSkip(), T0 - 30, T0 + 2, compiled=compiled, hint=T0)
    assert chosen == Selection((T0,), 0, T0 + 2, T0 + MINUTE)
    assert compiled.calls == ["next_after_s"]
