"""A ``cluster init`` TLS cluster (the default) passes the real-process exactly-once test across
an owner kill: three voters speaking mutual TLS, the worker and admission over https; every slot
runs at most once and none is lost; the cluster port refuses a plaintext client.

The test swaps the demo schedule's ``Skip`` for the catch-up policy of the runner's process tests:
``Skip`` rightly drops a slot whose failover outlasts the 5 s grace window (0.17 real s at this
time scale), and a loaded host can add a second election, so "none is lost" needs ``CatchUp``."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from appliance.cluster_init.layout import ENV_NAMES, PORT_SPAN
from appliance.http.client import ClientError, HttpClient
from tests.runner.cluster import DEMO, FAST_RAFT, Voter, wait_for

from .conftest import cluster_init, read_env_file
from .processes import free_port_block, start_worker, stop_cluster

SLOT_S = 60
TIME_SCALE = 30.0


def _occurrences(voter: Voter) -> list[dict[str, Any]]:
    return voter.command({"action": "list"})["occurrences"]


def _succeeded(voter: Voter, at_least: int) -> list[dict[str, Any]] | None:
    done = [o for o in _occurrences(voter) if o["state"] == "Succeeded"]
    return done if len(done) >= at_least else None


def _owner(voters: dict[str, Voter], exclude: tuple[str, ...] = ()) -> Voter:
    def find() -> Voter | None:
        for voter in voters.values():
            usable = voter.node_id not in exclude and voter.alive
            if usable and voter.command({"action": "status"}).get("ok"):
                return voter
        return None

    return wait_for(find, "an acquired owner")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_tls_cluster_runs_every_slot_at_most_once_across_an_owner_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cluster"
    base = free_port_block(PORT_SPAN)
    assert cluster_init("--out", str(out), "--base-port", str(base)) == 0  # TLS by default
    for name, value in read_env_file(out / "cluster.env").items():
        monkeypatch.setenv(name, value)
    voters: dict[str, Voter] = {}
    for i in (1, 2, 3):
        config = out / f"voter-{i}.json"
        doc = json.loads(config.read_text())
        assert "tls" in doc and doc["remote"]["url"].startswith("https://")
        doc["raft"] = FAST_RAFT  # per node, outside the contract: faster failover for the test
        doc["schedules"] = [DEMO]  # the same genesis on every voter
        config.write_text(json.dumps(doc))
        voters[f"voter-{i}"] = Voter(f"voter-{i}", config, out / f"voter-{i}.log", TIME_SCALE)
    worker: subprocess.Popen[str] | None = None
    try:
        worker = start_worker(out)
        for voter in voters.values():
            voter.start()

        # The cluster port speaks only mutual TLS: a plaintext client gets no HTTP answer.
        with HttpClient(read_timeout_ms=2000) as plain, pytest.raises(ClientError):
            plain.get(
                f"http://127.0.0.1:{base}/raft/v1/status",
                bearer=os.environ[ENV_NAMES["cluster"]],
            )

        first = _owner(voters)
        # The version gate polls the peers over the cluster's mutual TLS: a new command kind
        # passes once every voter reported it (a plaintext poll would never hear one).
        expires = json.loads((out / "voter-1.json").read_text())["remote"]["expires_at"]
        renewed = expires.replace(expires[:4], str(int(expires[:4]) + 1), 1)

        def renew() -> dict[str, Any] | None:
            answer = first.command({"action": "renew_grant", "expires_at": renewed})
            return None if "not proposed until every voter" in str(answer.get("error")) else answer

        renewal = wait_for(renew, "the version gate lets RenewGrant through")
        assert renewal.get("ok") is True, renewal
        before = wait_for(lambda: _succeeded(first, 3), "three slots to succeed")
        first.kill()
        second = _owner(voters, exclude=(first.node_id,))
        wait_for(lambda: _succeeded(second, len(before) + 4), "four more slots after failover")

        records = _occurrences(second)
        due = sorted(o["due"] for o in records)
        assert len(due) == len(set(due)), "a slot became two occurrences"
        assert due == list(range(due[0], due[-1] + SLOT_S, SLOT_S)), "a slot was lost"
        assert all(o["state"] in ("Succeeded", "Running", "Pending") for o in records), records
        schedule = second.command({"action": "list"})["schedules"][0]
        assert schedule["dropped"] == {"missed": 0, "overlap": 0, "capacity": 0}, schedule
        claims: Counter[tuple[int, int]] = Counter()
        for voter in voters.values():
            for event in voter.events():
                if event.get("event") == "claim":
                    claims[(event["occurrence"], event["attempt"])] += 1
        assert claims and max(claims.values()) == 1, claims
        # Ownership may have moved again since (an election on a loaded host): ask whoever holds it.
        owner = _owner(voters, exclude=(first.node_id,))
        status = owner.command({"action": "status"})
        assert status["ownership"]["node"] == owner.node_id
        assert status["ownership"]["epoch"] >= 2
    except AssertionError as exc:
        logs = "\n".join(
            f"==== {p.name}\n{p.read_text()[-3000:]}" for p in sorted(out.glob("*.log"))
        )
        raise AssertionError(f"{exc}\n{logs}") from None
    finally:
        stop_cluster(voters, worker)
