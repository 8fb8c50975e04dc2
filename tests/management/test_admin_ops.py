"""``appliance admin`` operator commands against the real listener (admin_ops.register)."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from appliance.cli import admin_ops
from tests.management.conftest import DEFINITION, TOKENS, Live


def run(live: Live | None, argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="appliance admin")
    admin_ops.register(parser.add_subparsers(dest="tool", required=True))
    args = parser.parse_args(argv)
    if live is not None and "--addr" not in argv:
        args.addr = f"127.0.0.1:{live.listener.port}"
    out, err = io.StringIO(), io.StringIO()
    code = admin_ops.run(args, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(admin_ops.OPERATOR_TOKEN_ENV, TOKENS["operator"])
    monkeypatch.setenv(admin_ops.RECOVERY_TOKEN_ENV, TOKENS["recovery"])


def test_create_from_file_and_stdin_then_list_as_a_table(live: Live, tokens, tmp_path) -> None:
    path = tmp_path / "definition.json"
    path.write_text(json.dumps(DEFINITION))
    assert run(live, ["create", str(path)])[0] == 0
    code, out, _ = run(live, ["create", "-", "--json"], stdin=json.dumps(DEFINITION))
    assert code == 0 and json.loads(out)["result"] == {"id": 2}
    code, out, _ = run(live, ["list"])
    assert code == 0
    header = out.splitlines()[0].split()
    assert header[:4] == ["ID", "NAME", "CRON", "TIMEZONE"] and "stale local view" in out
    assert DEFINITION["code"] not in out


def test_status_disable_cancel_delete(live: Live, tokens) -> None:
    code, out, _ = run(live, ["status"])
    assert code == 0 and "ownership.epoch" in out
    run(live, ["create", "-"], stdin=json.dumps(DEFINITION))
    occurrence = live.runner.add_occurrence(1, "Running")
    assert run(live, ["disable", "1"])[0] == 0
    code, out, _ = run(live, ["cancel", str(occurrence)])
    assert code == 0 and "intent was recorded" in out
    assert run(live, ["delete", "1"])[0] == 0
    assert live.runner.schedules == {}
    assert live.runner.occurrences[occurrence]["state"] == "Cancelling"


def test_acknowledge_needs_the_attestation_flag_and_the_recovery_token(live: Live, tokens) -> None:
    occurrence = live.runner.add_occurrence(1, "Unknown")
    code, _, err = run(live, ["acknowledge-stopped", str(occurrence)])
    assert code == 2 and "--attest-quiesced" in err
    code, _, err = run(
        live,
        [
            "acknowledge-stopped",
            str(occurrence),
            "--attest-quiesced",
            "--token-env",
            admin_ops.OPERATOR_TOKEN_ENV,
        ],
    )
    assert code == 1 and "HTTP 403" in err
    assert live.runner.occurrences[occurrence]["state"] == "Unknown"
    code, _, _ = run(live, ["acknowledge-stopped", str(occurrence), "--attest-quiesced"])
    assert code == 0
    assert live.runner.occurrences[occurrence]["state"] == "Abandoned"


def test_refusals_and_uncertain_outcomes_exit_1_with_the_reason(live: Live, tokens) -> None:
    code, _, err = run(live, ["create", "-"], stdin=json.dumps({**DEFINITION, "cron": "@daily"}))
    assert code == 1 and "definition.cron" in err
    live.runner.fail_next = RuntimeError("boom")
    code, _, err = run(live, ["disable", "3"])
    assert code == 1 and "outcome uncertain" in err
    live.runner.owner = False
    code, _, err = run(live, ["status"])
    assert code == 1 and "leader hint" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["status", "--addr", "10.0.0.5:4601"], "loopback"),
        (["status", "--addr", "nonsense"], "--addr"),
        (["status", "--token-env", "APPLIANCE_TEST_UNSET_TOKEN"], "APPLIANCE_TEST_UNSET_TOKEN"),
        (["disable", "0"], "positive"),
        (["create", "/nonexistent/definition.json"], "cannot read"),
    ],
)
def test_invalid_input_exits_2_and_sends_nothing(live: Live, tokens, argv, message) -> None:
    code, _, err = run(live, argv)
    assert code == 2 and message in err
    assert live.runner.executed == []


def test_an_unreachable_listener_is_reported_as_not_sent(tokens) -> None:
    code, _, err = run(None, ["status", "--addr", "127.0.0.1:9"])
    assert code == 1 and "nothing was sent" in err


def test_the_commands_beyond_the_seeds_send_their_documents(live: Live, tokens, tmp_path) -> None:
    run(live, ["create", "-"], stdin=json.dumps(DEFINITION))
    code_file = tmp_path / "job.js"
    code_file.write_text("console.log('v2')")
    argvs = [
        ["run-now", "1", "--request-id", "deploy-7"],
        ["enable", "1", "--catch-up"],
        ["update", "1", "--cron", "5 * * * *", "--no-name", "--code-file", str(code_file)],
        ["pause"],
        ["resume"],
        ["backfill", "1", "--start", "2027-01-15T07:00:00Z", "--end", "2027-01-15T08:00:00Z"],
        [
            "backfill",
            "1",
            "--start",
            "2027-01-15T07:00:00Z",
            "--end",
            "2027-01-15T08:00:00Z",
            "--overlap",
            "Skip",
            "--preview",
        ],
    ]
    for argv in argvs:
        code, _, err = run(live, argv)
        assert code == 0, (argv, err)
    sent = live.runner.executed[1:]
    assert sent[0] == {"action": "run_now", "id": 1, "request_id": "deploy-7"}
    assert sent[1] == {"action": "enable", "id": 1, "catch_up": True}
    assert sent[2] == {
        "action": "update",
        "id": 1,
        "name": None,
        "code": "console.log('v2')",
        "cron": "5 * * * *",
    }
    assert [c["action"] for c in sent[3:]] == ["pause", "resume", "backfill", "backfill_preview"]
    assert sent[6]["overlap"] == "Skip"


def test_an_update_without_a_field_is_a_usage_error_and_sends_nothing(live: Live, tokens) -> None:
    code, _, err = run(live, ["update", "1"])
    assert code == 2 and "at least one" in err
    assert live.runner.executed == []


def test_create_of_a_definition_with_several_problems_lists_them_all(live: Live, tokens) -> None:
    bad = {**DEFINITION, "cron": "61 * * * *", "timezone": "Mars/Base"}
    code, _, err = run(live, ["create", "-"], stdin=json.dumps(bad))
    assert code == 1 and "HTTP 400 invalid_definition" in err
    assert "\n  definition.cron: " in err and "\n  definition.timezone: " in err
    code, out, _ = run(live, ["create", "-", "--json"], stdin=json.dumps(bad))
    problems = json.loads(out)["error"]["problems"]
    assert [p["field"] for p in problems] == ["definition.cron", "definition.timezone"]
    assert live.runner.executed == []
