"""Per-schedule history and one occurrence's detail, read from the replicated state.

History is replicated state, not process memory: each occurrence record keeps its due time, its
transition timeline (state, instant, attempt, reason — the last ``TIMELINE_ENTRIES_MAX`` moves),
its attempt, the worker's execution id and the failure reason; each schedule's progress keeps the
dropped-slot counters by reason and the last ``RECENT_DROPS_MAX`` drop events. Any voter therefore
answers the same history for the same applied index, and a new owner after failover shows what the
old one decided. These functions only shape that state for operators (instants as RFC 3339, the
definition's source replaced by its size and digest, as in every remote reply).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from appliance.config.rfc3339 import format_utc
from appliance.core import state as core
from appliance.core.definition import definition_to_json
from appliance.core.occurrence import Occurrence
from appliance.protocol.v1 import payload_sha256


def rfc3339(instant_s: int | None) -> str | None:
    if instant_s is None:
        return None
    return format_utc(datetime.fromtimestamp(instant_s, UTC))


def _jittered_start_s(record: Occurrence) -> int | None:
    """When a jittered record may start (or started): its wait, or its ``jitter_due`` entry."""
    if record.retry_waiting and record.retries_used == 0:
        return record.not_before_s
    for entry in record.timeline:
        if entry.reason == "jitter_due":
            return entry.at_s
    return None


def occurrence_detail(record: Occurrence) -> dict[str, Any]:
    """One record for operators: every field of the checkpoint record, instants readable."""
    return {
        "id": record.id,
        "schedule_id": record.schedule_id,
        "state": record.state.value,
        "due": record.due_s,
        "due_at": rfc3339(record.due_s),
        # A jittered slot's start (policy.jitter_seconds): the due time stays the slot.
        "starts_at": rfc3339(_jittered_start_s(record)),
        "attempt": record.attempt,
        "retries_used": record.retries_used,
        "not_before_at": rfc3339(record.not_before_s),
        "execution_id": record.execution_id,
        "failure_reason": record.failure_reason,
        "timeline": [
            {
                "state": entry.state.value,
                "at": rfc3339(entry.at_s),
                "attempt": entry.attempt,
                "reason": entry.reason,
            }
            for entry in record.timeline
        ],
    }


def _definition_summary(schedule: core.Schedule) -> dict[str, Any]:
    value = definition_to_json(schedule.definition)
    code = value.pop("code")
    value["code_bytes"] = len(code.encode("utf-8", "surrogatepass"))
    value["code_sha256"] = payload_sha256(code)
    return value


def drops_view(progress: core.Progress) -> dict[str, Any]:
    return {
        "cursor_at": rfc3339(progress.cursor_s),
        "dropped": {
            reason.value: count
            for reason, count in zip(core.DROP_REASONS, progress.dropped, strict=True)
        },
        "recent_drops": [
            {"at": rfc3339(event.at_s), "reason": event.reason.value, "count": event.count}
            for event in progress.recent
        ],
    }


def schedule_history(st: core.SchedulerState, schedule_id: int) -> dict[str, Any] | None:
    """A schedule's definition summary, drop counters, recent drops and retained occurrences.

    None when the schedule does not exist (deleted schedules' occurrences are still listed by
    ``list``; their history keeps them by ``schedule_id``).
    """
    schedule = st.schedules.get(schedule_id)
    if schedule is None:
        return None
    occurrences = [
        occurrence_detail(record)
        for oid, record in sorted(st.occurrences.items())
        if record.schedule_id == schedule_id
    ]
    return {
        "schedule": {
            "id": schedule.id,
            "enabled": schedule.enabled,
            "created_at": rfc3339(schedule.created_at_s),
            "definition": _definition_summary(schedule),
            # What ``update`` changed, newest last (docs/policies.md, "update").
            "changes": [
                {
                    "at": rfc3339(c.at_s),
                    "fields": list(c.fields),
                    "payload_sha256": c.payload_sha256,
                }
                for c in schedule.changes
            ],
        },
        **drops_view(st.progress[schedule_id]),
        "counts": st.schedule_counts(schedule_id),
        "occurrences": occurrences,
    }


def occurrence_view(st: core.SchedulerState, occurrence_id: int) -> dict[str, Any] | None:
    record = st.occurrences.get(occurrence_id)
    if record is None:
        return None
    schedule = st.schedules.get(record.schedule_id)
    detail = occurrence_detail(record)
    detail["schedule_name"] = None if schedule is None else schedule.definition.name
    detail["schedule_deleted"] = schedule is None
    # The worker its latest claim binds (issue 33: a fleet places each attempt).
    admission = core.admission_record(st, occurrence_id)
    claim = None if admission is None else admission.claim
    detail["worker_id"] = None if claim is None else claim.worker_id
    return detail
