"""One schedule as ``appliance admin describe`` shows it: everything, its code included.

Theory of operation (issue 35, item 1; ``kubectl get -o yaml``, ``temporal schedule describe``):
the whole definition as committed (the code too: this is the one read that returns it, to the
operator's own loopback credential; ``list`` and ``history`` keep giving only its size and
SHA-256), whether it is enabled and whether scheduling is paused, its next runs computed from the
calendar after the later of now and its cursor (with the jittered start of each, the same pure
function the owner uses, ``core/jitter.py``), its newest finished occurrences with their outcome,
the live ones, its counters and what ``update`` changed. A pure function of the replicated state
and an instant: any voter answers the same for the same applied index (a local view).
"""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime
from typing import Any, Final

from appliance.core import state as core
from appliance.core.calendar import compile_schedule
from appliance.core.definition import definition_to_json
from appliance.core.errors import CoreError
from appliance.core.jitter import jittered_instant_s
from appliance.core.occurrence import OccurrenceState
from appliance.metrics.history import drops_view, occurrence_detail, rfc3339

NEXT_RUNS_SHOWN: Final = 5
LAST_OUTCOMES_SHOWN: Final = 5
LIVE: Final = frozenset(
    {OccurrenceState.PENDING, OccurrenceState.RUNNING, OccurrenceState.CANCELLING}
)


def next_runs(schedule: core.Schedule, cursor_s: int, now_s: float, count: int) -> list[dict]:
    """The next ``count`` slots after max(now, cursor), each with its jittered start."""
    definition = schedule.definition
    try:
        compiled = compile_schedule(definition.cron, definition.timezone)
        after = datetime.fromtimestamp(max(int(now_s), cursor_s), UTC)
        slots = [int(t.timestamp()) for t in compiled.next_fire_times(after, count + 1)]
    except (CoreError, ValueError):
        return []
    jitter = definition.policy.jitter_seconds
    runs = []
    for slot, following in itertools.pairwise(slots):
        start = jittered_instant_s(schedule.id, slot, jitter, following) if jitter else slot
        runs.append({"slot": rfc3339(slot), "starts_at": rfc3339(start)})
    return runs


def describe_schedule(
    st: core.SchedulerState, schedule_id: int, now_s: float
) -> dict[str, Any] | None:
    """The describe document of one live schedule (None when there is no such schedule)."""
    schedule = st.schedules.get(schedule_id)
    if schedule is None:
        return None
    progress = st.progress[schedule_id]
    definition = definition_to_json(schedule.definition)
    code = schedule.definition.code.encode("utf-8", "surrogatepass")
    mine = [r for _, r in sorted(st.occurrences.items()) if r.schedule_id == schedule_id]
    finished = [r for r in mine if r.state not in LIVE]
    paused_s = core.paused_since(st)
    upcoming = next_runs(schedule, progress.cursor_s, now_s, NEXT_RUNS_SHOWN)
    return {
        "schedule": {
            "id": schedule.id,
            "enabled": schedule.enabled,
            "created_at": rfc3339(schedule.created_at_s),
            "definition": definition,
            "code_bytes": len(code),
            "code_sha256": hashlib.sha256(code).hexdigest(),
            "changes": [
                {"at": rfc3339(c.at_s), "fields": list(c.fields), "payload_sha256": sha}
                for c in schedule.changes
                for sha in (c.payload_sha256,)
            ],
        },
        "paused": None if paused_s is None else {"since": rfc3339(paused_s)},
        # Nothing starts while disabled; while paused the runs are held until resume.
        "next_runs": upcoming if schedule.enabled else [],
        "next_runs_held": paused_s is not None and schedule.enabled,
        "last_outcomes": [occurrence_detail(r) for r in finished[-LAST_OUTCOMES_SHOWN:]][::-1],
        "live": [occurrence_detail(r) for r in mine if r.state in LIVE],
        "counts": st.schedule_counts(schedule_id),
        **drops_view(progress),
    }
