"""The owner's side of the operator commands: pure functions from the state and the calendar.

Theory of operation
-------------------
SPEC §2: every calendar result travels inside the command. These functions are what the owner
runs before proposing ``enable``, ``resume``, ``backfill`` or ``update`` (and what ``admin``
previews): they read the committed state and the compiled calendar, never a clock (the instant
is an argument) and never write. Replicas apply the commands without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from appliance.core.definition import definition_to_json, parse_definition
from appliance.core.jitter import jittered_instant_s
from appliance.core.limits import Limits
from appliance.core.pause import Resume, Skipped
from appliance.core.schedule_commands import (
    BACKFILL_SLOTS_MAX,
    UPDATE_FIELDS,
    Backfill,
    EnableSchedule,
    UpdateSchedule,
)
from appliance.core.selection import CompiledSchedule, next_after_s, to_datetime
from appliance.core.state_errors import InvalidCommand, UnknownSchedule
from appliance.core.state_model import SchedulerState


def count_skipped(compiled: CompiledSchedule, cursor_s: int, at_s: int) -> int:
    """Slots in ``(cursor_s, at_s]``: what moving the cursor to ``at_s`` skips (O(days))."""
    if at_s <= cursor_s:
        return 0
    return compiled.count_between(to_datetime(cursor_s), to_datetime(at_s))


def _skipped(
    state: SchedulerState, compiled: CompiledSchedule, schedule_id: int, at_s: int
) -> Skipped:
    cursor_s = state.progress[schedule_id].cursor_s
    return Skipped(schedule_id, cursor_s, count_skipped(compiled, cursor_s, at_s))


def _require(state: SchedulerState, schedule_id: int) -> None:
    if schedule_id not in state.schedules:
        raise UnknownSchedule(f"id: no schedule {schedule_id}")


def plan_enable(
    state: SchedulerState,
    compiled: CompiledSchedule,
    schedule_id: int,
    at_s: int,
    catch_up: bool = False,
) -> EnableSchedule:
    """``enable``: without catch_up it carries the count of the slots the cursor move skips."""
    _require(state, schedule_id)
    skipped = () if catch_up else (_skipped(state, compiled, schedule_id, at_s),)
    return EnableSchedule(schedule_id, at_s, catch_up, skipped)


def plan_resume(
    state: SchedulerState,
    compiled: Mapping[int, CompiledSchedule],
    at_s: int,
    catch_up: bool = False,
) -> Resume:
    """``resume``: without catch_up, each enabled schedule's count of the slots it skips."""
    if catch_up:
        return Resume(at_s, True, ())
    skipped = tuple(
        _skipped(state, compiled[sid], sid, at_s)
        for sid in sorted(state.schedules)
        if state.schedules[sid].enabled and sid in compiled
    )
    return Resume(at_s, False, skipped)


def backfill_slots(
    compiled: CompiledSchedule, start_s: int, end_s: int, limit: int = BACKFILL_SLOTS_MAX
) -> tuple[int, ...]:
    """The calendar's slots in ``[start_s, end_s]``; refused beyond ``limit`` slots."""
    slots: list[int] = []
    slot = next_after_s(compiled, start_s - 1)
    while slot <= end_s:
        if len(slots) == limit:
            raise InvalidCommand(
                f"start/end: the range holds more than {limit} slots; backfill it in parts"
            )
        slots.append(slot)
        slot = next_after_s(compiled, slot)
    return tuple(slots)


def plan_backfill(
    state: SchedulerState,
    compiled: CompiledSchedule,
    schedule_id: int,
    start_s: int,
    end_s: int,
    at_s: int,
    overlap: str = "Queue",
) -> Backfill:
    """``backfill``: the slots in ``[start, end]``, ``end`` clipped to the schedule's cursor (a
    later slot is still to be observed, and would otherwise run twice)."""
    _require(state, schedule_id)
    if start_s > end_s:
        raise InvalidCommand("start: must not be after end")
    last_s = min(end_s, state.progress[schedule_id].cursor_s)
    slots = backfill_slots(compiled, start_s, last_s) if start_s <= last_s else ()
    return Backfill(schedule_id, start_s, end_s, slots, overlap, at_s)


def plan_update(
    state: SchedulerState,
    schedule_id: int,
    changes: Mapping[str, Any],
    at_s: int,
    limits: Limits | None = None,
) -> UpdateSchedule:
    """``update``: the given fields over the current definition, validated as a whole (the
    calendar included) like a new definition; ``policy`` is replaced as one object."""
    _require(state, schedule_id)
    unknown = sorted(set(changes) - set(UPDATE_FIELDS))
    if unknown:
        raise InvalidCommand(f"{unknown[0]}: not a field update can change")
    if not changes:
        raise InvalidCommand(f"update: give at least one of {', '.join(UPDATE_FIELDS)}")
    merged = definition_to_json(state.schedules[schedule_id].definition)
    for field, value in changes.items():
        if field == "name" and value is None:
            merged.pop("name", None)
        else:
            merged[field] = value
    definition = parse_definition(merged, limits or state.limits)
    return UpdateSchedule(schedule_id, definition, tuple(sorted(changes)), at_s)


def upcoming(
    compiled: CompiledSchedule, schedule_id: int, jitter_seconds: int, after_s: int, count: int
) -> list[tuple[int, int]]:
    """The next ``count`` slots after ``after_s`` with each one's jittered start instant."""
    out: list[tuple[int, int]] = []
    slot = next_after_s(compiled, after_s)
    for _ in range(count):
        following = next_after_s(compiled, slot)
        start = jittered_instant_s(schedule_id, slot, jitter_seconds, following)
        out.append((slot, start))
        slot = following
    return out
