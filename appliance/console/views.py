"""What each console page shows, shaped from the replicated state (pure functions, no I/O).

Theory of operation. Like ``list`` and the management detail routes, the console reads this
voter's applied state (a local view: it may lag the owner by the entries not yet applied here).
``snapshot`` takes references to the immutable records under the machine's lock and every
function below works on that snapshot afterwards, so a page never holds the lock while it is
rendered. Instants stay whole seconds (``_s``) here; templates print them as RFC 3339 in UTC
inside ``<time>`` elements, which the browser's script shows in its own zone and relative to now.

Durations and start lateness for the chart come from each record's replicated timeline (whole
seconds, the instants the owner committed): lateness is the first ``Running`` of the last
attempt minus the slot's start (its jittered start when it had one, else its due time);
duration is the terminal instant minus that ``Running``. They are what the cluster decided,
not the engine's own milliseconds (those are on the occurrence page, fetched from the worker).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

from appliance.config.rfc3339 import format_utc
from appliance.core import state as core
from appliance.core.calendar import CompiledSchedule, compile_schedule
from appliance.core.definition import definition_to_json
from appliance.core.errors import InvalidSchedule
from appliance.core.jitter import jittered_instant_s
from appliance.core.occurrence import Occurrence, OccurrenceState

S = OccurrenceState
PAGE_ROWS: Final = 50
SORT_KEYS: Final = ("id", "name", "cron", "timezone", "next", "last", "state")
UPCOMING_SHOWN: Final = 8
HISTORY_SHOWN: Final = 100
CHART_RUNS_MAX: Final = 60
COMPILED_CACHE_MAX: Final = 4096


def rfc3339(instant_s: int | float | None) -> str | None:
    if instant_s is None:
        return None
    return format_utc(datetime.fromtimestamp(int(instant_s), UTC))


class Snapshot(NamedTuple):
    """References taken under the machine's lock; every value in them is immutable."""

    schedules: dict[int, core.Schedule]
    progress: dict[int, core.Progress]
    occurrences: dict[int, Occurrence]
    paused_since_s: int | None
    counts: Any


def snapshot(st: core.SchedulerState) -> Snapshot:
    """Run under ``machine.read``: copies of the dicts, nothing rendered."""
    paused = st.extra.get("paused")
    return Snapshot(
        dict(st.schedules),
        dict(st.progress),
        dict(st.occurrences),
        None if paused is None else int(paused["at"]),
        st.counts(),
    )


class Calendars:
    """Compiled calendars by (cron, timezone), bounded; shared by the pages (thread-safe enough:
    a race compiles twice and keeps one)."""

    def __init__(self, size_max: int = COMPILED_CACHE_MAX) -> None:
        self._compiled: dict[tuple[str, str], CompiledSchedule | None] = {}
        self._next: dict[tuple[str, str], tuple[int, int]] = {}  # key -> (after_s, next_s)
        self._size_max = size_max

    def compiled(self, cron: str, timezone: str) -> CompiledSchedule | None:
        key = (cron, timezone)
        if key not in self._compiled:
            if len(self._compiled) >= self._size_max:
                self._compiled.clear()
                self._next.clear()
            try:
                self._compiled[key] = compile_schedule(cron, timezone)
            except (InvalidSchedule, ValueError):
                self._compiled[key] = None
        return self._compiled[key]

    def next_after(self, cron: str, timezone: str, after_s: int) -> int | None:
        """The first slot strictly after ``after_s``; remembered until that slot passes."""
        key = (cron, timezone)
        known = self._next.get(key)
        if known is not None and known[0] <= after_s < known[1]:
            return known[1]
        compiled = self.compiled(cron, timezone)
        if compiled is None:
            return None
        next_s = int(compiled.next_after(datetime.fromtimestamp(after_s, UTC)).timestamp())
        self._next[key] = (after_s, next_s)
        return next_s


