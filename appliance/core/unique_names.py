"""Names unique among live schedules: a create or rename that would repeat one is refused.

Theory of operation (issue 35, an extension of SPEC §3, where ``name`` is optional and free).
``appliance admin apply FILE`` finds a schedule by its ``name`` to update it instead of creating a
second one; that needs at most one live schedule per name. A pre-check by the owner alone would
race (two creates planned from the same state), so the rule is checked where the command is
applied, in the same transaction that writes the schedule, identically on every voter:

- ``CreateNamedSchedule`` is ``CreateSchedule`` that first refuses with :class:`NameTaken` (naming
  the schedule that holds the name) when a live schedule already has the definition's name;
- ``UpdateNamedSchedule`` is ``UpdateSchedule`` that refuses a new name another live schedule
  has (keeping its own name is no conflict).

They are new command kinds, so the version gate proposes them only once every voter applies them
(``appliance/capabilities.py``); an older voter would apply the plain command without the check,
and its state would differ. The owner proposes them for every named create and every update that
sets a name; unnamed schedules behave as before (any number of them). A deleted schedule's name
is free again. Names that were already repeated before this rule (seeded or created by an older
binary) stay as they are: the rule only refuses new repetitions.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.core.commands import CreateSchedule
from appliance.core.definition import Definition, definition_to_json
from appliance.core.policy_apply import _create_schedule
from appliance.core.schedule_commands import UpdateSchedule, _tuple_of_list, _update_schedule
from appliance.core.serialisation import register_command_type
from appliance.core.state_errors import InvalidCommand
from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import definition_from_checkpoint
from appliance.core.txn import Txn, register


class NameTaken(InvalidCommand):
    """Another live schedule already has this name; ``existing_id`` is that schedule."""

    def __init__(self, name: str, existing_id: int) -> None:
        super().__init__(
            f"definition.name: {name!r} is already the name of schedule {existing_id}; names "
            f"are unique among live schedules (update schedule {existing_id} instead)"
        )
        self.name = name
        self.existing_id = existing_id


@dataclass(frozen=True)
class CreateNamedSchedule:
    definition: Definition  # with a name
    at_s: int


@dataclass(frozen=True)
class UpdateNamedSchedule:
    schedule_id: int
    definition: Definition  # the whole new definition, with the name it is to have
    fields: tuple[str, ...]
    at_s: int


def name_holder(state: SchedulerState, name: str, other_than: int | None = None) -> int | None:
    """The live schedule named ``name`` (the lowest id), if any, other than ``other_than``."""
    for sid in sorted(state.schedules):
        if sid != other_than and state.schedules[sid].definition.name == name:
            return sid
    return None


def _holder(txn: Txn, name: str, other_than: int | None) -> int | None:
    """As :func:`name_holder`, on the transaction's view (committed state plus its writes)."""
    for sid in sorted(set(txn.state.schedules) | set(txn._sch)):
        schedule = txn.schedule(sid)
        if sid != other_than and schedule is not None and schedule.definition.name == name:
            return sid
    return None


@register(CreateNamedSchedule, grows=True)
def _create_named(txn: Txn, cmd: CreateNamedSchedule) -> int:
    if not isinstance(cmd.definition, Definition) or cmd.definition.name is None:
        raise InvalidCommand("definition.name: a named create needs a parsed, named definition")
    holder = _holder(txn, cmd.definition.name, None)
    if holder is not None:
        raise NameTaken(cmd.definition.name, holder)
    return _create_schedule(txn, CreateSchedule(cmd.definition, cmd.at_s))


@register(UpdateNamedSchedule, grows=True)
def _update_named(txn: Txn, cmd: UpdateNamedSchedule) -> tuple[str, ...]:
    if not isinstance(cmd.definition, Definition) or cmd.definition.name is None:
        raise InvalidCommand("definition.name: a named update needs a parsed, named definition")
    holder = _holder(txn, cmd.definition.name, cmd.schedule_id)
    if holder is not None:
        raise NameTaken(cmd.definition.name, holder)
    plain = UpdateSchedule(cmd.schedule_id, cmd.definition, cmd.fields, cmd.at_s)
    return _update_schedule(txn, plain)


def with_unique_name(command: object) -> object:
    """The name-checking form of a create or an update that sets a name; others unchanged."""
    if isinstance(command, CreateSchedule) and command.definition.name is not None:
        return CreateNamedSchedule(command.definition, command.at_s)
    if (
        isinstance(command, UpdateSchedule)
        and "name" in command.fields
        and command.definition.name is not None
    ):
        return UpdateNamedSchedule(
            command.schedule_id, command.definition, command.fields, command.at_s
        )
    return command


_DEFINITION_CODEC = (definition_to_json, definition_from_checkpoint)
register_command_type(CreateNamedSchedule, {"definition": _DEFINITION_CODEC})
register_command_type(
    UpdateNamedSchedule,
    {"definition": _DEFINITION_CODEC, "fields": (list, _tuple_of_list)},
)
