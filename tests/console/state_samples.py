"""Replicated states for the console's tests, built with the core's own commands."""

from __future__ import annotations

from typing import Any

from appliance.core import state as core
from appliance.core.definition import parse_definition
from appliance.core.limits import Limits
from appliance.core.occurrence import Occurrence, OccurrenceState, TimelineEntry

S = OccurrenceState
T0 = 1_800_000_000  # 2027-01-15T08:00:00Z


def definition(name: str | None, cron: str = "* * * * *", **policy: Any) -> Any:
    document: dict[str, Any] = {
        "code": f"console.log({name!r})",
        "cron": cron,
        "timezone": "UTC",
        "policy": {
            "missed": "Skip",
            "overlap": "Concurrent",
            "retry": {"max_retries": 0, "delay_seconds": 0},
            **policy,
        },
    }
    if name is not None:
        document["name"] = name
    return parse_definition(document, Limits(schedules=1024, records=65536, outstanding=65536))


def state_with(schedules: int, limits: Limits | None = None) -> core.SchedulerState:
    st = core.SchedulerState(limits or Limits(schedules=1024, records=65536, outstanding=65536))
    for i in range(schedules):
        core.apply(st, core.CreateSchedule(definition(f"job-{i:04d}"), T0))
    return st


def finished(oid: int, sid: int, due_s: int, ran_s: int, ended_s: int, state: S) -> Occurrence:
    """A terminal record whose timeline says when it started and ended (attempt 1)."""
    return Occurrence(
        oid,
        sid,
        due_s,
        state,
        timeline=(
            TimelineEntry(S.PENDING, due_s, 1, "created"),
            TimelineEntry(S.RUNNING, ran_s, 1, "claim"),
            TimelineEntry(state, ended_s, 1, "completed"),
        ),
    )
