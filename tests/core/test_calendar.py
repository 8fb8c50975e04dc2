"""The calendar API (issue 2 "Calendar"): instants, bounds, timezones, backward steps, counts."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from appliance.core.calendar import (
    COUNT_MAX,
    CompiledSchedule,
    FireTime,
    compile_schedule,
    next_fire_times,
    validate_timezone,
)
from appliance.core.cron_zone import TIMEZONE_BYTES_MAX
from appliance.core.errors import InvalidSchedule


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


EVERY_MINUTE = compile_schedule("* * * * *", "UTC")


# -- instants -------------------------------------------------------------------------------------


def test_results_are_strictly_after_the_given_instant() -> None:
    assert EVERY_MINUTE.next_after(utc(2025, 1, 1, 10, 0)) == utc(2025, 1, 1, 10, 1)
    assert EVERY_MINUTE.next_after(utc(2025, 1, 1, 9, 59, 59)) == utc(2025, 1, 1, 10, 0)


def test_sub_second_parts_never_round_up_or_down_into_a_wrong_slot() -> None:
    almost = datetime(2025, 1, 1, 10, 0, 59, 999_999, tzinfo=UTC)
    assert EVERY_MINUTE.next_after(almost) == utc(2025, 1, 1, 10, 1)
    just_after = datetime(2025, 1, 1, 10, 1, 0, 1, tzinfo=UTC)
    assert EVERY_MINUTE.next_after(just_after) == utc(2025, 1, 1, 10, 2)


def test_results_are_aware_utc_whole_seconds_whatever_the_offset_of_after() -> None:
    after = datetime(2025, 6, 1, 12, 0, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    result = compile_schedule("0 * * * *", "Europe/Berlin").next_after(after)
    assert result == utc(2025, 6, 1, 7, 0)
    assert result.tzinfo is UTC
    assert result.microsecond == 0


@pytest.mark.parametrize("name", ["after", "instant", "until"])
def test_a_naive_instant_is_rejected_naming_the_argument(name: str) -> None:
    naive = datetime(2025, 1, 1)
    aware = utc(2025, 1, 1)
    calls = {
        "after": lambda: EVERY_MINUTE.next_after(naive),
        "instant": lambda: EVERY_MINUTE.latest_at_or_before(naive, 1),
        "until": lambda: EVERY_MINUTE.count_between(aware, naive),
    }
    with pytest.raises(InvalidSchedule, match=rf"^{name}: must be timezone-aware"):
        calls[name]()


def test_a_non_datetime_instant_is_rejected() -> None:
    with pytest.raises(InvalidSchedule, match=r"^after: must be a datetime"):
        EVERY_MINUTE.next_after("2025-01-01T00:00:00Z")  # type: ignore[arg-type]


def test_count_is_bounded_from_0_to_10000() -> None:
    start = utc(2025, 1, 1)
    assert EVERY_MINUTE.next_fire_times(start, 0) == []
    many = EVERY_MINUTE.next_fire_times(start, COUNT_MAX)
    assert len(many) == COUNT_MAX == 10_000
    assert many[-1] == start + timedelta(minutes=COUNT_MAX)
    for bad in (-1, COUNT_MAX + 1):
        with pytest.raises(InvalidSchedule, match=r"^count: .* out of range 0-10000"):
            EVERY_MINUTE.next_fire_times(start, bad)
        with pytest.raises(InvalidSchedule, match=r"^count: "):
            EVERY_MINUTE.latest_at_or_before(start, bad)
    with pytest.raises(InvalidSchedule, match=r"^count: must be an integer"):
        EVERY_MINUTE.next_fire_times(start, True)


def test_the_module_function_is_the_public_api_of_spec() -> None:
    after = utc(2025, 3, 8, 12)
    assert next_fire_times("30 2 * * *", "America/New_York", after, 2) == [
        utc(2025, 3, 9, 7, 0),  # 02:30 does not exist: moved to 03:00 EDT
        utc(2025, 3, 10, 6, 30),
    ]


def test_iteration_ends_cleanly_at_the_end_of_year_9999() -> None:
    leap_day = compile_schedule("0 0 29 2 *", "UTC")
    assert leap_day.next_after(utc(9995, 1, 1)) == utc(9996, 2, 29)
    with pytest.raises(InvalidSchedule, match="does not fire after"):
        leap_day.next_after(utc(9996, 3, 1))


def test_backward_iteration_stops_cleanly_at_the_start_of_the_calendar() -> None:
    leap_day = compile_schedule("0 0 29 2 *", "America/New_York")
    fires = leap_day.latest_at_or_before(utc(2025, 1, 1), COUNT_MAX)
    # Proleptic Gregorian leap years 4..2024: 506 multiples of 4 minus 15 skipped centuries.
    assert len(fires) == 491
    assert fires[0].year == 4
    assert fires[-1] == utc(2024, 2, 29, 5, 0)


# -- compiled schedules ---------------------------------------------------------------------------


def test_compiled_schedules_are_immutable_and_compare_by_their_fields() -> None:
    first = compile_schedule("*/5 * * * *", "Europe/Berlin")
    second = compile_schedule("*/5 * * * *", "Europe/Berlin")
    assert first == second and hash(first) == hash(second)
    assert first != compile_schedule("*/5 * * * *", "UTC")
    assert isinstance(first, CompiledSchedule)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.cron = "* * * * *"  # type: ignore[misc]


# -- timezones ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "UTC",
        "Etc/GMT+5",
        "Etc/GMT-14",
        "America/Argentina/ComodRivadavia",
        "America/Port-au-Prince",
        "EST5EDT",
        "Pacific/Chatham",
    ],
)
def test_iana_names_including_fixed_offsets_are_accepted(name: str) -> None:
    assert validate_timezone(name).key == name


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("", "explicit IANA timezone is required"),
        ("local", "not an explicit IANA timezone"),
        ("localtime", "not an explicit IANA timezone"),
        ("posixrules", "not an explicit IANA timezone"),
        ("/etc/localtime", "not an IANA timezone name"),
        ("../etc/passwd", "not an IANA timezone name"),
        ("America\\New_York", "not an IANA timezone name"),
        ("America//New_York", "not an IANA timezone name"),
        ("America/New_York/", "not an IANA timezone name"),
        ("right/UTC", "not an IANA timezone name"),
        ("posix/Europe/Berlin", "not an IANA timezone name"),
        ("Europe/Berlin ", "not an IANA timezone name"),
        ("utc", "unknown IANA timezone"),
        ("Mars/Olympus_Mons", "unknown IANA timezone"),
        ("America", "unknown IANA timezone"),  # a directory, not a zone
    ],
)
def test_timezones_that_are_not_explicit_loadable_iana_names_are_rejected(
    name: str, needle: str
) -> None:
    with pytest.raises(InvalidSchedule, match=r"^timezone: ") as exc:
        validate_timezone(name)
    assert needle in str(exc.value)


def test_a_timezone_name_of_128_bytes_passes_the_size_check_and_129_fails() -> None:
    at_limit = "Area/" + "x" * (TIMEZONE_BYTES_MAX - 5)
    assert len(at_limit.encode()) == 128
    with pytest.raises(InvalidSchedule, match="unknown IANA timezone"):
        validate_timezone(at_limit)
    with pytest.raises(InvalidSchedule, match="129 bytes, more than the limit of 128"):
        validate_timezone(at_limit + "x")


def test_a_non_string_timezone_is_rejected() -> None:
    with pytest.raises(InvalidSchedule, match=r"^timezone: must be a string"):
        validate_timezone(None)


# -- backward steps -------------------------------------------------------------------------------


def test_latest_at_or_before_includes_the_instant_and_excludes_after() -> None:
    instant = utc(2025, 1, 1, 10, 0)
    assert EVERY_MINUTE.latest_at_or_before(instant, 2) == [utc(2025, 1, 1, 9, 59), instant]
    assert EVERY_MINUTE.latest_at_or_before(instant, 5, after=utc(2025, 1, 1, 9, 58)) == [
        utc(2025, 1, 1, 9, 59),
        instant,
    ]
    assert EVERY_MINUTE.latest_at_or_before(instant, 5, after=instant) == []
    assert EVERY_MINUTE.latest_at_or_before(instant, 0) == []


def test_latest_at_or_before_after_a_year_of_downtime_does_not_walk_every_slot() -> None:
    schedule = compile_schedule("* * * * *", "Europe/Berlin")
    instant = utc(2035, 6, 1, 12, 0, 30)
    cursor = utc(2025, 6, 1, 12, 0)  # ten years: 5.2 million missed slots
    schedule.latest_at_or_before(instant, 1, after=cursor)  # warm the zone tables
    started = time.perf_counter()
    newest = schedule.latest_at_or_before(instant, 1, after=cursor)
    newest_ten = schedule.latest_at_or_before(instant, 10, after=cursor)
    elapsed_s = time.perf_counter() - started
    assert newest == [utc(2035, 6, 1, 12, 0)]
    assert newest_ten == [utc(2035, 6, 1, 11, 51) + timedelta(minutes=i) for i in range(10)]
    # Walking 5.2 million slots would take seconds; O(count) takes microseconds.
    assert elapsed_s < 0.05


def test_latest_at_or_before_with_a_sparse_pattern_skips_days_not_slots() -> None:
    leap_day = compile_schedule("0 12 29 2 *", "Australia/Sydney")
    assert leap_day.latest_at_or_before(utc(2031, 1, 1), 2) == [
        utc(2024, 2, 29, 1, 0),
        utc(2028, 2, 29, 1, 0),
    ]
    assert leap_day.latest_at_or_before(utc(2031, 1, 1), 3, after=utc(2024, 2, 29, 1, 0)) == [
        utc(2028, 2, 29, 1, 0)
    ]


# -- counting -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "zone", "expected"),
    [
        ("* * * * *", "UTC", 525_600),
        ("* * * * *", "America/New_York", 525_600),  # gap -60, fold +60
        ("* * * * *", "Australia/Lord_Howe", 525_600),  # gap -30, fold +30
        ("*/30 2 * * *", "America/New_York", 2 * 365 - 2),  # the gap day loses both slots
        ("*/30 1 * * *", "America/New_York", 2 * 365 + 2),  # the fold day runs both twice
        ("30 2 * * *", "America/New_York", 365),  # fixed-time: moved, never lost
        ("30 1 * * *", "America/New_York", 365),  # fixed-time: first fold instance only
        ("0 0 * * *", "America/Santiago", 365),
        ("0 23 * * *", "America/Santiago", 365),
        ("0 0 13 * 5", "UTC", 52 + 12 - 1),  # OR: 52 Fridays + 12 thirteenths, 13 June is both
    ],
)
def test_count_between_counts_a_whole_year_exactly(cron: str, zone: str, expected: int) -> None:
    schedule = compile_schedule(cron, zone)
    start = datetime(2025, 1, 1, tzinfo=validate_timezone(zone))
    end = datetime(2026, 1, 1, tzinfo=validate_timezone(zone))
    assert schedule.count_between(start - timedelta(seconds=1), end - timedelta(seconds=1)) == (
        expected
    )


def test_count_between_is_exclusive_at_after_and_inclusive_at_until() -> None:
    ten = utc(2025, 1, 1, 10, 0)
    assert EVERY_MINUTE.count_between(ten, ten) == 0
    assert EVERY_MINUTE.count_between(ten, ten + timedelta(minutes=1)) == 1
    assert EVERY_MINUTE.count_between(ten - timedelta(seconds=1), ten) == 1
    assert EVERY_MINUTE.count_between(ten, ten - timedelta(hours=1)) == 0


def test_count_between_over_ten_years_takes_days_not_slots() -> None:
    schedule = compile_schedule("* * * * *", "America/New_York")
    start, end = utc(2025, 1, 1), utc(2035, 1, 1)
    schedule.count_between(start, end)  # warm the zone tables
    started = time.perf_counter()
    total = schedule.count_between(start, end)
    elapsed_s = time.perf_counter() - started
    assert total == (end - start) // timedelta(minutes=1)
    assert elapsed_s < 0.5


# -- describe -------------------------------------------------------------------------------------


def test_describe_marks_a_gap_move_and_both_fold_instances() -> None:
    fixed = compile_schedule("30 2 * * *", "America/New_York")
    moved = fixed.describe(utc(2025, 3, 9, 7, 0))
    assert moved == FireTime(
        utc=utc(2025, 3, 9, 7, 0),
        local=moved.local,
        moved_from_gap=True,
        in_fold=False,
    )
    assert moved.local.isoformat() == "2025-03-09T03:00:00-04:00"
    interval = compile_schedule("*/30 1 * * *", "America/New_York")
    first = interval.describe(utc(2025, 11, 2, 5, 30))
    second = interval.describe(utc(2025, 11, 2, 6, 30))
    assert (first.in_fold, first.local.fold, first.moved_from_gap) == (True, 0, False)
    assert (second.in_fold, second.local.fold, second.moved_from_gap) == (True, 1, False)
    ordinary = interval.describe(utc(2025, 11, 3, 6, 30))
    assert (ordinary.in_fold, ordinary.moved_from_gap) == (False, False)


def test_describe_refuses_an_instant_that_is_not_a_fire_time() -> None:
    with pytest.raises(InvalidSchedule, match=r"^t: .* is not a fire time"):
        compile_schedule("30 1 * * *", "America/New_York").describe(utc(2025, 11, 2, 6, 30))
