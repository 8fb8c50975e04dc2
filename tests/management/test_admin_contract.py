"""``appliance admin renew-grant|amend-remote|amend-limits`` against the real listener, with the
admin credential of their own (issue 20); the operator and recovery credentials are refused."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.cli import admin_contract, admin_ops
from appliance.config.addresses import HostPort
from appliance.core.limits import Limits
from appliance.management.gateway import BoundedCommandQueue, ThreadedConsumer
from appliance.management.listener import ManagementListener
from appliance.management.mcp_tools import visible_tools
from tests.management.conftest import TOKENS
from tests.management.fake_runner import FakeRunner

ADMIN_TOKEN = "admin-token-ffff6666"


class AmendingRunner(FakeRunner):
    """Answers the amendments as the owner would, and records them (``executed``)."""

    def _amend(self, command: dict[str, Any]) -> dict[str, Any]:
        changes = {k: v for k, v in command.items() if k != "action"}
        return {"action": command["action"], "amendment": 1, "changes": changes}

    _renew_grant = _amend_remote = _amend_limits = _amend

    def _status(self, command: dict[str, Any]) -> dict[str, Any]:
        return {**super()._status(command), "contract": {"amendment": 4}}


@pytest.fixture
def listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[AmendingRunner, int]]:
    runner = AmendingRunner()
    gateway = BoundedCommandQueue()
    consumer = ThreadedConsumer(gateway, runner.handle).start()
    tokens = {**TOKENS, "admin": ADMIN_TOKEN}
    live = ManagementListener(HostPort("127.0.0.1", 0), gateway, tokens, Limits(), threads=2)
    live.start()
    monkeypatch.setenv(admin_contract.ADMIN_TOKEN_ENV, ADMIN_TOKEN)
    monkeypatch.setenv(admin_ops.OPERATOR_TOKEN_ENV, TOKENS["operator"])
    monkeypatch.setenv(admin_ops.RECOVERY_TOKEN_ENV, TOKENS["recovery"])
    yield runner, live.port
    live.stop()
    consumer.stop()


def run(port: int, argv: list[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="appliance admin")
    admin_contract.register(parser.add_subparsers(dest="tool", required=True))
    args = parser.parse_args([*argv, "--addr", f"127.0.0.1:{port}"])
    out, err = io.StringIO(), io.StringIO()
    code = args.func(args, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_each_subcommand_sends_exactly_the_given_fields(listener) -> None:
    runner, port = listener
    assert run(port, ["renew-grant", "2030-01-01T00:00:00Z", "--heap-mb", "256"])[0] == 0
    assert run(port, ["amend-remote", "--worker-id", "worker-2"])[0] == 0
    code, out, _ = run(
        port, ["amend-limits", "--records", "8192", "--grace-seconds", "0", "--json"]
    )
    assert code == 0 and json.loads(out)["result"]["amendment"] == 1
    # Each first reads the amendment in force and sends it as its base (issue 36).
    status = {"action": "status"}
    assert runner.executed == [
        status,
        {
            "action": "renew_grant",
            "expires_at": "2030-01-01T00:00:00Z",
            "heap_mb": 256,
            "base_amendment": 4,
        },
        status,
        {"action": "amend_remote", "worker_id": "worker-2", "base_amendment": 4},
        status,
        {"action": "amend_limits", "records": 8192, "grace_seconds": 0, "base_amendment": 4},
    ]


def test_an_amendment_sends_the_base_the_operator_names_without_reading_status(listener) -> None:
    runner, port = listener
    code, _, err = run(port, ["amend-remote", "--worker-id", "w9", "--base-amendment", "2"])
    assert code == 0, err
    assert runner.executed == [{"action": "amend_remote", "worker_id": "w9", "base_amendment": 2}]
    code, _, err = run(port, ["amend-remote", "--worker-id", "w9", "--base-amendment", "-1"])
    assert code == 2 and "--base-amendment" in err
    assert len(runner.executed) == 1  # nothing sent


def test_an_amendment_is_not_sent_when_the_amendment_in_force_cannot_be_read(listener) -> None:
    runner, port = listener
    runner.owner = False  # status answers 409: no owner among the endpoints
    code, _, err = run(port, ["amend-limits", "--records", "8192"])
    assert code == 1 and "base_amendment" in err and "nothing was sent" in err, err
    assert runner.executed == [{"action": "status"}]


@pytest.mark.parametrize("env", [admin_ops.OPERATOR_TOKEN_ENV, admin_ops.RECOVERY_TOKEN_ENV])
def test_the_operator_and_recovery_credentials_do_not_amend(listener, env: str) -> None:
    runner, port = listener
    code, _, err = run(port, ["renew-grant", "2030-01-01T00:00:00Z", "--token-env", env])
    assert code == 1 and "HTTP 403" in err and "admin" in err
    assert [c["action"] for c in runner.executed] in ([], ["status"])  # a read, never the amendment


def test_the_amendment_tools_are_listed_to_the_admin_credential_only() -> None:
    names = {
        role: {t["name"] for t in visible_tools(role, Limits())}
        for role in ("operator", "recovery", "admin")
    }
    amendments = {"scheduler_renew_grant", "scheduler_amend_remote", "scheduler_amend_limits"}
    assert amendments <= names["admin"]
    assert not amendments & (names["operator"] | names["recovery"])
    assert "scheduler_create" not in names["admin"] and "scheduler_status" in names["admin"]
    renew = next(
        t for t in visible_tools("admin", Limits()) if t["name"] == "scheduler_renew_grant"
    )
    assert renew["inputSchema"]["required"] == ["expires_at"]


def test_every_command_of_the_table_has_a_reply_meaning() -> None:
    from appliance.commands.table import COMMANDS
    from appliance.management.replies import MEANING

    assert set(MEANING) == set(COMMANDS)


class CatchingUp:
    """A replication whose learner catches up after ``refusals`` promote attempts."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls: list[tuple[str, ...]] = []

    def add_learner(self, node_id: str, address: str, *, timeout_s: float) -> None:
        self.calls.append(("add_learner", node_id, address))

    def promote(self, node_id: str, *, timeout_s: float) -> None:
        from appliance.replication.errors import ProposalRefused

        self.calls.append(("promote", node_id))
        if self.refusals > 0:
            self.refusals -= 1
            raise ProposalRefused(f"learner {node_id} has not caught up: it holds the log up to 3")

    def remove(self, node_id: str, *, timeout_s: float) -> None:
        self.calls.append(("remove", node_id))

    def status(self) -> dict[str, Any]:
        return {"configuration": {"voters": ["v1"], "learners": []}, "config_index": 2}


