"""The tables of ``appliance admin list`` and ``list occurrences``, from the ``list`` reply.

``list`` is a stale local view (seeds/001); these functions only shape it. Per schedule: its
next run (computed here from the definition's cron and timezone, strictly after the later of
now and the schedule's observed cursor; ``disabled`` when disabled), its last outcome (the
newest retained occurrence that is no longer live) and counts (active = not yet terminal, and
the retained Succeeded/Failed). Per occurrence: due time, state, attempt and a note (its
timeline is in ``history``) — ``retrying at T (attempt 2 of 3)`` for a retry, the failure reason,
or what an Unknown occurrence waits for. Every time is ISO 8601 in the ``--tz`` zone; every cell
is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from typing import Any, Final

from appliance.cli.admin_text import Column, escape, fit_table, iso_time, relative_time
from appliance.core.calendar import compile_schedule
from appliance.core.errors import InvalidSchedule
from appliance.owner.report_text import retry_note

LIVE_STATES: Final = frozenset({"Pending", "Running", "Cancelling"})
STATES: Final = (
    "Pending", "Running", "Cancelling", "Cancelled", "Succeeded", "Failed", "Unknown", "Abandoned"
)  # fmt: skip
LIMIT_DEFAULT: Final = 20

SCHEDULE_COLUMNS: Final = (
    Column("id", "ID", right=True),
    Column("name", "NAME", shrink=True),
    Column("cron", "CRON", shrink=True),
    Column("timezone", "TIMEZONE", shrink=True),
    Column("next", "NEXT RUN"),
    Column("last", "LAST", shrink=True),
    Column("active", "ACTIVE", right=True),
    Column("ok", "OK", right=True),
    Column("failed", "FAILED", right=True),
)
OCCURRENCE_COLUMNS: Final = (
    Column("id", "ID", right=True),
    Column("schedule", "SCHED", right=True),
    Column("due", "DUE"),
    Column("state", "STATE"),
    Column("attempt", "TRY", right=True),
    Column("note", "NOTE", wrap=True),
)


def _definition(schedule: Mapping[str, Any]) -> Mapping[str, Any]:
    value = schedule.get("definition")
    return value if isinstance(value, Mapping) else {}


def next_run(schedule: Mapping[str, Any], now_s: float) -> datetime | None:
    """The schedule's next calendar slot after max(now, cursor); None when it has none."""
    definition = _definition(schedule)
    try:
        compiled = compile_schedule(str(definition.get("cron")), str(definition.get("timezone")))
    except (InvalidSchedule, ValueError):
        return None
    cursor = schedule.get("cursor")
    after_s = max(now_s, cursor if isinstance(cursor, int | float) else 0)
    return compiled.next_after(datetime.fromtimestamp(int(after_s), UTC))


def _when(value: Any, now_s: float, tz: tzinfo, relative: bool) -> str:
    return relative_time(value, now_s) if relative else iso_time(value, tz)


def schedule_rows(
    result: Mapping[str, Any], now_s: float, tz: tzinfo = UTC, relative: bool = False
) -> list[dict[str, Any]]:
    """One row per schedule; while scheduling is paused every next run is marked ``(held)``."""
    held = result.get("paused") is not None
    occurrences = [o for o in result.get("occurrences") or [] if isinstance(o, Mapping)]
    rows = []
    for schedule in result.get("schedules") or []:
        if not isinstance(schedule, Mapping):
            continue
        sid = schedule.get("id")
        mine = [o for o in occurrences if o.get("schedule_id") == sid]
        done = [o for o in mine if o.get("state") not in LIVE_STATES]
        last = max(done, key=lambda o: (o.get("due") or 0, o.get("id") or 0), default=None)
        definition = _definition(schedule)
        if schedule.get("enabled") is False:
            upcoming = "disabled"
        else:
            moment = next_run(schedule, now_s)
            upcoming = "none" if moment is None else _when(moment.timestamp(), now_s, tz, relative)
            if held:
                upcoming += " (held)"
        rows.append(
            {
                "id": sid,
                "name": definition.get("name"),
                "cron": definition.get("cron"),
                "timezone": definition.get("timezone"),
                "next": upcoming,
                "last": None if last is None else last.get("state"),
                "active": sum(1 for o in mine if o.get("state") in LIVE_STATES | {"Unknown"}),
                "ok": sum(1 for o in mine if o.get("state") == "Succeeded"),
                "failed": sum(1 for o in mine if o.get("state") == "Failed"),
            }
        )
    return rows


def _max_retries(schedules: Sequence[Any], schedule_id: Any) -> int | None:
    for schedule in schedules:
        if isinstance(schedule, Mapping) and schedule.get("id") == schedule_id:
            retry = (_definition(schedule).get("policy") or {}).get("retry") or {}
            value = retry.get("max_retries")
            return value if isinstance(value, int) else None
    return None


def occurrence_note(
    occurrence: Mapping[str, Any], max_retries: int | None, tz: tzinfo = UTC
) -> str | None:
    not_before = occurrence.get("not_before", occurrence.get("not_before_at"))
    when = None if not_before is None else iso_time(not_before, tz)
    retry = retry_note(occurrence, max_retries, when)
    if retry is not None:
        return retry
    state = occurrence.get("state")
    if state == "Unknown":
        return "outcome unknown; acknowledge-stopped once the work is known stopped"
    if state == "Cancelling":
        return "cancel requested; awaiting the engine's confirmed stop"
    return occurrence.get("failure_reason")