# ---- the schedules page ------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleRow:
    id: int
    name: str | None
    cron: str
    timezone: str
    enabled: bool
    next_s: int | None
    last_state: str | None
    last_due_s: int | None
    active: int
    succeeded: int
    failed: int

    @property
    def status(self) -> str:
        return "enabled" if self.enabled else "disabled"


def last_outcomes(occurrences: dict[int, Occurrence]) -> dict[int, Occurrence]:
    """Per schedule, its newest retained occurrence that is no longer live."""
    last: dict[int, Occurrence] = {}
    for record in occurrences.values():
        if not record.terminal and record.state is not S.UNKNOWN:
            continue
        known = last.get(record.schedule_id)
        if known is None or (record.due_s, record.id) > (known.due_s, known.id):
            last[record.schedule_id] = record
    return last


def schedule_rows(snap: Snapshot, now_s: float, calendars: Calendars) -> list[ScheduleRow]:
    last = last_outcomes(snap.occurrences)
    tallies: dict[int, list[int]] = {}
    for record in snap.occurrences.values():
        tally = tallies.setdefault(record.schedule_id, [0, 0, 0])
        if not record.terminal:
            tally[0] += 1
        elif record.state is S.SUCCEEDED:
            tally[1] += 1
        elif record.state is S.FAILED:
            tally[2] += 1
    rows = []
    for sid, schedule in snap.schedules.items():
        definition = schedule.definition
        progress = snap.progress.get(sid)
        after_s = int(max(now_s, progress.cursor_s if progress is not None else 0))
        next_s = (
            calendars.next_after(definition.cron, definition.timezone, after_s)
            if schedule.enabled
            else None
        )
        outcome = last.get(sid)
        active, succeeded, failed = tallies.get(sid, (0, 0, 0))
        rows.append(
            ScheduleRow(
                sid,
                definition.name,
                definition.cron,
                definition.timezone,
                schedule.enabled,
                next_s,
                None if outcome is None else outcome.state.value,
                None if outcome is None else outcome.due_s,
                active,
                succeeded,
                failed,
            )
        )
    return rows


_NONE_LAST: Final = (1, "")


def _sort_key(key: str) -> Callable[[ScheduleRow], Any]:
    keys: dict[str, Callable[[ScheduleRow], Any]] = {
        "id": lambda r: r.id,
        "name": lambda r: ((r.name or "").casefold(), r.id),
        "cron": lambda r: (r.cron, r.id),
        "timezone": lambda r: (r.timezone, r.id),
        # A disabled schedule (no next run) sorts after every scheduled one.
        "next": lambda r: (r.next_s is None, r.next_s or 0, r.id),
        "last": lambda r: (r.last_state is None, r.last_state or "", r.id),
        "state": lambda r: (r.status, r.id),
    }
    return keys[key]


@dataclass(frozen=True)
class PageOf:
    rows: Sequence[ScheduleRow]
    page: int
    pages: int
    total: int
    sort: str
    order: str