class MembershipRunner(AmendingRunner):
    def __init__(self, replication: CatchingUp) -> None:
        super().__init__()
        self.replication = replication

    def _member(self, command: dict[str, Any]) -> dict[str, Any]:
        from appliance.commands.operator import OperatorCommand
        from appliance.runner.membership_commands import membership_reply

        args = {k: v for k, v in command.items() if k != "action"}
        reply = membership_reply(self.replication, OperatorCommand(command["action"], args), self)
        return reply if reply.get("ok") is False else {k: v for k, v in reply.items() if k != "ok"}

    _add_voter = _promote_voter = _remove_voter = _member

    def emit(self, event: str, **fields: Any) -> None:  # the decision log membership_reply uses
        pass


@pytest.fixture
def member_listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[CatchingUp, int]]:
    replication = CatchingUp(refusals=2)
    runner = MembershipRunner(replication)
    gateway = BoundedCommandQueue()
    consumer = ThreadedConsumer(gateway, runner.handle).start()
    tokens = {**TOKENS, "admin": ADMIN_TOKEN}
    live = ManagementListener(HostPort("127.0.0.1", 0), gateway, tokens, Limits(), threads=2)
    live.start()
    monkeypatch.setenv(admin_contract.ADMIN_TOKEN_ENV, ADMIN_TOKEN)
    monkeypatch.setenv(admin_ops.OPERATOR_TOKEN_ENV, TOKENS["operator"])
    yield replication, live.port
    live.stop()
    consumer.stop()


def test_the_voter_subcommands_send_their_fields_with_the_admin_credential(
    member_listener,
) -> None:
    replication, port = member_listener
    code, out, _ = run(port, ["add-voter", "v4", "127.0.0.1:7104", "--json"])
    assert code == 0 and json.loads(out)["result"]["configuration"]["voters"] == ["v1"]
    code, _, err = run(port, ["promote-voter", "v4"])  # no --wait-s: one refusal, exit 1
    assert code == 1 and "HTTP 422" in err and "has not caught up" in err
    assert run(port, ["remove-voter", "v1"])[0] == 0
    code, _, err = run(port, ["remove-voter", "v2", "--token-env", admin_ops.OPERATOR_TOKEN_ENV])
    assert code == 1 and "HTTP 403" in err
    assert replication.calls == [
        ("add_learner", "v4", "127.0.0.1:7104"),
        ("promote", "v4"),
        ("remove", "v1"),
    ]


def test_promote_voter_wait_asks_again_only_while_the_learner_catches_up(member_listener) -> None:
    replication, port = member_listener
    code, _out, err = run(port, ["promote-voter", "v4", "--wait-s", "5"])
    assert code == 0, err
    assert replication.calls == [("promote", "v4")] * 3  # two definite refusals, then committed
    assert err == ""


def test_the_voter_tools_are_listed_to_the_admin_credential_only() -> None:
    names = {
        role: {t["name"] for t in visible_tools(role, Limits())}
        for role in ("operator", "recovery", "admin")
    }
    voters = {"scheduler_add_voter", "scheduler_promote_voter", "scheduler_remove_voter"}
    assert voters <= names["admin"]
    assert not voters & (names["operator"] | names["recovery"])
    add = next(t for t in visible_tools("admin", Limits()) if t["name"] == "scheduler_add_voter")
    assert add["inputSchema"]["required"] == ["id", "address"]
    assert add["inputSchema"]["properties"]["id"]["type"] == "string"
