"""Recovering a voter whose store was lost, with real processes (docs/voter-recovery.md).

Three ``appliance runner`` voters commit schedules; one follower is stopped and its data_dir is
moved aside (the store is "lost"); ``appliance admin store recover`` makes a fresh, recovering
store; the voter restarts, catches up and its status turns from recovering to a full voter; the
owner is then killed, and the survivors (the recovered voter's vote is needed) elect a new owner
that still holds every committed schedule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from appliance.http import ClientError, HttpClient
from tests.runner.cluster import DEMO, ENV, Cluster, wait_for

ADMIN_STORE = [sys.executable, "-m", "appliance", "admin", "store"]
RECOVER = [*ADMIN_STORE, "recover"]


def _names(reply: dict[str, Any]) -> list[str]:
    return sorted(s["definition"]["name"] for s in reply["schedules"])


def test_a_voter_recovered_from_a_lost_store_catches_up_and_votes_again(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3, time_scale=1.0)
    client = HttpClient(connect_timeout_ms=500, read_timeout_ms=2_000)

    def raft_status(node_id: str) -> dict[str, Any] | None:
        url = f"http://127.0.0.1:{cluster.cluster_ports[node_id]}/raft/v1/status"
        try:
            response = client.get(url, bearer=ENV["RUNNER_CLUSTER_TOKEN"])
        except ClientError:  # not listening yet, or restarting
            return None
        return json.loads(response.body) if response.status == 200 else None

    try:
        cluster.start()
        owner = cluster.owner()
        for i in range(3):
            created = owner.command({"action": "create", "definition": {**DEMO, "name": f"s{i}"}})
            assert created.get("ok") is not False, created
        lost = next(v for v in cluster.voters.values() if v is not owner)
        third = next(v for v in cluster.voters.values() if v not in (owner, lost))

        # The store is lost: stop the voter and move its data_dir aside.
        assert lost.terminate() == 0
        data_dir = tmp_path / lost.node_id
        data_dir.rename(tmp_path / f"{lost.node_id}.lost")
        # Meanwhile the cluster keeps committing without it.
        assert owner.command({"action": "create", "definition": {**DEMO, "name": "s3"}})["ok"]

        recover = subprocess.run(
            [*RECOVER, "--config", str(lost.config), "--data-dir", str(data_dir)],
            env={**os.environ, **ENV},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert recover.returncode == 0, recover.stderr
        assert "RECOVERING since" in recover.stdout
        again = subprocess.run(
            [*RECOVER, "--config", str(lost.config)],
            env={**os.environ, **ENV},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 1 and "move the damaged store aside" in again.stderr

        inspect = subprocess.run(
            [
                sys.executable,
                "-m",
                "appliance",
                "admin",
                "store",
                "inspect",
                str(data_dir),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert json.loads(inspect.stdout)["recovering_since"] is not None, inspect.stderr

        lost.start()
        leader_commit = int(owner.command({"action": "status"})["commit_index"])
        caught_up = wait_for(
            lambda: (
                (s := raft_status(lost.node_id))
                and s["recovering"] is False
                and s["commit_index"] >= leader_commit
                and s
            ),
            "the recovered voter to catch up and become a full voter",
        )
        assert caught_up["leader_id"] == owner.node_id

        # Now its vote counts: with the owner gone, no leader can be elected without it.
        owner.kill()
        successor = cluster.owner(exclude=(owner.node_id,))
        assert successor in (lost, third)
        assert _names(successor.command({"action": "list"})) == ["s0", "s1", "s2", "s3"]
        survivors = [raft_status(v.node_id) for v in (lost, third)]
        assert all(s is not None and s["recovering"] is False for s in survivors), survivors
        assert "caught up after recovering a lost store" in lost.log.read_text()
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        client.close()
        cluster.stop()
