"""One operator command table: stdin, HTTP, MCP and the owner all read its rows."""

from __future__ import annotations

import json

import pytest

from appliance.commands import operator
from appliance.commands.table import (
    ADMIN,
    ADMIN_ACTIONS,
    AMENDMENT_ACTIONS,
    COMMANDS,
    MEMBERSHIP_ACTIONS,
    MUTATIONS,
    READS,
    RECOVERY,
    RECOVERY_ACTIONS,
)
from appliance.core.limits import Limits
from appliance.management import commands
from appliance.management.mcp_tools import tool_specs


def test_every_surface_carries_exactly_the_rows_of_the_table() -> None:
    assert {a: spec.fields for a, spec in COMMANDS.items()} == operator.ACTIONS
    assert commands.COMMAND_FIELDS == operator.ACTIONS
    assert list(commands.COMMAND_FIELDS) == list(COMMANDS)  # documentation order
    assert [spec["action"] for spec in tool_specs(Limits()).values()] == list(COMMANDS)
    assert operator.MUTATIONS == commands.MUTATIONS == MUTATIONS
    built = {a for a, spec in COMMANDS.items() if spec.build is not None or spec.plan is not None}
    # A preview is planned, never proposed; a membership change is a Raft entry, not a command.
    assert (built - {"backfill_preview"}) | MEMBERSHIP_ACTIONS == MUTATIONS
    assert {"acknowledge_stopped"} == RECOVERY_ACTIONS
    assert {
        "renew_grant",
        "amend_remote",
        "amend_limits",
        "add_worker",
        "drain_worker",
        "undrain_worker",
        "remove_worker",
    } == AMENDMENT_ACTIONS
    assert {"add_voter", "promote_voter", "remove_voter"} == MEMBERSHIP_ACTIONS
    assert AMENDMENT_ACTIONS | MEMBERSHIP_ACTIONS == ADMIN_ACTIONS
    everything = frozenset(COMMANDS)
    assert commands.allowed_actions("operator") == everything - RECOVERY_ACTIONS - ADMIN_ACTIONS
    # The recovery credential attests quiescence; it does not reconfigure (issue 20).
    assert commands.allowed_actions(RECOVERY) == everything - ADMIN_ACTIONS
    assert commands.allowed_actions(ADMIN) == ADMIN_ACTIONS | READS
    assert {"status", "list"} <= READS


@pytest.mark.parametrize("role", ["operator", "recovery"])
def test_only_the_admin_credential_amends_the_contract(role: str) -> None:
    with pytest.raises(commands.Refused) as refused:
        commands.check_command({"action": "renew_grant", "expires_at": "x"}, role, Limits())
    assert (refused.value.status, refused.value.code) == (403, "admin_required")
    with pytest.raises(commands.Refused) as refused:
        commands.check_command({"action": "create", "definition": {}}, ADMIN, Limits())
    assert refused.value.status == 403


def test_an_amendment_passes_its_given_fields_and_omits_the_optional_ones() -> None:
    document = {"action": "renew_grant", "expires_at": "2030-01-01T00:00:00Z", "heap_mb": 64}
    assert commands.check_command(document, ADMIN, Limits()) == document
    with pytest.raises(commands.Refused, match="expires_at: required"):
        commands.check_command({"action": "renew_grant"}, ADMIN, Limits())
    assert operator.parse_operator('{"action":"amend_remote","worker_id":"w2"}').args == {
        "worker_id": "w2"
    }


BUILT_WITHOUT_STATE = sorted(
    a for a in MUTATIONS - {"create"} - ADMIN_ACTIONS if COMMANDS[a].plan is None
)


@pytest.mark.parametrize("role", ["operator", "recovery"])
@pytest.mark.parametrize("action", sorted(MEMBERSHIP_ACTIONS))
def test_only_the_admin_credential_changes_the_voters(role: str, action: str) -> None:
    document = {"action": action, "id": "voter-4", "address": "127.0.0.1:7104"}
    if action != "add_voter":
        del document["address"]
    with pytest.raises(commands.Refused) as refused:
        commands.check_command(document, role, Limits())
    assert (refused.value.status, refused.value.code) == (403, "admin_required")
    assert commands.check_command(document, ADMIN, Limits()) == document
    assert operator.parse_operator(json.dumps(document)).args == {
        k: v for k, v in document.items() if k != "action"
    }


