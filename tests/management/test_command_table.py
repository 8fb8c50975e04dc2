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
    built = {a for a, spec in COMMANDS.items() if spec.build is not None or spec.plan is not None}
    assert built - {"backfill_preview"} == MUTATIONS  # a preview is planned, never proposed
    assert {"acknowledge_stopped"} == RECOVERY_ACTIONS
    assert commands.allowed_actions("operator") == frozenset(COMMANDS) - RECOVERY_ACTIONS
    assert commands.allowed_actions(RECOVERY) == frozenset(COMMANDS)


BUILT_WITHOUT_STATE = sorted(a for a in MUTATIONS - {"create"} if COMMANDS[a].plan is None)


@pytest.mark.parametrize("action", BUILT_WITHOUT_STATE)
def test_a_mutation_builds_the_core_command_of_its_row(action: str) -> None:
    args = {f: 7 if f in COMMANDS[action].id_fields else True for f in COMMANDS[action].fields}
    built = operator.build_mutation(operator.OperatorCommand(action, args), 123, lambda d: d)
    assert built.at_s == 123
    assert type(built).__name__ in {
        "DisableSchedule",
        "DeleteSchedule",
        "Cancel",
        "AcknowledgeStopped",
        "RunNow",
        "Pause",
    }


@pytest.mark.parametrize(
    ("action", "args", "kind"),
    [
        ("enable", {"id": 1}, "EnableSchedule"),
        ("update", {"id": 1, "cron": "5 * * * *"}, "UpdateSchedule"),
        ("resume", {}, "Resume"),
        (
            "backfill",
            {"id": 1, "start": "2027-01-15T07:00:00Z", "end": "2027-01-15T08:00:00Z"},
            "Backfill",
        ),
    ],
)
def test_a_planned_mutation_builds_its_core_command_from_the_state_and_calendar(
    action: str, args: dict, kind: str
) -> None:
    from appliance.core.calendar import compile_schedule
    from appliance.core.state import CreateSchedule, SchedulerState, apply
    from tests.core.command_helpers import definition

    state = SchedulerState(Limits())
    apply(state, CreateSchedule(definition(), 1_800_003_600))
    compiled = compile_schedule("* * * * *", "UTC")

    def planned(plan, a, at_s):
        return plan(a, at_s, state, lambda schedule_id: compiled)

    command = operator.OperatorCommand(action, args)
    built = operator.build_mutation(command, 1_800_003_700, lambda d: d, planned)
    assert type(built).__name__ == kind and built.at_s == 1_800_003_700


def test_a_read_only_command_builds_no_core_command() -> None:
    with pytest.raises(operator.OperatorError):
        operator.build_mutation(operator.OperatorCommand("status", {}), 1, lambda d: d)
