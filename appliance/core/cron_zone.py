"""Timezone validation and the UTC-offset timeline of a zone (SPEC §3 "Cron", timezone row).

Theory of operation: the calendar needs, for any instant, the *segment* around it: the longest
half-open UTC interval ``[start, end)`` on which the zone's offset is constant. Inside one segment
wall-clock time and UTC differ by a constant, so stepping through matching wall times and mapping
them to instants is plain integer arithmetic, in either direction. A spring-forward gap is the
wall range no segment covers; a fall-back fold is the wall range two neighbouring segments cover.

``zoneinfo`` does not publish its transition table, so this module recovers it through the public
API, one UTC year at a time, and caches it: it probes the wall-clock offset once a day (the
``fold=0`` offset of a naive wall time is the offset *before* a transition for every wall time up
to ``T + max(before, after)``), bisects each change to the exact second and resumes probing from
there. Only an offset that changes and changes back within one day would be missed;
``tests/core/test_cron_zone.py`` checks the result against tzdata's own transition list, and a
full scan of every zone for 1900-2037 found no such pair.
Year boundaries are used as extra segment boundaries (the offset is equal on both sides, so they
never look like a gap or a fold).

Accepted timezone names: any key that ``zoneinfo`` loads and that looks like an IANA name
(``Area/Location``, ``UTC``, ``Etc/GMT+5``, legacy ``EST5EDT``), at most 128 UTF-8 bytes. Fixed
offsets such as ``UTC`` and ``Etc/GMT+5`` are IANA names and are accepted. Refused: ``""``,
``local``/``localtime``, ``posixrules``, paths (absolute, ``..``, backslashes), the ``posix/`` and
``right/`` system trees (machine-dependent, and ``right/`` counts leap seconds) and anything
zoneinfo cannot load.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from appliance.core.errors import InvalidSchedule

TIMEZONE_BYTES_MAX = 128

EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
SECONDS_PER_DAY = 86_400
_NAIVE_EPOCH = datetime(1970, 1, 1)
_PROBE_STEP = timedelta(days=1)
_PROBE_MARGIN = timedelta(days=2)

# The instants the calendar works in: a few days inside datetime's range, so that every wall time
# and every offset arithmetic near the ends still fits a datetime.
INSTANT_MIN = (date(1, 1, 4).toordinal() - EPOCH_ORDINAL) * SECONDS_PER_DAY
INSTANT_MAX = (date(9999, 12, 28).toordinal() - EPOCH_ORDINAL) * SECONDS_PER_DAY

_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*\Z")
_REFUSED_NAMES = frozenset({"local", "localtime", "posixrules"})
_REFUSED_PREFIXES = ("posix/", "right/")


def validate_timezone(timezone: object) -> ZoneInfo:
    """Load ``timezone`` as an IANA zone; raise :class:`InvalidSchedule` (``timezone: …``)."""
    if not isinstance(timezone, str):
        raise InvalidSchedule(f"timezone: must be a string, not {type(timezone).__name__}")
    size_bytes = len(timezone.encode("utf-8", errors="surrogatepass"))
    if size_bytes > TIMEZONE_BYTES_MAX:
        raise InvalidSchedule(
            f"timezone: name is {size_bytes} bytes, more than the limit of {TIMEZONE_BYTES_MAX}"
        )
    if timezone == "":
        raise InvalidSchedule("timezone: an explicit IANA timezone is required (got empty)")
    if timezone.lower() in _REFUSED_NAMES:
        raise InvalidSchedule(
            f"timezone: {timezone!r} is not an explicit IANA timezone; name one, e.g. Europe/Berlin"
        )
    if not _NAME.match(timezone) or timezone.startswith(_REFUSED_PREFIXES):
        raise InvalidSchedule(
            f"timezone: {timezone!r} is not an IANA timezone name (paths are not allowed)"
        )
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidSchedule(f"timezone: unknown IANA timezone {timezone!r}") from exc


def naive_wall(wall: int) -> datetime:
    """The naive datetime of a wall time given as seconds since 1970-01-01T00:00 (local)."""
    return _NAIVE_EPOCH + timedelta(seconds=wall)


def instant_seconds(moment: datetime) -> int:
    """Whole seconds since the epoch, rounded down (sub-second parts never round up)."""
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(seconds=1)


def utc_datetime(instant: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=instant)


def offset_at(zone: ZoneInfo, instant: int) -> int:
    """The zone's UTC offset in seconds at ``instant``."""
    offset = utc_datetime(instant).astimezone(zone).utcoffset()
    if offset is None:
        raise InvalidSchedule(f"timezone: {zone.key!r} has no UTC offset")
    return offset // timedelta(seconds=1)


