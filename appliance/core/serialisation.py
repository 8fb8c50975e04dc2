"""Checkpoint and command serialisation: canonical JSON in, exactly the same bytes out."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from appliance.core.canonical import canonical_json
from appliance.core.commands import (
    AcknowledgeStopped,
    Cancel,
    Claim,
    ConfirmCancelled,
    CreateSchedule,
    DeleteSchedule,
    DisableSchedule,
    FenceNotLaunched,
    Observe,
    ObservedSchedule,
    RecordOutcome,
    RetryDue,
)
from appliance.core.definition import (
    Definition,
    definition_to_json,
)
from appliance.core.limits import Limits
from appliance.core.occurrence import (
    encode_occurrence,
    occurrence_from_json,
)
from appliance.core.state_errors import CorruptState, InvalidCommand
from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import (
    _PART_KINDS,
    CHARGING_PART,
    CHARGING_V1,
    CHARGING_V2,
    PROGRESS_BYTES_MAX,
    SCHEMA_VERSION,
    _occurrence_budget,
    _progress_from_json,
    _schedule_budget,
    _schedule_from_json,
    _schedule_json,
    bound_max_for,
    bound_part_budget,
    bound_part_max,
    bound_part_names,
    definition_from_checkpoint,
    encode_progress,
)

# ---- serialisation -----------------------------------------------------------------------------


def to_json(state: SchedulerState) -> bytes:
    return state.to_json()


def from_json(data: bytes) -> SchedulerState:
    """Decode a checkpoint; it must re-encode to exactly the same bytes (else CorruptState)."""
    try:
        parts = json.loads(data)
        meta = parts["meta"]
        if meta["schema"] != SCHEMA_VERSION:
            raise CorruptState(f"schema: version {meta['schema']}, expected {SCHEMA_VERSION}")
        state = SchedulerState(Limits(**meta["limits"]))
        state.next_schedule_id = meta["next_schedule_id"]
        state.next_occurrence_id = meta["next_occurrence_id"]
        state._write_part("meta", canonical_json(meta), state._meta_budget)
        for name, value in parts.items():
            kind, _, _ = name.partition("/")
            if kind == "schedule":
                schedule = _schedule_from_json(value)
                state.schedules[schedule.id] = schedule
                state.note_schedule(schedule.id, schedule)
                data_part = canonical_json(_schedule_json(schedule))
                state._write_part(name, data_part, _schedule_budget(len(data_part), schedule))
            elif kind == "progress":
                progress = _progress_from_json(value)
                state.progress[int(name.partition("/")[2])] = progress
                state._write_part(name, encode_progress(progress), PROGRESS_BYTES_MAX)
            elif kind == "occurrence":
                record = occurrence_from_json(value)
                state.occurrences[record.id] = record
                state._index.add(record)
                # Charged below, once every bound part it may hold is loaded.
                state._write_part(name, encode_occurrence(record), 0)
            elif kind in _PART_KINDS:
                state.extra[name] = value
                state._write_part(name, canonical_json(value), _PART_KINDS[kind](value))
            elif kind != "meta":
                raise CorruptState(f"checkpoint: unknown part {name!r}")
    except CorruptState:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CorruptState(f"checkpoint: cannot decode ({err!r})") from err
    for name in state.extra:
        kind, _, key = name.partition("/")
        if bound_part_max(kind) is not None and int(key) not in state.occurrences:
            raise CorruptState(f"checkpoint: part {name!r} is bound to no record")
    # The same charges the live state computed, by the rules the checkpoint names.
    rules = CHARGING_V1 if CHARGING_PART not in state.extra else CHARGING_V2

    def bound_max(name: str, record: Any) -> int:
        schedule = state.schedules.get(record.schedule_id)
        return bound_max_for(name.partition("/")[0], record, state.extra.get(name), schedule, rules)

    def fitted(kind: str, record: Any) -> int:
        return bound_max(f"{kind}/{record.id}", record)

    for record in state.occurrences.values():
        name = f"occurrence/{record.id}"
        data_part = state._parts[name]
        budget = _occurrence_budget(len(data_part), record, state.extra.__contains__, rules, fitted)
        state._write_part(name, data_part, budget)
        for bound in bound_part_names(record.id):
            if bound in state._parts:
                size_max = bound_max(bound, record)
                data_bound = state._parts[bound]
                charge = bound_part_budget(len(data_bound), size_max, record)
                state._write_part(bound, data_bound, charge)
    if set(state.schedules) != set(state.progress):
        raise CorruptState("checkpoint: schedule and progress parts do not match")
    if any(sid >= state.next_schedule_id for sid in state.schedules) or any(
        oid >= state.next_occurrence_id for oid in state.occurrences
    ):
        raise CorruptState("checkpoint: an id is above its high-water mark")
    if state.to_json() != data:
        raise CorruptState("checkpoint: does not re-encode to the same bytes")
    state._reset_floor()
    return state


# -- commands on the wire (the runner replicates them as canonical JSON) --

COMMAND_TYPES: dict[str, type] = {
    t.__name__: t
    for t in (
        CreateSchedule,
        DisableSchedule,
        DeleteSchedule,
        Observe,
        Claim,
        RecordOutcome,
        Cancel,
        ConfirmCancelled,
        RetryDue,
        FenceNotLaunched,
        AcknowledgeStopped,
    )
}


# (command type, field name) -> (encode, decode) for fields that are not plain JSON values.
_FIELD_CODECS: dict[tuple[type, str], tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}


def register_command_type(
    command_type: type,
    field_codecs: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] | None = None,
) -> None:
    """Make an extension command replicable: its name, and codecs for its structured fields."""
    name = command_type.__name__
    if COMMAND_TYPES.get(name, command_type) is not command_type:
        raise ValueError(f"command type {name} is taken")
    COMMAND_TYPES[name] = command_type
    for field, codec in (field_codecs or {}).items():
        _FIELD_CODECS[(command_type, field)] = codec


def _entry_to_json(e: ObservedSchedule) -> list[Any]:
    out = [e.schedule_id, e.base_cursor_s, e.cursor_s, list(e.slots_s), e.missed]
    if e.not_before_s:  # only a jittered schedule's entry has the sixth element
        out.append(list(e.not_before_s))
    return out


def _entry_from_json(value: list[Any]) -> ObservedSchedule:
    if len(value) == 6:
        sid, base, cursor, slots, missed, not_before = value
        if not not_before:
            raise InvalidCommand("entries: an empty not_before list is written as no element")
        return ObservedSchedule(sid, base, cursor, tuple(slots), missed, tuple(not_before))
    sid, base, cursor, slots, missed = value
    return ObservedSchedule(sid, base, cursor, tuple(slots), missed)


def command_to_json(command: Any) -> dict[str, Any]:
    kind = type(command)
    out: dict[str, Any] = {"command": kind.__name__}
    for f in fields(command):
        value = getattr(command, f.name)
        codec = _FIELD_CODECS.get((kind, f.name))
        if codec is not None:
            value = codec[0](value)
        elif isinstance(value, Definition):
            value = definition_to_json(value)
        elif f.name == "entries":
            value = [_entry_to_json(e) for e in value]
        out[f.name] = value
    return out


def command_from_json(value: dict[str, Any]) -> Any:
    try:
        kind = COMMAND_TYPES[value["command"]]
        args = {k: v for k, v in value.items() if k != "command"}
        for name in list(args):
            codec = _FIELD_CODECS.get((kind, name))
            if codec is not None:
                args[name] = codec[1](args[name])
        if kind is CreateSchedule:
            args["definition"] = definition_from_checkpoint(args["definition"])
        if kind is Observe:
            args["entries"] = tuple(_entry_from_json(e) for e in args["entries"])
        return kind(**args)
    except InvalidCommand:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise InvalidCommand(f"command: cannot decode ({err!r})") from err
