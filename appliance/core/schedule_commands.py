"""The operator's schedule commands beyond the seeds: enable, update, run_now and backfill.

Theory of operation
-------------------
Each is a core command like ``disable`` (SPEC §11): a frozen dataclass whose apply works on the
``Txn`` (all or nothing), checks its preconditions at apply time, and reads no clock or calendar:
the instants and the calendar's answers (slots skipped, slots to backfill) are computed by the
owner (``command_plans.py``) and carried in the command (SPEC §2). None turns an Unknown into a
retry: they create new occurrences or change definitions, never an existing attempt.

* ``EnableSchedule`` is the inverse of ``DisableSchedule``. Without ``catch_up`` the cursor moves
  to the enabling instant (no backlog; the skipped slots count as ``missed``); with it the cursor
  stays where the disable left it and the next observation applies the missed policy to the span.
* ``UpdateSchedule`` replaces the definition (future selection uses it from the current cursor)
  and records the change in the schedule's history; a live occurrence keeps its code
  (``live_code.py``).
* ``RunNow`` creates one occurrence due at the command's instant, through the schedule's overlap
  policy (Skip drops it while the schedule has live work) and the outstanding limit; the running
  limit then gates its claim like any other. An optional ``request_id`` is remembered in the
  ``run_requests`` part (the newest ``RUN_REQUESTS_MAX``), so a repeat gets the first answer.
* ``Backfill`` turns the given calendar slots (at or before the cursor: already consumed) that
  have no retained occurrence into occurrences, all of them or none (``OutstandingLimitReached`` /
  ``CheckpointFull`` refuse the whole command). :func:`preview_backfill` is the same apply on a
  transaction that is never committed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from appliance.core.canonical import canonical_json
from appliance.core.definition import Definition, OverlapPolicy, definition_to_json
from appliance.core.errors import CoreError
from appliance.core.live_code import KEPT_CODES_MAX, keep_current_code, needed_kept
from appliance.core.occurrence import INT_MAX, new_occurrence
from appliance.core.pause import (
    Skipped,
    _skipped_from_json,
    _skipped_to_json,
    check_skipped,
    skip_to,
)
from appliance.core.policy_apply import check_definition_limits
from appliance.core.serialisation import register_command_type
from appliance.core.state_errors import (
    CheckpointFull,
    InvalidCommand,
    OutstandingLimitReached,
    Paused,
)
from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import (
    DROP_REASONS,
    GROWTH_BYTES_MAX,
    PAUSED_PART,
    RECENT_DROPS_MAX,
    Change,
    DropEvent,
    DropReason,
    Progress,
    definition_from_checkpoint,
    register_part_kind,
)
from appliance.core.txn import Txn, _check_instant, register
from appliance.protocol.v1 import payload_sha256

UPDATE_FIELDS = ("code", "cron", "name", "placement", "policy", "timezone")
CHANGES_MAX = 8  # the newest changes kept in a schedule's history
RUN_REQUESTS_MAX = 64  # request ids remembered for a repeated run_now
REQUEST_ID_BYTES_MAX = 64
BACKFILL_SLOTS_MAX = 512  # slots one backfill may name (the owner refuses a larger range)
RUN_REQUESTS_PART = "run_requests"
_REQUEST_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-")

# ---- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnableSchedule:
    schedule_id: int
    at_s: int
    catch_up: bool = False
    skipped: tuple[Skipped, ...] = ()  # the owner's count of slots in (cursor, at_s]


@dataclass(frozen=True)
class UpdateSchedule:
    schedule_id: int
    definition: Definition  # the whole new definition, merged and validated by the owner
    fields: tuple[str, ...]  # which of UPDATE_FIELDS the operator gave
    at_s: int


@dataclass(frozen=True)
class RunNow:
    schedule_id: int
    at_s: int
    request_id: str | None = None


@dataclass(frozen=True)
class Backfill:
    schedule_id: int
    start_s: int
    end_s: int
    slots_s: tuple[int, ...]  # the calendar's slots in [start_s, end_s], computed by the owner
    overlap: str  # "Skip", "Queue" or "Concurrent": how the backfilled slots are admitted
    at_s: int


@dataclass(frozen=True)
class RunNowResult:
    """``occurrence_id`` if one was created, else ``reason`` (``overlap`` or ``capacity``);
    ``repeated`` when the request id had been seen (the first answer, unchanged)."""

    schedule_id: int
    occurrence_id: int | None
    reason: str | None
    repeated: bool = False


@dataclass(frozen=True)
class BackfillReport:
    created: tuple[tuple[int, int], ...]  # (occurrence id, slot)
    existing: tuple[int, ...]  # slots that have a retained occurrence already
    overlap: tuple[int, ...]  # slots dropped by the backfill's Skip


# ---- enable ------------------------------------------------------------------------------------


@register(EnableSchedule)
def _enable_schedule(txn: Txn, cmd: EnableSchedule) -> bool:
    _check_instant("at_s", cmd.at_s)
    if type(cmd.catch_up) is not bool:
        raise InvalidCommand("catch_up: must be true or false")
    counted = check_skipped(cmd.skipped)
    schedule = txn.require_schedule(cmd.schedule_id)
    if schedule.enabled:
        return False
    txn.put_schedule(replace(schedule, enabled=True))
    if not cmd.catch_up:
        skip_to(txn, schedule.id, cmd.at_s, counted.get(schedule.id))
    return True


# ---- update ------------------------------------------------------------------------------------


def _check_fields(fields: Any) -> None:
    if (
        not isinstance(fields, tuple)
        or not fields
        or list(fields) != sorted(set(fields))
        or not set(fields) <= set(UPDATE_FIELDS)
    ):
        raise InvalidCommand(f"fields: a sorted, non-empty set of {', '.join(UPDATE_FIELDS)}")


def changed_fields(before: Definition, after: Definition) -> tuple[str, ...]:
    """Which of ``UPDATE_FIELDS`` differ between two definitions (sorted)."""
    return tuple(f for f in UPDATE_FIELDS if getattr(before, f) != getattr(after, f))


@register(UpdateSchedule, grows=True)
def _update_schedule(txn: Txn, cmd: UpdateSchedule) -> tuple[str, ...]:
    """Replace the definition; the fields that changed (empty, and nothing written, when it is
    the same one). The result is the reply's, not replicated state."""
    _check_instant("at_s", cmd.at_s)
    if not isinstance(cmd.definition, Definition):
        raise InvalidCommand("definition: must be a parsed Definition")
    _check_fields(cmd.fields)
    check_definition_limits(txn, cmd.definition)
    schedule = txn.require_schedule(cmd.schedule_id)
    changed = changed_fields(schedule.definition, cmd.definition)
    if not changed:
        return ()
    if cmd.definition.code != schedule.definition.code:
        kept = keep_current_code(txn, schedule)
        if len(kept) > KEPT_CODES_MAX:
            raise InvalidCommand(
                f"code: schedule {schedule.id} already keeps {KEPT_CODES_MAX} older codes for "
                "live occurrences; update again once they end"
            )
    else:
        kept = needed_kept(txn, schedule)
    change = Change(cmd.at_s, cmd.fields, payload_sha256(cmd.definition.code))
    changes = (*schedule.changes, change)[-CHANGES_MAX:]
    txn.put_schedule(replace(schedule, definition=cmd.definition, kept=kept, changes=changes))
    return changed