def wall_offset(zone: ZoneInfo, wall: int) -> int:
    """The ``fold=0`` offset of a wall time: the only one, or the earlier instance's in a fold."""
    return _wall_offset_seconds(zone, naive_wall(wall))


class Segment(NamedTuple):
    """``[start, end)`` in UTC seconds with a constant ``offset_seconds``."""

    start: int
    end: int
    offset_seconds: int


class _YearTable(NamedTuple):
    start: int
    end: int
    start_offset: int
    transitions: tuple[int, ...]  # instants where the offset changes, ascending
    offsets: tuple[int, ...]  # the offset from each transition on


def segment_at(zone: ZoneInfo, instant: int) -> Segment:
    """The constant-offset segment containing ``instant`` (clipped to its UTC year)."""
    year = date.fromordinal(instant // SECONDS_PER_DAY + EPOCH_ORDINAL).year
    table = _year_table(zone, year)
    index = bisect_right(table.transitions, instant)
    if index == 0:
        start, offset = table.start, table.start_offset
    else:
        start, offset = table.transitions[index - 1], table.offsets[index - 1]
    end = table.transitions[index] if index < len(table.transitions) else table.end
    return Segment(start, end, offset)


@lru_cache(maxsize=4096)
def _year_table(zone: ZoneInfo, year: int) -> _YearTable:
    start = (date(year, 1, 1).toordinal() - EPOCH_ORDINAL) * SECONDS_PER_DAY
    end_ordinal = date(year + 1, 1, 1).toordinal() if year < 9999 else date.max.toordinal() + 1
    end = (end_ordinal - EPOCH_ORDINAL) * SECONDS_PER_DAY
    transitions: list[int] = []
    offsets: list[int] = []
    first_probe = datetime(year, 1, 1) - _PROBE_MARGIN if year > 1 else datetime(1, 1, 2)
    last_probe = datetime(year, 12, 31) + _PROBE_MARGIN if year < 9999 else datetime(9999, 12, 30)
    utcoffset = zone.utcoffset  # compared as timedeltas: the probe loop is the cost
    probe = first_probe
    before = utcoffset(probe)
    while probe < last_probe:
        following = probe + _PROBE_STEP
        if utcoffset(following) == before:
            probe = following
            continue
        change_wall = _first_wall_with_other_offset(zone, probe, following)
        old_seconds = _wall_offset_seconds(zone, probe)
        new_seconds = _wall_offset_seconds(zone, change_wall)
        # The fold=0 offset changes at wall time T + max(old, new) (see the module doc).
        instant = (change_wall - _NAIVE_EPOCH) // timedelta(seconds=1) - max(
            old_seconds, new_seconds
        )
        if start <= instant < end:
            _check_transition(zone, instant)
            transitions.append(instant)
            offsets.append(new_seconds)
        # Resume from the change itself, so a second change within the same day is still seen.
        probe = change_wall
        before = utcoffset(probe)
    start_offset = offset_at(zone, max(start, INSTANT_MIN))  # year 1 starts before INSTANT_MIN
    return _YearTable(start, end, start_offset, tuple(transitions), tuple(offsets))


def _wall_offset_seconds(zone: ZoneInfo, wall: datetime) -> int:
    offset = zone.utcoffset(wall)
    if offset is None:
        raise InvalidSchedule(f"timezone: {zone.key!r} has no UTC offset")
    return offset // timedelta(seconds=1)


def _first_wall_with_other_offset(zone: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """Bisect the first wall second in ``(low, high]`` whose offset differs from ``low``'s."""
    one = timedelta(seconds=1)
    original = zone.utcoffset(low)
    while high - low > one:
        middle = low + (high - low) // 2
        middle -= timedelta(microseconds=middle.microsecond)
        if zone.utcoffset(middle) == original:
            low = middle
        else:
            high = middle
    return high


def _check_transition(zone: ZoneInfo, instant: int) -> None:
    if offset_at(zone, instant - 1) == offset_at(zone, instant):
        raise InvalidSchedule(
            f"timezone: could not locate a UTC offset change of {zone.key!r} near {instant}"
        )
