"""Real processes over mutual TLS (issue 20): a ``cluster init`` TLS cluster grows by a node
written with ``cluster init --join`` (a certificate of the same CA), which catches up as a
learner, is promoted, and takes part when the leader is removed; every slot still runs once.

This is the TLS side of tests/runner/test_membership_processes.py: the cluster listeners admit
the new member's certificate (any node id the CA named), and every voter dials it at the address
the committed configuration carries, checking that its certificate names it.

The demo schedule's ``Skip`` becomes the runner tests' catch-up policy: ``Skip`` rightly drops a
slot whose leader change outlasts its 5 s grace window, and "every slot still runs once" needs a
policy that keeps it."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from appliance.cluster_init.layout import PORT_SPAN
from tests.runner.cluster import DEMO, FAST_RAFT, Voter, wait_for

from .conftest import cluster_init, read_env_file
from .processes import free_port_block, start_worker, stop_cluster

SLOT_S = 60
TIME_SCALE = 20.0


def _occurrences(voter: Voter) -> list[dict[str, Any]]:
    return list(voter.command({"action": "list"})["occurrences"])


def _succeeded(voter: Voter) -> int:
    return sum(1 for o in _occurrences(voter) if o["state"] == "Succeeded")


def _owner(voters: dict[str, Voter], exclude: tuple[str, ...] = ()) -> Voter:
    def find() -> Voter | None:
        for voter in voters.values():
            usable = voter.node_id not in exclude and voter.alive
            if usable and voter.command({"action": "status"}).get("ok"):
                return voter
        return None

    return wait_for(find, "an acquired owner")


def _change(owner: Voter, document: dict[str, Any]) -> dict[str, Any]:
    def once() -> dict[str, Any] | None:
        reply = owner.command(document)
        if reply.get("ok"):
            return reply
        if "has not caught up" in str((reply.get("error") or {}).get("message")):
            return None  # definite: the learner is still installing the log
        raise AssertionError(f"{document}: {reply}")

    return wait_for(once, f"{document} committed", timeout_s=30)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_tls_cluster_adds_a_voter_of_the_same_ca_and_removes_its_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cluster"
    base = free_port_block(PORT_SPAN)
    assert cluster_init("--out", str(out), "--base-port", str(base)) == 0  # TLS by default
    assert cluster_init("--join", str(out), "--node-id", "voter-4") == 0
    for name, value in read_env_file(out / "cluster.env").items():
        monkeypatch.setenv(name, value)
    voters: dict[str, Voter] = {}
    for node_id in ("voter-1", "voter-2", "voter-3", "voter-4"):
        config = out / f"{node_id}.json"
        doc = json.loads(config.read_text())
        doc["raft"] = FAST_RAFT  # per node, outside the contract: faster failover for the test
        if "schedules" in doc:
            doc["schedules"] = [DEMO]  # the same genesis on every founding voter
        config.write_text(json.dumps(doc))
        voters[node_id] = Voter(node_id, config, out / f"{node_id}.log", TIME_SCALE)
    joiner_doc = json.loads((out / "voter-4.json").read_text())
    assert joiner_doc["join"] is True and "tls" in joiner_doc
    # The worker may ask the new node for permits once it leads.
    worker_doc = json.loads((out / "worker.json").read_text())
    worker_doc["admission_urls"].append(f"https://{joiner_doc['admission_addr']}")
    (out / "worker.json").write_text(json.dumps(worker_doc))
    worker: subprocess.Popen[str] | None = None
    try:
        worker = start_worker(out)
        started_real_s = time.time()
        for node_id in ("voter-1", "voter-2", "voter-3"):
            voters[node_id].start()
        owner = _owner(voters)
        wait_for(lambda: _succeeded(owner) >= 1 or None, "a first slot Succeeded")

        v4 = voters["voter-4"]
        offset_s = (time.time() - started_real_s) * (TIME_SCALE - 1)
        v4.extra_args = ["--clock-offset-seconds", f"{offset_s:.0f}"]
        v4.start()
        address = f"127.0.0.1:{joiner_doc['cluster_port']}"
        _change(owner, {"action": "add_voter", "id": "voter-4", "address": address})
        promoted = _change(owner, {"action": "promote_voter", "id": "voter-4"})
        assert "voter-4" in promoted["configuration"]["voters"], promoted
        # It caught up over mutual TLS: its local replica holds what the owner committed.
        committed = _succeeded(owner)
        wait_for(lambda: _succeeded(v4) >= committed or None, "voter-4 replicated the slots")

        _change(owner, {"action": "remove_voter", "id": owner.node_id})
        removed = owner
        owner = _owner(voters, exclude=(removed.node_id,))
        count = _succeeded(owner)
        wait_for(lambda: _succeeded(owner) >= count + 2 or None, "two slots after the removal")

        records = _occurrences(owner)
        per_slot = Counter(o["due"] for o in records)
        assert all(n == 1 for n in per_slot.values()), per_slot
        due = sorted(per_slot)
        assert due == list(range(due[0], due[-1] + SLOT_S, SLOT_S)), "a slot was lost"
        assert not [o for o in records if o["state"] == "Unknown"], records
        schedule = owner.command({"action": "list"})["schedules"][0]
        assert schedule["dropped"] == {"missed": 0, "overlap": 0, "capacity": 0}, schedule
        status = owner.command({"action": "status"})
        assert sorted(status["configuration"]["voters"]) == sorted(
            {"voter-1", "voter-2", "voter-3", "voter-4"} - {removed.node_id}
        ), status
    except AssertionError as exc:
        logs = "\n".join(
            f"==== {p.name}\n{p.read_text()[-3000:]}" for p in sorted(out.glob("*.log"))
        )
        raise AssertionError(f"{exc}\n{logs}") from None
    finally:
        stop_cluster(voters, worker)
