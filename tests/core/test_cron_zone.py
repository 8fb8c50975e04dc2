"""The zone timeline: offset segments recovered through zoneinfo's public API are exact.

The oracle is the transition list zoneinfo itself loaded from tzdata (its pure-Python twin
exposes it); product code never touches those private attributes.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta
from zoneinfo import _zoneinfo as pure_zoneinfo  # type: ignore[attr-defined]

import pytest

from appliance.core.cron_zone import offset_at, segment_at, validate_timezone
from appliance.core.errors import InvalidSchedule

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SAMPLE_ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Santiago",
    "Australia/Sydney",
    "Africa/Casablanca",
    "Antarctica/Troll",
    "Pacific/Apia",
    "Asia/Gaza",
    "America/Havana",
    "Europe/Dublin",  # negative DST in tzdata
]


def year_start(year: int) -> int:
    return int((datetime(year, 1, 1, tzinfo=UTC) - EPOCH).total_seconds())


def recovered_transitions(zone_name: str, year: int) -> list[tuple[int, int]]:
    zone = validate_timezone(zone_name)
    found, cursor, end = [], year_start(year), year_start(year + 1)
    at_start = segment_at(zone, cursor).offset_seconds
    if segment_at(zone, cursor - 1).offset_seconds != at_start:
        found.append((cursor, at_start))  # a change exactly at the year boundary
    while cursor < end:
        segment = segment_at(zone, cursor)
        assert segment.start <= cursor < segment.end
        if segment.end < end:
            following = segment_at(zone, segment.end).offset_seconds
            if following != segment.offset_seconds:
                found.append((segment.end, following))
        cursor = segment.end
    return found


def tzdata_transitions(zone_name: str, year: int) -> list[tuple[int, int]]:
    zone = pure_zoneinfo.ZoneInfo.no_cache(zone_name)
    result, previous = [], None
    for index, instant in enumerate(zone._trans_utc):
        offset = int(zone._ttinfos[index].utcoff.total_seconds())
        before = int(zone._tti_before.utcoff.total_seconds()) if index == 0 else previous
        if offset != before and year_start(year) <= instant < year_start(year + 1):
            result.append((instant, offset))
        previous = offset
    return result


@pytest.mark.parametrize("zone_name", SAMPLE_ZONES)
def test_recovered_transitions_equal_tzdata_for_sample_zones_1975_to_2036(zone_name: str) -> None:
    seen = 0
    for year in range(1975, 2037):
        expected = tzdata_transitions(zone_name, year)
        assert recovered_transitions(zone_name, year) == expected, year
        seen += len(expected)
    assert seen >= 10  # every sample zone changed its offset repeatedly in the period


@pytest.mark.parametrize("year", [1985, 2025])
def test_recovered_transitions_equal_tzdata_for_every_zone(year: int) -> None:
    names = sorted(zoneinfo.available_timezones())
    assert len(names) > 300
    for name in names:
        try:
            validate_timezone(name)
        except InvalidSchedule:
            continue  # e.g. "localtime" or "posixrules" in a system tree
        assert recovered_transitions(name, year) == tzdata_transitions(name, year), name


@pytest.mark.parametrize(
    ("zone_name", "year"),
    [("Europe/Madrid", 1901), ("Antarctica/Palmer", 1965), ("Pacific/Apia", 2011)],
)
def test_a_change_exactly_at_a_year_boundary_or_of_a_whole_day_is_found(
    zone_name: str, year: int
) -> None:
    expected = tzdata_transitions(zone_name, year)
    assert expected
    assert recovered_transitions(zone_name, year) == expected


@pytest.mark.parametrize("zone_name", ["America/New_York", "Australia/Lord_Howe", "UTC"])
def test_future_years_follow_the_zone_rule_beyond_the_tzdata_table(zone_name: str) -> None:
    zone = validate_timezone(zone_name)
    for year in (2050, 2400, 9998):
        for instant, offset in recovered_transitions(zone_name, year):
            assert offset_at(zone, instant) == offset
            assert offset_at(zone, instant - 1) != offset


def test_segments_have_the_offset_zoneinfo_reports_at_every_probe() -> None:
    zone = validate_timezone("Pacific/Chatham")
    start = year_start(2025)
    for hour in range(0, 366 * 24, 7):
        instant = start + hour * 3600 + 59
        moment = EPOCH + timedelta(seconds=instant)
        expected = moment.astimezone(zone).utcoffset()
        assert expected is not None
        assert segment_at(zone, instant).offset_seconds == int(expected.total_seconds())
