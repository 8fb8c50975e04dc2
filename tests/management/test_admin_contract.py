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
from appliance.runner.management.gateway import BoundedCommandQueue, ThreadedConsumer
from appliance.runner.management.listener import ManagementListener
from appliance.runner.management.mcp_tools import visible_tools
from tests.management.conftest import TOKENS
from tests.management.fake_runner import FakeRunner

ADMIN_TOKEN = "admin-token-ffff6666"


class AmendingRunner(FakeRunner):
    """Answers the amendments as the owner would, and records them (``executed``)."""

    def _amend(self, command: dict[str, Any]) -> dict[str, Any]:
        changes = {k: v for k, v in command.items() if k != "action"}
        return {"action": command["action"], "amendment": 1, "changes": changes}

    _renew_grant = _amend_remote = _amend_limits = _amend


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
    assert runner.executed == [
        {"action": "renew_grant", "expires_at": "2030-01-01T00:00:00Z", "heap_mb": 256},
        {"action": "amend_remote", "worker_id": "worker-2"},
        {"action": "amend_limits", "records": 8192, "grace_seconds": 0},
    ]


@pytest.mark.parametrize("env", [admin_ops.OPERATOR_TOKEN_ENV, admin_ops.RECOVERY_TOKEN_ENV])
def test_the_operator_and_recovery_credentials_do_not_amend(listener, env: str) -> None:
    runner, port = listener
    code, _, err = run(port, ["renew-grant", "2030-01-01T00:00:00Z", "--token-env", env])
    assert code == 1 and "HTTP 403" in err and "admin" in err
    assert runner.executed == []


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
    from appliance.runner.command_table import COMMANDS
    from appliance.runner.management.replies import MEANING

    assert set(MEANING) == set(COMMANDS)
