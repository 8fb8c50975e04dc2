"""Property tests: for random valid expressions, zones and instants, the calendar is well-formed,
complete against an independent oracle, and forward, backward and counting agree.

The oracle re-derives Croner 11's ``_runAt`` rules directly from ``zoneinfo``, one wall-clock
minute at a time: a matching wall time that exists once fires once; one that exists twice fires
at both instances (interval jobs) or the first (fixed-time jobs); one inside a spring-forward gap
fires at the transition instant for fixed-time jobs when that instant is on the same local date,
and not at all for interval jobs. It shares nothing with the implementation but the parsed field
sets (pinned separately by the grammar tests and the Croner vectors).

croniter serves as a second, differential oracle in UTC where its rules equal Croner's; where they
differ, tests pin that we follow Croner (issue 2: "your code decides").
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from appliance.core.calendar import compile_schedule
from appliance.core.cron_parse import CronFields, parse_cron
from appliance.core.cron_zone import segment_at
from appliance.core.errors import InvalidSchedule

ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Santiago",
    "Australia/Sydney",
    "America/Havana",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "America/St_Johns",
    "Africa/Casablanca",
    "Antarctica/Troll",
    "Pacific/Apia",
    "America/Sao_Paulo",
    "Asia/Tehran",
    "Europe/Moscow",
]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NAIVE_EPOCH = datetime(1970, 1, 1)
ORACLE_WINDOW = timedelta(days=2)

PROPERTY_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)


# -- strategies -----------------------------------------------------------------------------------


def _item(low: int, high: int, size: int) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    pair = st.tuples(value, value).map(sorted)
    return st.one_of(
        st.just("*"),
        value.map(str),
        pair.map(lambda p: f"{p[0]}-{p[1]}"),
        st.integers(1, size).map(lambda s: f"*/{s}"),
        st.tuples(pair, st.integers(1, size)).map(lambda p: f"{p[0][0]}-{p[0][1]}/{p[1]}"),
    )


def _field(low: int, high: int, size: int) -> st.SearchStrategy[str]:
    return st.lists(_item(low, high, size), min_size=1, max_size=3).map(",".join)


@st.composite
def cron_expressions(draw: st.DrawFn) -> str:
    parts = [
        draw(st.one_of(_field(0, 59, 60), st.sampled_from(["0", "30", "*/15", "*"]))),
        draw(st.one_of(_field(0, 23, 24), st.sampled_from(["0", "1", "2", "*", "23"]))),
        draw(st.one_of(st.just("*"), _field(1, 31, 31))),
        draw(st.one_of(st.just("*"), _field(1, 12, 12))),
        draw(st.one_of(st.just("*"), _field(0, 7, 7))),
    ]
    cron = " ".join(parts)
    try:
        parse_cron(cron)
    except InvalidSchedule:
        assume(False)
    return cron


instants = st.datetimes(
    min_value=datetime(1975, 1, 1), max_value=datetime(2045, 12, 31), timezones=st.just(UTC)
)


@st.composite
def instants_near_a_transition(draw: st.DrawFn, zone_name: str) -> datetime:
    """An instant within a few hours of one of the zone's offset changes (if it has any)."""
    zone = ZoneInfo(zone_name)
    year = draw(st.integers(1975, 2045))
    start = int((datetime(year, 1, 1, tzinfo=UTC) - EPOCH).total_seconds())
    transitions = []
    cursor = start
    while cursor < start + 366 * 86_400 and len(transitions) < 4:
        segment = segment_at(zone, cursor)
        if segment.end < start + 366 * 86_400:
            transitions.append(segment.end)
        cursor = segment.end
    base = draw(st.sampled_from(transitions)) if transitions else start
    seconds = draw(st.integers(-6 * 3600, 6 * 3600))
    micros = draw(st.integers(0, 999_999))
    return EPOCH + timedelta(seconds=base + seconds, microseconds=micros)


# -- the oracle -----------------------------------------------------------------------------------


def _matches(fields: CronFields, wall: datetime) -> bool:
    if wall.minute not in fields.minutes or wall.hour not in fields.hours:
        return False
    if wall.month not in fields.months:
        return False
    dom = wall.day in fields.days_of_month
    dow = wall.isoweekday() % 7 in fields.days_of_week
    if fields.dow_is_star:
        return dom
    if fields.dom_is_star:
        return dow
    return dom or dow


def _seconds(moment: datetime) -> int:
    return int((moment - EPOCH).total_seconds())


def _transition_between(zone: ZoneInfo, low: int, high: int) -> int:
    """The first second in ``(low, high]`` whose offset differs from the offset at ``low``."""
    before = (EPOCH + timedelta(seconds=low)).astimezone(zone).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if (EPOCH + timedelta(seconds=middle)).astimezone(zone).utcoffset() == before:
            low = middle
        else:
            high = middle
    return high