def sorted_page(rows: list[ScheduleRow], sort: str, order: str, page: int) -> PageOf:
    """``rows`` sorted by ``sort`` (one of ``SORT_KEYS``), ``order`` asc/desc, page ``page``
    (1-based, clamped into range)."""
    if sort not in SORT_KEYS:
        raise ValueError(f"sort: must be one of {', '.join(SORT_KEYS)}")
    if order not in ("asc", "desc"):
        raise ValueError("order: must be asc or desc")
    ordered = sorted(rows, key=_sort_key(sort), reverse=order == "desc")
    pages = max(1, -(-len(ordered) // PAGE_ROWS))
    page = min(max(1, page), pages)
    start = (page - 1) * PAGE_ROWS
    return PageOf(ordered[start : start + PAGE_ROWS], page, pages, len(ordered), sort, order)


# ---- one schedule ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Upcoming:
    due_s: int
    start_s: int  # the jittered start (equal to due_s without jitter)


def upcoming_runs(
    schedule: core.Schedule, after_s: int, calendars: Calendars, count: int = UPCOMING_SHOWN
) -> list[Upcoming]:
    """The next ``count`` slots strictly after ``after_s`` with their jittered starts (the
    same pure function the owner uses: appliance/core/jitter.py)."""
    definition = schedule.definition
    compiled = calendars.compiled(definition.cron, definition.timezone)
    if compiled is None:
        return []
    after = datetime.fromtimestamp(after_s, UTC)
    slots = [int(t.timestamp()) for t in compiled.next_fire_times(after, count + 1)]
    jitter = definition.policy.jitter_seconds
    out = []
    for slot_s, following_s in itertools.pairwise(slots):
        start_s = jittered_instant_s(schedule.id, slot_s, jitter, following_s) if jitter else slot_s
        out.append(Upcoming(slot_s, start_s))
    return out


def _first_running_s(record: Occurrence) -> int | None:
    for entry in record.timeline:
        if entry.state is S.RUNNING and entry.attempt == record.attempt:
            return entry.at_s
    return None


def _planned_start_s(record: Occurrence) -> int:
    for entry in record.timeline:
        if entry.reason == "jitter_due":
            return entry.at_s
    return record.due_s


@dataclass(frozen=True)
class RunPoint:
    occurrence_id: int
    due_s: int
    state: str
    duration_s: int | None
    lateness_s: int | None


def run_points(records: Sequence[Occurrence], count: int = CHART_RUNS_MAX) -> list[RunPoint]:
    """Duration and start lateness of the newest ``count`` finished runs, oldest first."""
    finished = [r for r in records if r.terminal and _first_running_s(r) is not None]
    finished.sort(key=lambda r: (r.due_s, r.id))
    points = []
    for record in finished[-count:]:
        started_s = _first_running_s(record)
        ended_s = record.timeline[-1].at_s if record.timeline else None
        duration_s = None if started_s is None or ended_s is None else max(0, ended_s - started_s)
        lateness_s = None if started_s is None else max(0, started_s - _planned_start_s(record))
        points.append(RunPoint(record.id, record.due_s, record.state.value, duration_s, lateness_s))
    return points


@dataclass(frozen=True)
class ScheduleDetail:
    schedule: core.Schedule
    definition: dict[str, Any]  # the whole definition, code included
    progress: core.Progress | None
    upcoming: list[Upcoming]
    history: list[Occurrence]  # newest first, at most HISTORY_SHOWN
    history_total: int
    points: list[RunPoint]
    paused: bool


def schedule_detail(
    snap: Snapshot, schedule_id: int, now_s: float, calendars: Calendars
) -> ScheduleDetail | None:
    schedule = snap.schedules.get(schedule_id)
    if schedule is None:
        return None
    progress = snap.progress.get(schedule_id)
    after_s = int(max(now_s, progress.cursor_s if progress is not None else 0))
    mine = [r for r in snap.occurrences.values() if r.schedule_id == schedule_id]
    newest = sorted(mine, key=lambda r: (r.due_s, r.id), reverse=True)
    return ScheduleDetail(
        schedule,
        definition_to_json(schedule.definition),
        progress,
        upcoming_runs(schedule, after_s, calendars) if schedule.enabled else [],
        newest[:HISTORY_SHOWN],
        len(newest),
        run_points(mine),
        snap.paused_since_s is not None,
    )


def drop_rows(progress: core.Progress | None) -> list[tuple[str, int]]:
    if progress is None:
        return []
    return [
        (reason.value, count)
        for reason, count in zip(core.DROP_REASONS, progress.dropped, strict=True)
    ]


# ---- the overview ------------------------------------------------------------------------------


def unknown_ids(snap: Snapshot) -> list[int]:
    return sorted(oid for oid, r in snap.occurrences.items() if r.state is S.UNKNOWN)


def recent_occurrences(snap: Snapshot, count: int = 20) -> list[Occurrence]:
    newest = sorted(snap.occurrences.values(), key=lambda r: r.id, reverse=True)
    return newest[:count]