def matching_occurrences(
    result: Mapping[str, Any], schedule: int | None = None, state: str | None = None
) -> list[Mapping[str, Any]]:
    """The occurrences of ``schedule`` in ``state`` (None: any), by id."""
    matching = [
        o
        for o in result.get("occurrences") or []
        if isinstance(o, Mapping)
        and (schedule is None or o.get("schedule_id") == schedule)
        and (state is None or o.get("state") == state)
    ]
    matching.sort(key=lambda o: o.get("id") or 0)
    return matching


def filtered_list(
    result: Mapping[str, Any],
    *,
    what: str = "schedules",
    schedule: int | None = None,
    state: str | None = None,
    limit: int = LIMIT_DEFAULT,
) -> dict[str, Any]:
    """``list``'s result with the table's filters applied (``--json`` prints this): the schedules
    of ``--schedule``, and for ``list occurrences`` the newest ``limit`` that match."""
    out = dict(result)
    if schedule is not None:
        out["schedules"] = [
            s for s in result.get("schedules") or [] if isinstance(s, Mapping)
            and s.get("id") == schedule
        ]  # fmt: skip
    matching = matching_occurrences(result, schedule, state)
    if what == "occurrences":
        out["occurrences"] = matching[-limit:] if limit > 0 else []
        out["matched"] = len(matching)
    elif schedule is not None or state is not None:
        out["occurrences"] = matching
    return out


def occurrence_rows(
    result: Mapping[str, Any],
    *,
    schedule: int | None = None,
    state: str | None = None,
    limit: int = LIMIT_DEFAULT,
    tz: tzinfo = UTC,
    now_s: float | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """The newest ``limit`` occurrences that match, oldest first; and how many matched. With
    ``now_s`` the due times are relative to it (``3m ago``)."""
    schedules = result.get("schedules") or []
    matching = matching_occurrences(result, schedule, state)
    shown = matching[-limit:] if limit > 0 else []
    relative = now_s is not None
    rows = [
        {
            "id": o.get("id"),
            "schedule": o.get("schedule_id"),
            "due": _when(o.get("due"), now_s or 0.0, tz, relative),
            "state": o.get("state"),
            "attempt": o.get("attempt"),
            "note": occurrence_note(o, _max_retries(schedules, o.get("schedule_id")), tz),
        }
        for o in shown
    ]
    return rows, len(matching)


def fleet_line(result: Mapping[str, Any]) -> str:
    """``workers: w1 (active, zone=a), w2 (draining)`` and a newline, or nothing (issue 33)."""
    fleet = result.get("fleet")
    if not isinstance(fleet, list) or not fleet:
        return ""
    shown = []
    for worker in fleet:
        if not isinstance(worker, Mapping):
            continue
        labels = worker.get("labels") if isinstance(worker.get("labels"), Mapping) else {}
        notes = [str(worker.get("state", "?")), *(f"{k}={v}" for k, v in labels.items())]
        shown.append(f"{worker.get('worker_id')} ({', '.join(notes)})")
    return f"workers: {', '.join(shown)}\n"


def paused_line(result: Mapping[str, Any], tz: tzinfo = UTC) -> str | None:
    paused = result.get("paused")
    if not isinstance(paused, Mapping):
        return None
    return (
        f"scheduling is PAUSED since {iso_time(paused.get('at'), tz)}: the next runs below are "
        "held, nothing starts until 'appliance admin resume'"
    )


def render_schedules(
    result: Mapping[str, Any], now_s: float, tz: tzinfo = UTC, relative: bool = False
) -> str:
    rows = schedule_rows(result, now_s, tz, relative)
    counts = result.get("counts") if isinstance(result.get("counts"), Mapping) else {}
    by_state = counts.get("by_state") if isinstance(counts.get("by_state"), Mapping) else {}
    summary = ", ".join(f"{state} {n}" for state, n in by_state.items() if n) or "none"
    paused = paused_line(result, tz)
    return (
        (f"{escape(paused)}\n\n" if paused else "") + f"{fit_table(rows, SCHEDULE_COLUMNS)}\n\n"
        f"occurrences retained: {counts.get('records', 0)} ({summary})\n"
        f"{fleet_line(result)}"
        "details: appliance admin list occurrences [--schedule ID] [--state STATE]\n"
        "(a stale local view of this voter's replica; it may lag the acquired owner)"
    )


def render_occurrences(
    result: Mapping[str, Any],
    *,
    schedule: int | None = None,
    state: str | None = None,
    limit: int = LIMIT_DEFAULT,
    tz: tzinfo = UTC,
    now_s: float | None = None,
) -> str:
    rows, matched = occurrence_rows(
        result, schedule=schedule, state=state, limit=limit, tz=tz, now_s=now_s
    )
    more = (
        f"showing the newest {len(rows)} of {matched} (--limit N for more)"
        if matched > len(rows)
        else f"{matched} occurrence(s)"
    )
    return (
        f"{fit_table(rows, OCCURRENCE_COLUMNS)}\n\n{more}\n"
        "(a stale local view of this voter's replica; it may lag the acquired owner)"
    )
