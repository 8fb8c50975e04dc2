"""``appliance admin status|history|output`` against a real voter's management listener."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from appliance.cli import admin_ops
from appliance.engine.model import EngineStats
from appliance.http import HttpServer
from appliance.metrics.worker import WorkerMetrics
from appliance.runner.worker_client import ObserveResult
from appliance.worker.metrics_routes import create_worker_metrics_app
from tests.management.conftest import TOKENS
from tests.metrics.conftest import Live
from tests.runner.harness import T0, definition

WORKER_TOKEN = "worker-metrics-token-123456"


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
    monkeypatch.setenv(admin_ops.WORKER_TOKEN_ENV, WORKER_TOKEN)


def _workload(live: Live) -> None:
    live.voter.worker.on_observe = lambda eid: ObserveResult(
        "completed",
        {"status": "completed", "output": {"text": "tick\n", "bytes": 5, "truncated": False}},
    )
    live.voter.command(json.dumps({"action": "create", "definition": definition()}))
    live.voter.advance_to(T0 + 61)
    live.voter.wait_state(1, "Succeeded")
    live.voter.advance_to(T0 + 241)
    live.voter.wait_state(2, "Succeeded")


def test_history_prints_drop_counters_recent_reasons_and_a_timeline_table(live: Live) -> None:
    _workload(live)
    code, out, err = run(live, ["history", "1"])
    assert code == 0, err
    assert "dropped slots: missed 2, overlap 0, capacity 0" in out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("OCC"))
    assert header.split() == [
        "OCC", "DUE", "TRY", "STATE", "AT", "REASON", "EXECUTION", "FAILURE"
    ]  # fmt: skip
    assert all(len(line) <= 100 for line in lines)
    rows = lines[lines.index(header) + 1 :]
    assert rows[0].split()[:4] == ["1", "2027-01-15T08:01:00Z", "1", "Pending"]
    assert rows[2].split()[1:2] == ["Succeeded"] and rows[2].split()[-1] == "s1-o1-a1"
    assert rows[3].split()[:2] == ["2", "2027-01-15T08:04:00Z"]
    assert "console.log" not in out


def test_history_of_an_unknown_schedule_exits_1(live: Live) -> None:
    code, _, err = run(live, ["history", "7"])
    assert code == 1 and "HTTP 404 no_such_schedule" in err


def test_output_prints_the_console_text_and_a_trailer(live: Live) -> None:
    _workload(live)
    code, out, _ = run(live, ["output", "2"])
    assert code == 0
    assert out.startswith(
        "tick\n-- value: null\n-- occurrence 2 attempt 1 (s1-o2-a1, completed): 5 bytes --"
    )


def test_status_shows_voters_owner_grant_worker_pool_and_warnings(live: Live) -> None:
    stats = EngineStats(
        max_concurrent=4, max_queued=16, reserved=0, running=3, queued=2,
        warm_children=1, live_children=4, saturation_events=5, queued_events=9,
        submitted_total=12,
    )  # fmt: skip
    engine = type("Engine", (), {"stats": lambda self: stats, "add_listener": lambda s, f: None})
    metrics = WorkerMetrics()
    metrics.attach(engine(), None)
    server = HttpServer(
        create_worker_metrics_app(metrics.registry, WORKER_TOKEN),
        host="127.0.0.1", port=0, name="worker metrics", body_bytes_max=1024,
    ).start()  # fmt: skip
    try:
        code, out, err = run(live, ["status", "--worker-metrics", f"127.0.0.1:{server.port}"])
    finally:
        server.stop()
    assert code == 0, err
    assert "owner       v1 epoch 1 (acquired here)" in out
    assert "grant       expires 2099-01-01T00:00:00Z" in out
    assert "pool        running 3/4, queued 2/16, saturated 5 times" in out
    voter_row = next(line for line in out.splitlines() if line.startswith("v1 "))
    assert voter_row.split()[:4] == ["v1", "leader", "1", "yes"]
    assert "no warnings" in out
    assert "ownership.epoch" in out  # the owner's own status reply follows


def test_status_json_holds_the_status_reply_and_the_health_view(live: Live) -> None:
    code, out, _ = run(live, ["status", "--json"])
    document = json.loads(out)
    assert code == 0
    assert document["status"]["ok"] is True
    assert document["health"]["ownership"]["epoch"] == 1