# ---- creating occurrences ----------------------------------------------------------------------


def _refuse_if_paused(txn: Txn, what: str) -> None:
    if txn.extra(PAUSED_PART) is not None:
        raise Paused(f"{what}: scheduling is paused; resume first")


def _room_for_one(txn: Txn, schedule_id: int, due_s: int, at_s: int, created_by: str) -> str | None:
    """Why one more record cannot be created now (``outstanding`` or ``capacity``), or None."""
    if txn.outstanding >= txn.limits.outstanding:
        return "outstanding"
    budget = len("occurrence/") + len(str(txn.next_occurrence_id)) + 4
    # Charged by the checkpoint's charging rules, as the record _create adds will be.
    record = new_occurrence(txn.next_occurrence_id, schedule_id, due_s, at_s, None, created_by)
    budget += txn.new_record_charge(record)
    if not txn.make_room(budget, extra_records=1):
        return "capacity"
    return None


def _create(txn: Txn, schedule_id: int, due_s: int, at_s: int, created_by: str) -> int:
    occurrence_id = txn.next_occurrence_id
    if occurrence_id > INT_MAX:
        raise OutstandingLimitReached("occurrences: id space exhausted")
    txn.next_occurrence_id += 1
    txn.add_occurrence(new_occurrence(occurrence_id, schedule_id, due_s, at_s, None, created_by))
    return occurrence_id


