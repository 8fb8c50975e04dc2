"""Three voters wired from real runner configs (SQLite RunnerStore, waitress, the pooled client)
on loopback: they elect a leader, commit, and serve status only to the cluster bearer."""

from __future__ import annotations

import time
from pathlib import Path

from appliance.capabilities import local_capabilities
from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.credentials import resolve_runner_credentials
from appliance.config.runner import parse_runner_config
from appliance.http import HttpClient
from appliance.replication.raft_member import RaftMember
from appliance.store.runner_store import RunnerStore
from tests.ports import free_ports

ENV = {
    "ADMISSION_TOKEN": "admission-secret-000000",
    "CLUSTER_TOKEN": "cluster-secret-1111111",
    "WORKER_TOKEN": "worker-secret-22222222",
}
WAIT_S = 15.0


def runner_doc(node_id: str, ports: dict[str, int], data_dir: Path) -> dict:  # type: ignore[type-arg]
    return {
        "node_id": node_id,
        "advertise_addr": "127.0.0.1",
        "cluster_port": ports[node_id],
        "peers": [f"{other}@127.0.0.1:{p}" for other, p in ports.items() if other != node_id],
        "data_dir": str(data_dir / node_id),
        "admission_addr": "127.0.0.1:4501",
        "admission_bearer_env": "ADMISSION_TOKEN",
        "cluster_bearer_env": "CLUSTER_TOKEN",
        "remote": {
            "url": "http://127.0.0.1:4701",
            "bearer_env": "WORKER_TOKEN",
            "expires_at": "2030-01-31T12:00:00Z",
            "session": "test",
            "timeout_seconds": 60,
            "heap_mb": 128,
            "namespace": "ns",
            "worker_id": "w1",
        },
        "raft": {
            "heartbeat_ms": 50,
            "election_timeout_min_ms": 300,
            "election_timeout_max_ms": 600,
        },
    }


def test_three_members_from_runner_configs_elect_commit_and_guard_status(tmp_path: Path) -> None:
    ids = ["n1", "n2", "n3"]
    ports = dict(zip(ids, free_ports(3), strict=True))
    members, stores, applied = {}, {}, {i: [] for i in ids}  # type: ignore[var-annotated]
    for node_id in ids:
        cfg = parse_runner_config(runner_doc(node_id, ports, tmp_path))
        digest = contract_digest(cfg)
        stores[node_id] = RunnerStore.create_or_open(
            cfg.data_dir, contract=sealed_contract(cfg), contract_digest=digest
        )
        members[node_id] = RaftMember(
            cfg,
            resolve_runner_credentials(cfg, ENV),
            stores[node_id],
            lambda index, command, sink=applied[node_id]: sink.append(command),
            contract_digest=digest,
        )
    client = HttpClient()
    try:
        for member in members.values():
            member.start()
        deadline = time.monotonic() + WAIT_S
        leader = None
        while leader is None and time.monotonic() < deadline:
            leaders = [m for m in members.values() if m.replication.is_leader()]
            leader = leaders[0] if len(leaders) == 1 else None
            time.sleep(0.01)
        assert leader is not None, "no leader elected"
        leader.replication.propose(b"hello", timeout_s=WAIT_S)
        while time.monotonic() < deadline and not all(a == [b"hello"] for a in applied.values()):
            time.sleep(0.01)
        assert all(a == [b"hello"] for a in applied.values())
        url = f"http://127.0.0.1:{ports['n2']}/raft/v1/status"
        assert client.get(url).status == 401
        assert client.get(url, bearer=ENV["WORKER_TOKEN"]).status == 401
        status = client.get(url, bearer=ENV["CLUSTER_TOKEN"]).json()
        assert set(status) >= {
            "node_id",
            "role",
            "term",
            "leader_id",
            "commit_index",
            "applied_index",
            "last_log_index",
        }
        assert status["node_id"] == "n2" and status["commit_index"] >= 2
        # The version gate: each voter reports what it applies; the leader's poll reads it.
        assert status["capabilities"] == local_capabilities().to_json()
        gate = leader.capabilities
        gate.poll_once()
        assert all(report == local_capabilities() for report in gate.reports().values())
        assert gate.refusal("Observe") is None
        refusal = gate.refusal("FutureCommand")
        assert refusal is not None and all(f"{i} (binary" in refusal for i in ids)
    finally:
        client.close()
        for member in members.values():
            member.stop()
        for store in stores.values():
            store.close()
