"""The voter process's lifecycle: EOF on stdin leaves scheduling running; SIGTERM drains within a
bound while admission stays available, then exits 0. (The quickstart's tests: tests/quickstart.)
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from appliance.http import HttpClient
from appliance.runner.worker_client import ObserveResult
from tests.runner.cluster import ENV, Cluster, free_ports, wait_for
from tests.runner.harness import T0, Voter, definition, wait_until


def test_eof_on_stdin_leaves_scheduling_running_and_sigterm_exits_0(tmp_path: Path) -> None:
    demo = {**definition(overlap="Concurrent"), "name": "demo"}
    cluster = Cluster(tmp_path, 1, time_scale=60.0, schedules=[demo])
    voter = cluster.voters["v1"]
    voter.start()
    try:
        assert voter.proc is not None and voter.proc.stdin is not None
        voter.proc.stdin.close()  # EOF at once
        wait_for(
            lambda: sum(1 for e in voter.events() if e.get("event") == "claim") >= 2,
            "two claims after EOF (no worker: they end Unknown)",
        )
        assert voter.alive
        assert voter.terminate() == 0
        events = [e["event"] for e in voter.events()]
        # Results of tasks still in flight may be logged while draining; "stopped" is last.
        after_shutdown = events[events.index("shutdown") :]
        assert "draining" in after_shutdown and events[-1] == "stopped"
    finally:
        cluster.stop()


def test_draining_keeps_admission_available_and_is_bounded() -> None:
    with Voter() as v:
        v.worker.on_observe = lambda eid: ObserveResult("running")  # never finishes
        v.command(json.dumps({"action": "create", "definition": definition()}))
        v.advance_to(T0 + 60)
        wait_until(lambda: v.worker.admissions, "the admission")
        binding = v.worker.calls[0][1]
        started = time.monotonic()
        drain = threading.Thread(target=v.runner.drain_and_stop, args=(1.5,))
        drain.start()
        wait_until(lambda: v.events("draining"), "draining")
        status, body = v.runner.admit(binding, "inc-1")
        assert status == 200 and body["existing"] is True
        reply = v.command(json.dumps({"action": "create", "definition": definition()}))
        assert reply["status"] == 503 and reply["accepted"] is False
        drain.join(10)
        assert not drain.is_alive()
        assert 1.4 <= time.monotonic() - started <= 6.0


def test_management_commands_enter_the_same_runner_loop(tmp_path: Path) -> None:
    port = free_ports(1)[0]
    cluster = Cluster(tmp_path, 1, time_scale=1.0, management_ports={"v1": port})
    voter = cluster.voters["v1"]
    client = HttpClient(connect_timeout_ms=500, read_timeout_ms=10_000)
    try:
        voter.start()
        cluster.owner()
        base = f"http://127.0.0.1:{port}/scheduler/v1"
        token = ENV["RUNNER_OPERATOR_TOKEN"]
        body = json.dumps({"action": "create", "definition": definition()}).encode()
        created = client.post(f"{base}/commands", body, bearer=token)
        assert created.status == 200, created.body
        status = client.get(f"{base}/status", bearer=token).json()
        assert status["result"]["ownership"] == {"node": "v1", "epoch": 1}
        assert client.get(f"{base}/status").status == 401
        # The stdin view sees the schedule the HTTP command created: one loop, one state.
        assert [s["id"] for s in voter.command({"action": "list"})["schedules"]] == [1]
    finally:
        client.close()
        cluster.stop()