def _count_drop(txn: Txn, schedule_id: int, reason: DropReason, count: int, at_s: int) -> None:
    progress = txn.progress(schedule_id)
    if progress is None or not count:
        return
    index = DROP_REASONS.index(reason)
    totals = tuple(
        min(n + count, INT_MAX) if i == index else n for i, n in enumerate(progress.dropped)
    )
    recent = (*progress.recent, DropEvent(at_s, reason, count))[-RECENT_DROPS_MAX:]
    txn.put_progress(schedule_id, Progress(progress.cursor_s, totals, recent))  # type: ignore[arg-type]


# ---- run_now -----------------------------------------------------------------------------------


def _check_request_id(value: Any) -> None:
    if value is None:
        return
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= REQUEST_ID_BYTES_MAX
        or not set(value) <= _REQUEST_ID_CHARS
    ):
        raise InvalidCommand(
            f"request_id: must be 1-{REQUEST_ID_BYTES_MAX} characters of A-Za-z0-9._:-"
        )


def _requests(txn: Txn) -> list[list[Any]]:
    value = txn.extra(RUN_REQUESTS_PART)
    return [] if value is None else value["requests"]


# The part's largest form: every entry with the longest id, ids and the longest reason.
RUN_REQUESTS_BYTES_MAX = len(
    canonical_json(
        {
            "requests": [["x" * REQUEST_ID_BYTES_MAX, INT_MAX, None, "outstanding"]]
            * RUN_REQUESTS_MAX
        }
    )
)
register_part_kind(RUN_REQUESTS_PART, lambda value: RUN_REQUESTS_BYTES_MAX)


@register(RunNow, grows=True)
def _run_now(txn: Txn, cmd: RunNow) -> RunNowResult:
    _check_instant("at_s", cmd.at_s)
    _check_request_id(cmd.request_id)
    schedule = txn.require_schedule(cmd.schedule_id)
    requests = _requests(txn)
    if cmd.request_id is not None:
        for request_id, schedule_id, occurrence_id, reason in requests:
            if request_id == cmd.request_id:
                if schedule_id != schedule.id:
                    raise InvalidCommand(
                        f"request_id: {request_id!r} was used for schedule {schedule_id}"
                    )
                return RunNowResult(schedule_id, occurrence_id, reason, repeated=True)
    _refuse_if_paused(txn, "run_now")
    skip = schedule.definition.policy.overlap is OverlapPolicy.SKIP
    reason = (
        "overlap"
        if skip and txn.nonterminal(schedule.id)
        else _room_for_one(txn, schedule.id, cmd.at_s, cmd.at_s, "run_now")
    )
    occurrence_id = None
    if reason is None:
        occurrence_id = _create(txn, schedule.id, cmd.at_s, cmd.at_s, "run_now")
    else:
        drop = DropReason.OVERLAP if reason == "overlap" else DropReason.CAPACITY
        _count_drop(txn, schedule.id, drop, 1, cmd.at_s)
    if cmd.request_id is not None:
        entry = [cmd.request_id, schedule.id, occurrence_id, reason]
        txn.put_extra(RUN_REQUESTS_PART, {"requests": [*requests, entry][-RUN_REQUESTS_MAX:]})
    return RunNowResult(schedule.id, occurrence_id, reason)


# ---- backfill ----------------------------------------------------------------------------------


