"""A slow-header flood on every listener of a real 3-voter cluster and its worker (issue 18).

An attacker process holds ``FLOOD_CONNECTIONS`` connections on each of the eleven listeners
(three cluster, three admission, three management, the worker's and its metrics), each sending
an incomplete request and a byte a second, reopening at once what the servers close. Throughout,
an authenticated request to every listener is answered within 1 s; a SIGSTOP of the Raft leader
during the flood elects a new leader within the usual failover time; no occurrence due during
the flood becomes Unknown. The CI size is bounded; ``APPLIANCE_FLOOD_CONNECTIONS=500
APPLIANCE_FLOOD_SECONDS=60`` runs the issue's full size (docs/http.md records that run).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.http.client import ClientError, HttpClient
from appliance.http.server import raise_open_files_limit
from tests.ports import free_ports
from tests.runner.cluster import DEMO, ENV, Cluster, wait_for

FLOOD_CONNECTIONS = int(os.environ.get("APPLIANCE_FLOOD_CONNECTIONS", "100"))
FLOOD_S = float(os.environ.get("APPLIANCE_FLOOD_SECONDS", "20"))
ANSWER_S_MAX = 1.0
FAILOVER_S_MAX = 5.0  # without a flood, FAST_RAFT fails over in about a second here
REPO = Path(__file__).resolve().parents[2]


def _probes(cluster: Cluster, management: dict[str, int], metrics_port: int) -> list[tuple]:
    """(name, method, url, token, body) of one authenticated request per listener."""
    probes: list[tuple] = []
    for node_id, port in cluster.cluster_ports.items():
        probes.append(
            (
                f"cluster {node_id}",
                "GET",
                f"http://127.0.0.1:{port}/raft/v1/status",
                ENV["RUNNER_CLUSTER_TOKEN"],
                None,
            )
        )
    for node_id, port in cluster.admission_ports.items():
        probes.append(
            (
                f"admission {node_id}",
                "POST",
                f"http://127.0.0.1:{port}/scheduler/v1/admit",
                ENV["RUNNER_ADMISSION_TOKEN"],
                b"{}",
            )
        )
    for node_id, port in management.items():
        probes.append(
            (
                f"management {node_id}",
                "GET",
                f"http://127.0.0.1:{port}/scheduler/v1/status",
                ENV["RUNNER_OPERATOR_TOKEN"],
                None,
            )
        )
    worker_port = cluster.worker.port
    probes.append(
        (
            "worker",
            "GET",
            f"http://127.0.0.1:{worker_port}/api/scheduled/v1/executions/none",
            ENV["RUNNER_WORKER_TOKEN"],
            None,
        )
    )
    probes.append(
        (
            "worker metrics",
            "GET",
            f"http://127.0.0.1:{metrics_port}/metrics",
            ENV["RUNNER_WORKER_TOKEN"],
            None,
        )
    )
    return probes


def _probe_round(
    http: HttpClient, probes: list[tuple], skip: set[str], failures: list[str] | None = None
) -> dict[str, float]:
    """Seconds each listener took to answer (an authenticated request on a new connection);
    a listener that gave no answer is appended to ``failures`` (or fails the test at once)."""
    took: dict[str, float] = {}
    for name, method, url, token, body in probes:
        if name in skip:
            continue
        started = time.monotonic()
        try:
            response = http.request(
                method, url, body=body, bearer=token, fresh_connection=True, read_timeout_ms=3000
            )
        except ClientError as exc:
            if failures is None:
                raise AssertionError(f"{name}: no answer ({exc})") from None
            failures.append(f"{time.monotonic():.2f} {name}: {exc}")
            continue
        assert response.status != 401, f"{name}: our credential was refused"
        took[name] = time.monotonic() - started
    return took


def _raft_status(http: HttpClient, port: int) -> dict[str, Any] | None:
    try:
        response = http.get(
            f"http://127.0.0.1:{port}/raft/v1/status",
            bearer=ENV["RUNNER_CLUSTER_TOKEN"],
            fresh_connection=True,
            read_timeout_ms=1000,
        )
    except ClientError:
        return None
    return response.json() if response.status == 200 else None


def _leader(http: HttpClient, cluster: Cluster, exclude: str = "", above_term: int = -1):
    for node_id, port in cluster.cluster_ports.items():
        if node_id == exclude:
            continue
        status = _raft_status(http, port)
        if status and status["role"] == "leader" and status["term"] > above_term:
            return node_id, status["term"]
    return None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_slow_header_flood_on_every_listener_blocks_nothing(tmp_path: Path) -> None:
    raise_open_files_limit()
    management_ports = dict(zip(("v1", "v2", "v3"), free_ports(3), strict=True))
    cluster = Cluster(
        tmp_path,
        3,
        time_scale=30.0,
        schedules=[DEMO],
        worker=True,
        management_ports=management_ports,
    )
    metrics_port = free_ports(1)[0]
    worker_doc = json.loads(cluster.worker.config.read_text())
    worker_doc["metrics_addr"] = f"127.0.0.1:{metrics_port}"
    cluster.worker.config.write_text(json.dumps(worker_doc))
    probes = _probes(cluster, management_ports, metrics_port)
    attacker: subprocess.Popen[str] | None = None
    http = HttpClient(read_timeout_ms=3000)
    try:
        cluster.start()
        owner = cluster.owner()
        wait_for(
            lambda: [
                o
                for o in owner.command({"action": "list"})["occurrences"]
                if o["state"] == "Succeeded"
            ],
            "a first Succeeded slot",
        )
        targets = [url.split("/")[2] for _, _, url, _, _ in probes]
        attacker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.http.flood_attacker",
                "--per-listener",
                str(FLOOD_CONNECTIONS),
                "--seconds",
                str(FLOOD_S + 30),
                *targets,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        flood_started = time.monotonic()
        time.sleep(2.0)  # the attacker has its connections open
        worst: dict[str, float] = {}
        every: list[float] = []
        failures: list[str] = []
        while time.monotonic() - flood_started < FLOOD_S:
            for name, seconds in _probe_round(http, probes, set(), failures).items():
                worst[name] = max(worst.get(name, 0.0), seconds)
                every.append(seconds)
            time.sleep(0.2)
        every.sort()
        spread = (
            f"{len(every)} answers: p50 {every[len(every) // 2] * 1000:.1f} ms, p99 "
            f"{every[int(len(every) * 0.99)] * 1000:.1f} ms, max {every[-1] * 1000:.1f} ms, "
            f"{sum(1 for s in every if s > ANSWER_S_MAX)} over {ANSWER_S_MAX}s; "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        print(f"flood answers: {spread}", flush=True)
        assert not failures, f"listeners that gave no answer under the flood: {failures}"
        slow = {name: round(s, 3) for name, s in worst.items() if s > ANSWER_S_MAX}
        assert not slow, f"listeners slower than {ANSWER_S_MAX}s under the flood: {slow}; {spread}"

        before = owner.command({"action": "list"})["occurrences"]
        unknown = [o for o in before if o["state"] == "Unknown"]
        assert not unknown, f"occurrences became Unknown during the flood: {unknown}"
        assert len([o for o in before if o["state"] == "Succeeded"]) >= 3, before

        # A leader stopped during the flood: the others elect a new one in the usual time.
        leader_id, term = wait_for(lambda: _leader(http, cluster), "a Raft leader")
        stopped = cluster.voters[leader_id]
        assert stopped.proc is not None
        stopped.proc.send_signal(signal.SIGSTOP)
        stop_at = time.monotonic()
        try:
            new_leader = wait_for(
                lambda: _leader(http, cluster, exclude=leader_id, above_term=term),
                "a new leader while the old one is stopped",
                timeout_s=FAILOVER_S_MAX + 5,
            )
            failover_s = time.monotonic() - stop_at
            assert failover_s <= FAILOVER_S_MAX, f"new leader after {failover_s:.1f}s"
            took = _probe_round(
                http,
                probes,
                skip={f"cluster {leader_id}", f"admission {leader_id}", f"management {leader_id}"},
            )
            assert max(took.values()) <= ANSWER_S_MAX, took
        finally:
            stopped.proc.send_signal(signal.SIGCONT)
        assert new_leader[0] != leader_id
        attacker.terminate()
        report = json.loads(attacker.communicate(timeout=20)[0].strip().splitlines()[-1])
        # The servers closed the slow connections (the header deadline) and the attacker
        # reopened them: the flood was held up the whole time.
        assert report["closed_by_servers"] >= len(probes) * FLOOD_CONNECTIONS, report
        print(
            f"flood: {FLOOD_CONNECTIONS} per listener x {len(probes)} listeners for {FLOOD_S}s, "
            f"{report}; slowest answer per listener (s): "
            f"{ {name: round(s, 3) for name, s in sorted(worst.items())} }; "
            f"failover with the leader stopped: {failover_s:.2f}s"
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        if attacker is not None and attacker.poll() is None:
            attacker.terminate()
            attacker.wait(10)
        http.close()
        cluster.stop()
