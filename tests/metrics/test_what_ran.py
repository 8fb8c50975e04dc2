"""What ran, visible (issue 21, Build 2): per attempt the completion value, the thrown error's
message and stack, console output and timings — in ``occurrences/{id}``, the output route with
``?attempt=N`` and ``admin output`` — and a retry-waiting occurrence says when it retries."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

import pytest

from appliance.cli import admin_ops
from appliance.runner.worker_client import ObserveResult
from tests.management.conftest import TOKENS
from tests.metrics.conftest import Live
from tests.runner.harness import T0, definition

STACK = "Error: boom\n    at main (schedule.js:3:9)\n    at schedule.js:5:1"


def _document(status: str, **fields: Any) -> dict[str, Any]:
    return {
        "status": status,
        "result": None,
        "error": None,
        "reason": None,
        "note": None,
        "started_at": "2027-01-15T08:01:00Z",
        "finished_at": "2027-01-15T08:01:01Z",
        "output": {"text": "working\n", "bytes": 8, "truncated": False},
        **fields,
    }


REPORTS = {
    "s1-o1-a1": _document("failed", error=STACK, reason="uncaught exception"),
    "s1-o1-a2": _document(
        "completed",
        result={"answer": 42},
        started_at="2027-01-15T08:02:00Z",
        finished_at="2027-01-15T08:02:00.250Z",
    ),
}


def run(live: Live, argv: list[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="appliance admin")
    admin_ops.register(parser.add_subparsers(dest="tool", required=True))
    args = parser.parse_args([*argv, "--addr", f"127.0.0.1:{live.listener.port}"])
    out, err = io.StringIO(), io.StringIO()
    code = admin_ops.run(args, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(admin_ops.OPERATOR_TOKEN_ENV, TOKENS["operator"])


def _fail_then_succeed(live: Live) -> None:
    v = live.voter
    v.worker.on_observe = lambda eid: ObserveResult(REPORTS[eid]["status"], REPORTS[eid])
    retry = {"max_retries": 2, "delay_seconds": 60}
    v.command(json.dumps({"action": "create", "definition": definition(retry=retry)}))
    v.advance_to(T0 + 60)
    v.wait_state(1, "Pending")  # failed attempt 1, waiting for its retry


def test_a_retry_waiting_occurrence_says_when_it_retries(live: Live) -> None:
    _fail_then_succeed(live)
    detail = live.json("/scheduler/v1/occurrences/1")["occurrence"]
    assert detail["note"].startswith("retrying at ") and detail["note"].endswith("(attempt 2 of 3)")
    (first,) = detail["attempts"]
    assert first["execution_id"] == "s1-o1-a1"
    assert first["report"]["error"]["message"] == "Error: boom"
    assert "schedule.js:3:9" in first["report"]["error"]["stack"]
    code, out, _ = run(live, ["list", "occurrences"])
    words = " ".join(out.split())
    assert code == 0 and "retrying at 2027-01-15T08:02:00Z (attempt 2 of 3)" in words
    code, out, _ = run(live, ["history", "1"])
    words = " ".join(out.split())
    assert code == 0 and "retrying at 2027-01-15T08:02:00Z (attempt 2 of 3)" in words
    assert all(len(line) <= 100 for line in out.splitlines())


def test_every_attempt_shows_its_value_error_output_and_timings(live: Live) -> None:
    _fail_then_succeed(live)
    v = live.voter
    v.advance_to(T0 + 60 + 61)
    v.wait_state(1, "Succeeded")
    detail = live.json("/scheduler/v1/occurrences/1")["occurrence"]
    assert [a["attempt"] for a in detail["attempts"]] == [1, 2]
    second = detail["attempts"][1]["report"]
    assert json.loads(second["value"]["json"]) == {"answer": 42}
    assert second["duration_ms"] == 250 and second["error"] is None
    one = live.json("/scheduler/v1/occurrences/1/output?attempt=1")
    assert one["attempt"] == 1 and one["execution_id"] == "s1-o1-a1"
    assert one["error"] == {
        "message": "Error: boom",
        "stack": "    at main (schedule.js:3:9)\n    at schedule.js:5:1",
        "stack_truncated": False,
    }
    assert one["value"] is None and one["output"]["text"] == "working\n"
    latest = live.json("/scheduler/v1/occurrences/1/output")
    assert latest["attempt"] == 2 and json.loads(latest["value"]["json"]) == {"answer": 42}
    assert live.json("/scheduler/v1/occurrences/1/output?attempt=3")["_status"] == 404
    assert live.json("/scheduler/v1/occurrences/1/output?attempt=0")["_status"] == 400
    assert live.json("/scheduler/v1/occurrences/1/output?other=1")["_status"] == 400


def test_admin_output_prints_the_error_with_its_stack_and_the_value(live: Live) -> None:
    _fail_then_succeed(live)
    live.voter.advance_to(T0 + 60 + 61)
    live.voter.wait_state(1, "Succeeded")
    code, out, err = run(live, ["output", "1", "--attempt", "1"])
    assert code == 0, err
    assert out.startswith("working\n-- error: uncaught exception: Error: boom\n")
    assert "   at main (schedule.js:3:9)" in out
    assert "-- ran 2027-01-15T08:01:00Z to 2027-01-15T08:01:01Z (1000 ms)" in out
    assert out.rstrip().endswith("(s1-o1-a1, failed): 8 bytes --")
    code, out, _ = run(live, ["output", "1"])
    assert code == 0 and '-- value: {"answer": 42}' in out and "(250 ms)" in out
    code, _, err = run(live, ["output", "1", "--attempt", "0"])
    assert code == 2 and "--attempt" in err


def _mcp(live: Live, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    from tests.management.mcp_raw import call, headers, rpc

    if method == "tools/call":
        assert params is not None
        document, extra = call(params["name"], params["arguments"])
    else:
        document, extra = rpc(method), headers(method)
    response = live.http.request(
        "POST",
        f"http://127.0.0.1:{live.listener.port}/mcp",
        body=json.dumps(document).encode(),
        bearer=TOKENS["operator"],
        headers=extra,
    )
    return {"_status": response.status, **response.json()}


def test_the_mcp_extension_tool_shows_what_ran(live: Live) -> None:
    _fail_then_succeed(live)
    tools = [t["name"] for t in _mcp(live, "tools/list")["result"]["tools"]]
    assert "scheduler_occurrence" in tools
    detail = _mcp(
        live, "tools/call", {"name": "scheduler_occurrence", "arguments": {"occurrence_id": 1}}
    )["result"]
    assert detail["isError"] is False
    occurrence = detail["structuredContent"]["occurrence"]
    assert occurrence["attempts"][0]["report"]["error"]["message"] == "Error: boom"
    one = _mcp(
        live,
        "tools/call",
        {"name": "scheduler_occurrence", "arguments": {"occurrence_id": 1, "attempt": 1}},
    )["result"]
    assert json.loads(one["content"][0]["text"])["error"]["message"] == "Error: boom"
    missing = _mcp(
        live, "tools/call", {"name": "scheduler_occurrence", "arguments": {"occurrence_id": 9}}
    )["result"]
    assert missing["isError"] is True and missing["structuredContent"]["status"] == 404
    bad = _mcp(
        live, "tools/call", {"name": "scheduler_occurrence", "arguments": {"occurrence_id": 0}}
    )
    assert bad["_status"] == 400 and bad["error"]["code"] == -32602


def test_admin_list_on_a_real_voter_shows_next_run_last_outcome_and_counts(live: Live) -> None:
    _fail_then_succeed(live)
    live.voter.advance_to(T0 + 60 + 61)
    live.voter.wait_state(1, "Succeeded")
    code, relative, err = run(live, ["list"])
    assert code == 0, err
    header, row_text = relative.splitlines()[:2]
    next_run = row_text[header.index("NEXT RUN") :].split()[:2]  # relative by default
    assert next_run[0] == "in" or next_run[1] == "ago", next_run
    code, out, err = run(live, ["list", "--absolute"])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == [
        "ID", "NAME", "CRON", "TIMEZONE", "NEXT", "RUN", "LAST", "ACTIVE", "OK", "FAILED"
    ]  # fmt: skip
    row = lines[1].split()
    assert row[:2] == ["1", "job"] and row[-4:] == ["Succeeded", "0", "1", "0"]
    # the next slot after the schedule's observed cursor (this test's clock is far behind now:
    # the row shows a real ISO instant either way)
    assert row[-5].endswith(":00Z") and row[-5][:4].isdigit()
    assert all(len(line) <= 100 for line in lines)
