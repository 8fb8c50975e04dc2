"""Three voter PROCESSES on loopback, each started from its runner config: they elect a leader,
survive SIGKILL of the leader (a new leader of a higher term commits its barrier on top of
everything committed before), the killed voter rejoins from its SQLite store and catches up,
and every route refuses a request without the cluster bearer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from appliance.http import ClientError, HttpClient
from tests.replication.test_raft_member import ENV, free_ports, runner_doc

WAIT_S = 30.0
IDS = ["n1", "n2", "n3"]


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports = dict(zip(IDS, free_ports(3), strict=True))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.client = HttpClient(connect_timeout_ms=300, read_timeout_ms=2_000)
        for node_id in IDS:
            doc = runner_doc(node_id, self.ports, root)
            (root / f"{node_id}.json").write_text(json.dumps(doc))

    def start(self, node_id: str) -> None:
        log = open(self.root / f"{node_id}.log", "ab")  # noqa: SIM115 - closed with the process
        self.procs[node_id] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "appliance.replication.member_main",
                str(self.root / f"{node_id}.json"),
            ],
            env={**os.environ, **ENV},
            stdout=log,
            stderr=log,
        )
        log.close()

    def url(self, node_id: str, path: str = "/raft/v1/status") -> str:
        return f"http://127.0.0.1:{self.ports[node_id]}{path}"

    def status(self, node_id: str) -> dict[str, Any] | None:
        try:
            response = self.client.get(self.url(node_id), bearer=ENV["CLUSTER_TOKEN"])
        except ClientError:
            return None
        return response.json() if response.status == 200 else None

    def wait(self, predicate, what: str):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.05)
        logs = {i: (self.root / f"{i}.log").read_text()[-2000:] for i in IDS}
        raise AssertionError(f"timed out waiting for {what}; logs: {logs}")

    def agreed_leader(self, among: list[str]) -> dict[str, Any] | None:
        statuses = [self.status(i) for i in among]
        if any(s is None for s in statuses):
            return None
        leaders = [s for s in statuses if s["role"] == "leader"]  # type: ignore[index]
        if len(leaders) != 1:
            return None
        leader = leaders[0]
        agreed = all(s["leader_id"] == leader["node_id"] for s in statuses)  # type: ignore[index]
        return leader if agreed else None

    def stop_all(self) -> dict[str, int | None]:
        codes = {}
        for node_id, proc in self.procs.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                codes[node_id] = proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[node_id] = proc.wait(10)
        self.client.close()
        return codes


def test_three_voter_processes_fail_over_and_the_killed_voter_catches_up(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        for node_id in IDS:
            cluster.start(node_id)
        first = cluster.wait(lambda: cluster.agreed_leader(IDS), "a leader all agree on")
        assert first["commit_index"] >= 1

        for path, method in (
            ("/raft/v1/status", "GET"),
            ("/raft/v1/append", "POST"),
            ("/raft/v1/vote", "POST"),
        ):
            response = cluster.client.request(method, cluster.url("n1", path), body=b"x")
            assert response.status == 401, path

        old = first["node_id"]
        cluster.procs[old].send_signal(signal.SIGKILL)
        cluster.procs[old].wait(10)
        survivors = [i for i in IDS if i != old]
        second = cluster.wait(
            lambda: (
                (s := cluster.agreed_leader(survivors))
                and s["term"] > first["term"]
                and s["commit_index"] > first["commit_index"]
                and s
            ),
            "a new leader of a higher term with its barrier committed",
        )
        assert second["node_id"] != old
        # The survivors' probes saw the killed leader's port refuse connections, so they did not
        # wait out an election timeout (RaftNode.leader_gone).
        logs = [(tmp_path / f"{i}.log").read_text() for i in survivors]
        assert any(f"leader {old}'s cluster port refuses connections" in text for text in logs)

        cluster.start(old)
        rejoined = cluster.wait(
            lambda: (
                (s := cluster.status(old))
                and s["role"] == "follower"
                and s["leader_id"] == second["node_id"]
                and s["applied_index"] >= second["commit_index"]
                and s
            ),
            "the killed voter to rejoin and catch up",
        )
        assert rejoined["term"] == second["term"]
    finally:
        codes = cluster.stop_all()
    assert all(code == 0 for code in codes.values()), codes
