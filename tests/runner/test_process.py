"""The voter process's lifecycle: EOF on stdin leaves scheduling running; SIGTERM drains within a
bound while admission stays available, then exits 0; quickstart runs a demo occurrence end to end.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
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


def test_quickstart_runs_the_demo_schedule_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    data = tmp_path / "qs"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "appliance",
            "quickstart",
            "--data-dir",
            str(data),
            "--time-scale",
            "60",
        ],
        env={**os.environ, "APPLIANCE_TESTING": ENV["APPLIANCE_TESTING"]},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    try:
        wait_for(
            lambda: any(line == "occurrence 1 attempt 1: Succeeded" for line in lines),
            "the demo occurrence to succeed",
            timeout_s=60,
        )
        assert any("admission on 127.0.0.1:" in line for line in lines)
        mode = stat.S_IMODE((data / "credentials.json").stat().st_mode)
        assert mode == 0o600
        tokens = json.loads((data / "credentials.json").read_text())
        assert len(set(tokens.values())) == 3
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        assert lines[-1] == "appliance quickstart: stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


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