def oracle(fields: CronFields, zone: ZoneInfo, after: datetime, until: datetime) -> list[datetime]:
    low, high = _seconds(after), _seconds(until)
    fires: set[int] = set()
    wall = after.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0) - timedelta(days=1)
    wall_end = until.astimezone(zone).replace(tzinfo=None) + timedelta(days=1)
    while wall <= wall_end:
        if _matches(fields, wall):
            first = _seconds(wall.replace(tzinfo=zone, fold=0).astimezone(UTC))
            second = _seconds(wall.replace(tzinfo=zone, fold=1).astimezone(UTC))
            if first == second:
                fires.add(first)
            elif first < second:  # a fold: both instances exist
                fires.add(first)
                if not fields.is_fixed_time:
                    fires.add(second)
            elif fields.is_fixed_time:  # a gap
                moved = _transition_between(zone, second, first)
                if (EPOCH + timedelta(seconds=moved)).astimezone(zone).date() == wall.date():
                    fires.add(moved)
        wall += timedelta(minutes=1)
    return [EPOCH + timedelta(seconds=s) for s in sorted(fires) if low < s <= high]


# -- properties -----------------------------------------------------------------------------------


def check_everything(cron: str, zone_name: str, after: datetime, count: int) -> None:
    schedule = compile_schedule(cron, zone_name)
    fires = schedule.next_fire_times(after, count)

    # Well-formed: aware UTC, whole seconds, strictly after `after`, strictly increasing.
    assert len(fires) == count
    for fire in fires:
        assert fire.tzinfo is UTC and fire.microsecond == 0
    assert all(earlier < later for earlier, later in zip([after, *fires], fires, strict=False))

    # Each one matches locally, or is a documented DST move of a fixed-time job.
    fields = parse_cron(cron)
    for fire in fires:
        described = schedule.describe(fire)
        if described.moved_from_gap:
            event("a fixed-time fire moved out of a gap")
        if described.in_fold:
            event(f"a fire in a fold ({'fixed-time' if fields.is_fixed_time else 'interval'})")
        if described.moved_from_gap:
            assert fields.is_fixed_time
        else:
            assert _matches(fields, described.local.replace(tzinfo=None))
        if fields.is_fixed_time and described.in_fold:
            assert described.local.fold == 0

    # Complete: the independent oracle finds exactly these in a bounded window.
    window_end = min(fires[-1], after + ORACLE_WINDOW)
    expected = oracle(fields, ZoneInfo(zone_name), after, window_end)
    assert [fire for fire in fires if fire <= window_end] == expected

    # Backward iteration and counting read the same set.
    assert schedule.latest_at_or_before(fires[-1], count, after=after) == fires
    for keep in {1, count // 2, count - 1} - {0}:
        assert schedule.latest_at_or_before(fires[-1], keep, after=after) == fires[-keep:]
    assert schedule.latest_at_or_before(fires[-1], count + 5, after=after) == fires
    assert schedule.count_between(after, fires[-1]) == count
    assert schedule.count_between(after, fires[-1] - timedelta(seconds=1)) == count - 1


@PROPERTY_SETTINGS
@given(
    cron=cron_expressions(),
    zone_name=st.sampled_from(ZONES),
    after=instants,
    count=st.integers(1, 12),
)
def test_random_schedules_are_well_formed_complete_and_consistent(
    cron: str, zone_name: str, after: datetime, count: int
) -> None:
    check_everything(cron, zone_name, after, count)


@st.composite
def near_transition_cases(draw: st.DrawFn) -> tuple[str, str, datetime]:
    zone_name = draw(st.sampled_from(ZONES[1:]))
    return draw(cron_expressions()), zone_name, draw(instants_near_a_transition(zone_name))


@PROPERTY_SETTINGS
@given(case=near_transition_cases(), count=st.integers(1, 12))
def test_random_schedules_around_dst_transitions_are_complete_and_consistent(
    case: tuple[str, str, datetime], count: int
) -> None:
    cron, zone_name, after = case
    check_everything(cron, zone_name, after, count)


@st.composite
def dst_targeted_cases(draw: st.DrawFn) -> tuple[str, str, datetime]:
    """A pattern whose wall time lies inside a real gap or fold, started up to 30 h before it."""
    zone_name = draw(st.sampled_from([name for name in ZONES if name not in FIXED_ZONES]))
    zone = ZoneInfo(zone_name)
    year = draw(st.integers(1975, 2045))
    start = int((datetime(year, 1, 1, tzinfo=UTC) - EPOCH).total_seconds())
    transitions = []
    cursor = start
    while cursor < start + 366 * 86_400:
        segment = segment_at(zone, cursor)
        if segment_at(zone, segment.end).offset_seconds != segment.offset_seconds:
            transitions.append((segment.end, segment.offset_seconds))
        cursor = segment.end
    assume(transitions)
    transition, before = draw(st.sampled_from(transitions))
    after_offset = segment_at(zone, transition).offset_seconds
    low, high = sorted((transition + before, transition + after_offset))
    wall = NAIVE_EPOCH + timedelta(seconds=draw(st.integers(low, high - 1)))
    minute, hour = wall.minute, wall.hour
    cron = draw(
        st.sampled_from(
            [
                f"{minute} {hour} * * *",  # fixed-time
                f"{minute} {hour}-{hour} * * *",  # fixed-time, written as a range
                f"{minute} {hour},{(hour + 1) % 24} * * *",  # interval: two hours
                f"*/{draw(st.integers(1, 30))} {hour} * * *",  # interval within the hour
                f"{minute} * * * *",  # hourly
                f"{minute} {hour} {wall.day} * *",  # fixed-time, that day of the month only
            ]
        )
    )
    after = EPOCH + timedelta(
        seconds=transition - draw(st.integers(0, 30 * 3600)),
        microseconds=draw(st.integers(0, 999_999)),
    )
    return cron, zone_name, after


FIXED_ZONES = {"UTC", "Asia/Kolkata", "Asia/Kathmandu"}


@PROPERTY_SETTINGS
@given(case=dst_targeted_cases(), count=st.integers(1, 6))
def test_patterns_aimed_at_gaps_and_folds_match_the_oracle(
    case: tuple[str, str, datetime], count: int
) -> None:
    cron, zone_name, after = case
    check_everything(cron, zone_name, after, count)


@PROPERTY_SETTINGS
@given(cron=cron_expressions(), zone_name=st.sampled_from(ZONES), instant=instants)
def test_latest_at_or_before_and_next_after_bracket_every_instant(
    cron: str, zone_name: str, instant: datetime
) -> None:
    schedule = compile_schedule(cron, zone_name)
    following = schedule.next_after(instant)
    previous = schedule.latest_at_or_before(instant, 1)
    assert previous, "every valid pattern has fired before 1975"
    assert previous[0] <= instant < following
    assert schedule.next_after(previous[0]) == following
    assert schedule.count_between(previous[0], following) == 1


# -- croniter as a differential oracle ------------------------------------------------------------


def _single_value_ranges_as_numbers(cron: str) -> str:
    """croniter reads a one-value range such as ``5-5`` as ``*``; hand it the plain number."""

    def rewrite(match: re.Match[str]) -> str:
        low, high = match.group(1), match.group(2)
        return low if int(low) == int(high) else match.group(0)

    return re.sub(r"(\d+)-(\d+)(?:/\d+)?", rewrite, cron)


def croniter_next(cron: str, after: datetime, count: int) -> list[datetime]:
    iterator = croniter(_single_value_ranges_as_numbers(cron), after)
    return [iterator.get_next(datetime).astimezone(UTC) for _ in range(count)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    cron=cron_expressions(),
    after=st.datetimes(
        min_value=datetime(1990, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
    ).map(lambda moment: moment.replace(microsecond=0)),
)
def test_in_utc_we_agree_with_croniter_when_a_day_field_is_a_literal_star(
    cron: str, after: datetime
) -> None:
    fields = parse_cron(cron)
    ours = compile_schedule(cron, "UTC").next_fire_times(after, 8)
    if fields.dom_is_star or fields.dow_is_star:
        assert ours == croniter_next(cron, after, 8)
    else:
        # croniter's idea of a star differs (see below); each fire matches one day field (OR).
        for fire in ours:
            assert fire.day in fields.days_of_month or fire.isoweekday() % 7 in fields.days_of_week


def test_croniter_reads_a_list_of_stars_as_a_star_but_croner_does_not() -> None:
    """Only a literal ``*`` is a star for Croner: ``*,*`` is restricted, so the days OR."""
    after = datetime(2000, 1, 1, tzinfo=UTC)
    ours = compile_schedule("0 0 1 * *,*", "UTC").next_fire_times(after, 2)
    assert ours == [datetime(2000, 1, 2, tzinfo=UTC), datetime(2000, 1, 3, tzinfo=UTC)]
    assert croniter_next("0 0 1 * *,*", after, 1) == [datetime(2000, 2, 1, tzinfo=UTC)]


def test_croniter_reads_a_one_value_range_as_a_star_but_croner_does_not() -> None:
    after = datetime(2000, 1, 1, tzinfo=UTC)
    ours = compile_schedule("5-5 * * * *", "UTC").next_fire_times(after, 2)
    assert ours == [datetime(2000, 1, 1, 0, 5, tzinfo=UTC), datetime(2000, 1, 1, 1, 5, tzinfo=UTC)]
    assert croniter("5-5 * * * *", after).get_next(datetime) == datetime(
        2000, 1, 1, 0, 1, tzinfo=UTC
    )
