"""The operator command table: every command stdin, HTTP, MCP and ``admin`` carry, in one place.

Theory of operation (seeds/001 "Operator commands and states", "Authorization matrix"): each row
says the command's argument fields (documentation order), which of them are positive integer ids,
whether it changes replicated state, the least management role that may send it, and the core
command it commits. ``appliance/runner/operator.py`` (stdin), ``management/commands.py`` (HTTP and
MCP) and the owner core (appliance/runner/owner.py) all read this table; adding a command is one
row here (plus, if it needs one, the owner's follow-up after the commit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from appliance.core import state as core

# The management roles (seeds/001): an operator may do everything but the recovery actions.
OPERATOR: Final = "operator"
RECOVERY: Final = "recovery"


@dataclass(frozen=True)
class CommandSpec:
    action: str
    fields: tuple[str, ...]  # argument fields, the stdin document without ``action``
    id_fields: tuple[str, ...] = ()  # fields that must be positive integer ids
    role: str = OPERATOR  # the least role that may send it
    # The core command it commits, from the checked arguments (a create's ``definition`` is the
    # parsed Definition) and the wall instant; None for the read-only commands.
    build: Callable[[Mapping[str, Any], int], Any] | None = None

    @property
    def mutates(self) -> bool:
        return self.build is not None


_ROWS: Final = (
    CommandSpec("status", ()),
    CommandSpec("list", ()),
    CommandSpec(
        "create", ("definition",), build=lambda a, at_s: core.CreateSchedule(a["definition"], at_s)
    ),
    CommandSpec(
        "disable", ("id",), ("id",), build=lambda a, at_s: core.DisableSchedule(a["id"], at_s)
    ),
    CommandSpec(
        "cancel",
        ("occurrence_id",),
        ("occurrence_id",),
        build=lambda a, at_s: core.Cancel(a["occurrence_id"], at_s),
    ),
    CommandSpec(
        "delete", ("id",), ("id",), build=lambda a, at_s: core.DeleteSchedule(a["id"], at_s)
    ),
    CommandSpec(
        "acknowledge_stopped",
        ("occurrence_id", "dispatcher_and_work_quiesced"),
        ("occurrence_id",),
        role=RECOVERY,
        build=lambda a, at_s: core.AcknowledgeStopped(
            a["occurrence_id"], a.get("dispatcher_and_work_quiesced") is True, at_s
        ),
    ),
)
COMMANDS: Final[Mapping[str, CommandSpec]] = {row.action: row for row in _ROWS}
MUTATIONS: Final = frozenset(a for a, row in COMMANDS.items() if row.mutates)
RECOVERY_ACTIONS: Final = frozenset(a for a, row in COMMANDS.items() if row.role == RECOVERY)