def _check_backfill(txn: Txn, cmd: Backfill) -> None:
    for field in ("start_s", "end_s", "at_s"):
        _check_instant(field, getattr(cmd, field))
    if cmd.start_s > cmd.end_s:
        raise InvalidCommand("start: must not be after end")
    if cmd.overlap not in {p.value for p in OverlapPolicy}:
        raise InvalidCommand('overlap: must be "Skip", "Queue" or "Concurrent"')
    if not isinstance(cmd.slots_s, tuple) or len(cmd.slots_s) > BACKFILL_SLOTS_MAX:
        raise InvalidCommand(f"slots_s: at most {BACKFILL_SLOTS_MAX} slots per backfill")
    previous = cmd.start_s - 1
    for slot in cmd.slots_s:
        _check_instant("slots_s", slot)
        if not previous < slot <= cmd.end_s:
            raise InvalidCommand("slots_s: must increase strictly within [start, end]")
        previous = slot


def _retained_slots(txn: Txn, schedule_id: int) -> set[int]:
    out = set()
    for oid in set(txn.state.occurrences) | set(txn._occ):
        record = txn.occurrence(oid)
        if record is not None and record.schedule_id == schedule_id:
            out.add(record.due_s)
    return out


@register(Backfill, grows=True)
def _backfill(txn: Txn, cmd: Backfill) -> BackfillReport:
    _check_backfill(txn, cmd)
    schedule = txn.require_schedule(cmd.schedule_id)
    _refuse_if_paused(txn, "backfill")
    progress = txn.progress(schedule.id)
    cursor_s = progress.cursor_s if progress is not None else 0
    if cmd.slots_s and cmd.slots_s[-1] > cursor_s:
        # A slot after the cursor is still to be observed: backfilling it would run it twice.
        raise InvalidCommand(
            f"end: slot {cmd.slots_s[-1]} is after schedule {schedule.id}'s cursor {cursor_s}; "
            "backfill only slots the schedule has passed"
        )
    retained = _retained_slots(txn, schedule.id)
    created: list[tuple[int, int]] = []
    existing: list[int] = []
    overlap: list[int] = []
    for slot in cmd.slots_s:
        if slot in retained:
            existing.append(slot)
            continue
        if cmd.overlap == OverlapPolicy.SKIP.value and txn.nonterminal(schedule.id):
            overlap.append(slot)
            continue
        why = _room_for_one(txn, schedule.id, slot, cmd.at_s, "backfill")
        if why is not None:
            limit = (
                f"limits.outstanding ({txn.limits.outstanding})"
                if why == "outstanding"
                else "the records limit or the checkpoint budget"
            )
            raise OutstandingLimitReached(
                f"backfill: {len(created)} of the slots fit before {limit}; "
                "nothing was created (narrow the range or wait for work to end)"
            )
        created.append((_create(txn, schedule.id, slot, cmd.at_s, "backfill"), slot))
    _count_drop(txn, schedule.id, DropReason.OVERLAP, len(overlap), cmd.at_s)
    return BackfillReport(tuple(created), tuple(existing), tuple(overlap))


def preview_backfill(state: SchedulerState, cmd: Backfill) -> BackfillReport | CoreError:
    """What ``cmd`` would create now, without creating it: its apply on a transaction that is
    never committed (the growth-budget check of the commit included)."""
    txn = Txn(state)
    try:
        report = _backfill(txn, cmd)
    except CoreError as err:
        return err
    if txn.budget_bytes > GROWTH_BYTES_MAX:
        return CheckpointFull("checkpoint: the backfill would pass the growth budget")
    return report


# ---- wire codecs -------------------------------------------------------------------------------


def _tuple_of_list(value: Any) -> tuple:
    if not isinstance(value, list):
        raise InvalidCommand("command: expected a list")
    return tuple(value)


register_command_type(EnableSchedule, {"skipped": (_skipped_to_json, _skipped_from_json)})
register_command_type(
    UpdateSchedule,
    {
        "definition": (definition_to_json, definition_from_checkpoint),
        "fields": (list, _tuple_of_list),
    },
)
register_command_type(RunNow)
register_command_type(Backfill, {"slots_s": (list, _tuple_of_list)})