@pytest.mark.parametrize(
    ("document", "field", "problem"),
    [
        ({"action": "add_voter", "id": "voter-4"}, "address", "required"),
        ({"action": "add_voter", "address": "127.0.0.1:1"}, "id", "required"),
        ({"action": "add_voter", "id": 4, "address": "127.0.0.1:1"}, "id", "node id string"),
        ({"action": "add_voter", "id": "", "address": "127.0.0.1:1"}, "id", "1-64 characters"),
        ({"action": "add_voter", "id": "a" * 65, "address": "h:1"}, "id", "1-64 characters"),
        ({"action": "add_voter", "id": "v@4", "address": "h:1"}, "id", "1-64 characters"),
        ({"action": "add_voter", "id": "v4", "address": 7104}, "address", "host:port"),
        ({"action": "add_voter", "id": "v4", "address": "127.0.0.1"}, "address", "host:port"),
        ({"action": "add_voter", "id": "v4", "address": "h:0"}, "address", "port"),
        ({"action": "add_voter", "id": "v4", "address": "h:65536"}, "address", "port"),
        ({"action": "add_voter", "id": "v4", "address": "0.0.0.0:7104"}, "address", "dial"),
        ({"action": "promote_voter", "id": "v 4"}, "id", "1-64 characters"),
        ({"action": "remove_voter", "id": None}, "id", "node id string"),
        ({"action": "remove_voter", "id": "v4", "address": "h:1"}, "address", "unknown field"),
    ],
)
def test_membership_arguments_are_refused_naming_the_field(
    document: dict[str, object], field: str, problem: str
) -> None:
    with pytest.raises(commands.Refused) as refused:
        commands.check_command(document, ADMIN, Limits())
    assert refused.value.status == 400
    assert refused.value.message.startswith(f"{field}: "), refused.value.message
    assert problem in refused.value.message
    with pytest.raises(operator.OperatorError) as stdin_refused:  # stdin: the same check
        operator.parse_operator(json.dumps(document))
    assert stdin_refused.value.message.startswith(f"{field}: ")


def test_membership_ids_at_the_length_boundary_and_ports_at_their_edges_pass() -> None:
    for document in (
        {"action": "promote_voter", "id": "a" * 64},
        {"action": "add_voter", "id": "v_4-x", "address": "h:1"},
        {"action": "add_voter", "id": "v4", "address": "[::1]:65535"},
    ):
        assert commands.check_command(document, ADMIN, Limits()) == document


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


def test_an_id_is_accepted_up_to_the_wire_limit_and_refused_one_above() -> None:
    from appliance.protocol.v1 import ID_MAX

    at_limit = {"action": "cancel", "occurrence_id": ID_MAX}
    assert commands.check_command(at_limit, "operator", Limits()) == at_limit
    over = {"action": "cancel", "occurrence_id": ID_MAX + 1}
    expected = rf"occurrence_id: must be an integer id in \[1, {ID_MAX}\]"
    with pytest.raises(commands.Refused, match=expected):
        commands.check_command(over, "operator", Limits())


REFUSED_DOCUMENTS = [
    {"action": "nope"},
    {"action": "cancel"},
    {"action": "cancel", "occurrence_id": True},
    {"action": "cancel", "occurrence_id": 0},
    {"action": "cancel", "occurrence_id": 1, "extra": 1},
    {"action": "create", "definition": "console.log(1)"},
    {"action": "acknowledge_stopped", "occurrence_id": 1},
    {"action": "acknowledge_stopped", "occurrence_id": 1, "dispatcher_and_work_quiesced": 1},
    {"action": "acknowledge_stopped", "dispatcher_and_work_quiesced": True},
    {"action": "backfill", "schedule_id": 1, "start": "yesterday", "end": "today"},
]


@pytest.mark.parametrize("document", REFUSED_DOCUMENTS, ids=lambda d: json.dumps(d)[:60])
def test_stdin_and_management_refuse_a_command_with_the_same_code_and_words(
    document: dict,
) -> None:
    """One argument check (appliance/commands/checks.py): the adapters differ only in how they
    answer, never in what they refuse or how they say it."""
    with pytest.raises(operator.OperatorError) as stdin:
        operator.parse_operator(json.dumps(document))
    with pytest.raises(commands.Refused) as http:
        commands.check_command(document, "recovery", Limits())
    assert (stdin.value.status, stdin.value.code) == (http.value.status, http.value.code)
    assert stdin.value.message == http.value.message


def test_every_amendment_row_takes_an_optional_base_amendment_and_checks_it():
    """Issue 36: the rule is generic, so an amendment kind added later inherits it."""
    from appliance.commands.args import ArgumentError
    from appliance.commands.table import AMENDMENT_ACTIONS, COMMANDS

    assert {"renew_grant", "amend_remote", "amend_limits"} <= AMENDMENT_ACTIONS
    for action in AMENDMENT_ACTIONS:
        spec = COMMANDS[action]
        assert "base_amendment" in spec.fields and "base_amendment" in spec.optional, action
        assert spec.check is not None
        with pytest.raises(ArgumentError, match=r"^base_amendment"):
            spec.check({"base_amendment": "1"})
    for action, spec in COMMANDS.items():
        if action not in AMENDMENT_ACTIONS:
            assert "base_amendment" not in spec.fields, action
