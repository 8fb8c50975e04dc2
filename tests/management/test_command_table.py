"""One operator command table: stdin, HTTP, MCP and the owner all read its rows."""

from __future__ import annotations

import pytest

from appliance.core.limits import Limits
from appliance.runner import operator
from appliance.runner.command_table import COMMANDS, MUTATIONS, RECOVERY, RECOVERY_ACTIONS
from appliance.runner.management import commands
from appliance.runner.management.mcp_tools import tool_specs


def test_every_surface_carries_exactly_the_rows_of_the_table() -> None:
    assert {a: spec.fields for a, spec in COMMANDS.items()} == operator.ACTIONS
    assert commands.COMMAND_FIELDS == operator.ACTIONS
    assert list(commands.COMMAND_FIELDS) == list(COMMANDS)  # documentation order
    assert [spec["action"] for spec in tool_specs(Limits()).values()] == list(COMMANDS)
    assert operator.MUTATIONS == commands.MUTATIONS == MUTATIONS
    assert {a for a, spec in COMMANDS.items() if spec.build is not None} == MUTATIONS
    assert {"acknowledge_stopped"} == RECOVERY_ACTIONS
    assert commands.allowed_actions("operator") == frozenset(COMMANDS) - RECOVERY_ACTIONS
    assert commands.allowed_actions(RECOVERY) == frozenset(COMMANDS)


@pytest.mark.parametrize("action", sorted(MUTATIONS - {"create"}))
def test_a_mutation_builds_the_core_command_of_its_row(action: str) -> None:
    args = {f: 7 if f in COMMANDS[action].id_fields else True for f in COMMANDS[action].fields}
    built = operator.build_mutation(operator.OperatorCommand(action, args), 123, lambda d: d)
    assert built.at_s == 123
    assert type(built).__name__ in {
        "DisableSchedule",
        "DeleteSchedule",
        "Cancel",
        "AcknowledgeStopped",
    }


def test_a_read_only_command_builds_no_core_command() -> None:
    with pytest.raises(operator.OperatorError):
        operator.build_mutation(operator.OperatorCommand("status", {}), 1, lambda d: d)
