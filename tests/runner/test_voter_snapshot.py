"""A follower stopped across several log compactions catches up by snapshot (issue 19).

Three real ``appliance runner`` voters with tiny compaction thresholds (``raft.snapshot_entries``
5, ``trailing_entries`` 2). One follower is stopped; the cluster commits 30 more schedules, and
the leader compacts its log at least three times past the follower's last entry. The follower
restarts and must catch up by installing the leader's snapshot within 5 s, after which its
checkpoint is byte-identical to the leader's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw

from appliance.http import ClientError, HttpClient
from tests.runner.cluster import DEMO, ENV, FAST_RAFT, Cluster, wait_for

TINY_COMPACTION = {**FAST_RAFT, "snapshot_entries": 5, "trailing_entries": 2}
YEARLY = {**DEMO, "cron": "0 0 1 1 *"}  # never due while the test runs: no pulses to commit
CATCH_UP_S = 5.0


def checkpoint_of(data_dir: Path) -> tuple[int, list[tuple[str, bytes]]]:
    conn = apsw.Connection(str(data_dir / "runner.sqlite3"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        applied = conn.execute("SELECT applied_index FROM checkpoint").fetchall()[0][0]
        parts = conn.execute("SELECT name, data FROM checkpoint_part ORDER BY name").fetchall()
        return applied, parts
    finally:
        conn.close()


def test_a_follower_behind_three_compactions_catches_up_by_snapshot(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3, time_scale=1.0, raft=TINY_COMPACTION)
    client = HttpClient(connect_timeout_ms=500, read_timeout_ms=2_000)

    def raft_status(node_id: str) -> dict[str, Any] | None:
        url = f"http://127.0.0.1:{cluster.cluster_ports[node_id]}/raft/v1/status"
        try:
            response = client.get(url, bearer=ENV["RUNNER_CLUSTER_TOKEN"])
        except ClientError:
            return None
        return json.loads(response.body) if response.status == 200 else None

    try:
        cluster.start()
        owner = cluster.owner()
        for i in range(3):
            assert owner.command({"action": "create", "definition": {**YEARLY, "name": f"a{i}"}})[
                "ok"
            ]
        behind = next(v for v in cluster.voters.values() if v is not owner)
        assert behind.terminate() == 0
        left_at = wait_for(lambda: raft_status(owner.node_id), "the leader's status")
        # Compactions are checked once per tick: commit in rounds, one compaction at least each.
        leader: dict[str, Any] = left_at
        for round_ in range(5):
            for i in range(6):
                created = owner.command(
                    {"action": "create", "definition": {**YEARLY, "name": f"b{round_}-{i}"}}
                )
                assert created["ok"]
            done = leader["compactions"]
            leader = wait_for(
                lambda done=done: (
                    (s := raft_status(owner.node_id)) and s["compactions"] > done and s
                ),
                "a compaction",
                timeout_s=10,
            )
        assert leader["compactions"] - left_at["compactions"] >= 3
        assert leader["snapshot_index"] > left_at["last_log_index"]

        started = time.monotonic()
        behind.start()
        caught_up = wait_for(
            lambda: (
                (s := raft_status(behind.node_id))
                and s["snapshots_installed"] >= 1
                and s["applied_index"] >= leader["commit_index"]
                and s
            ),
            "the follower to install the snapshot and catch up",
            timeout_s=30,
        )
        took_s = time.monotonic() - started
        assert took_s <= CATCH_UP_S, f"caught up in {took_s:.2f} s (process start included)"
        assert caught_up["snapshot_index"] >= leader["snapshot_index"]
        assert "installed a snapshot from its leader" in behind.log.read_text()

        # Quiet now (no schedule is due): both checkpoints settle at the same applied index.
        wait_for(
            lambda: (
                (a := raft_status(owner.node_id))
                and (b := raft_status(behind.node_id))
                and a["applied_index"] == b["applied_index"]
            ),
            "leader and follower at the same applied index",
        )
        assert behind.terminate() == 0
        assert owner.terminate() == 0
        leader_ckpt = checkpoint_of(tmp_path / owner.node_id)
        follower_ckpt = checkpoint_of(tmp_path / behind.node_id)
        assert follower_ckpt[0] == leader_ckpt[0]
        assert follower_ckpt == leader_ckpt  # byte-identical, part by part
        print(f"caught up by snapshot in {took_s:.2f} s (process start included)")
    except AssertionError as exc:
        last = {n: raft_status(n) for n in cluster.voters}
        raise AssertionError(f"{exc}\n{last}\n{cluster.dump_logs()}") from None
    finally:
        client.close()
        cluster.stop()


def run_admin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "appliance", "admin", "store", *args],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_backup_of_a_running_voter_restores_and_lost_stores_catch_up_by_snapshot(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 3, time_scale=1.0, raft=TINY_COMPACTION)
    client = HttpClient(connect_timeout_ms=500, read_timeout_ms=2_000)

    def raft_status(node_id: str) -> dict[str, Any] | None:
        url = f"http://127.0.0.1:{cluster.cluster_ports[node_id]}/raft/v1/status"
        try:
            response = client.get(url, bearer=ENV["RUNNER_CLUSTER_TOKEN"])
        except ClientError:
            return None
        return json.loads(response.body) if response.status == 200 else None

    def create(names: list[str]) -> None:
        for name in names:  # the owner is looked up each time: a slow machine may move it
            reply = cluster.owner().command(
                {"action": "create", "definition": {**YEARLY, "name": name}}
            )
            assert reply["ok"], reply

    def full_voter_by_snapshot(node_id: str) -> dict[str, Any]:
        leader_id = cluster.owner().node_id
        commit = wait_for(lambda: raft_status(leader_id), "leader status")["commit_index"]
        return wait_for(
            lambda: (
                (s := raft_status(node_id))
                and s["recovering"] is False
                and s["snapshots_installed"] >= 1
                and s["commit_index"] >= commit
                and s
            ),
            f"{node_id} to catch up by snapshot and vote again",
            timeout_s=30,
        )

    try:
        cluster.start()
        owner = cluster.owner()
        create([f"a{i}" for i in range(3)])
        restored, recovered = (v for v in cluster.voters.values() if v is not owner)
        backup = tmp_path / "backup.sqlite3"
        taken = run_admin("backup", str(tmp_path / restored.node_id), "--out", str(backup))
        assert taken.returncode == 0, taken.stderr
        assert "every checksum verified" in taken.stdout
        again = run_admin("backup", str(tmp_path / restored.node_id), "--out", str(backup))
        assert again.returncode == 1 and "never overwrites" in again.stderr

        # The restored voter's store is lost; the cluster moves on and compacts past the backup.
        assert restored.terminate() == 0
        (tmp_path / restored.node_id).rename(tmp_path / f"{restored.node_id}.lost")
        create([f"b{i}" for i in range(20)])
        put = run_admin("restore", "--config", str(restored.config), "--from", str(backup))
        assert put.returncode == 0, put.stderr
        assert "RECOVERING since" in put.stdout
        refused = run_admin("restore", "--config", str(restored.config), "--from", str(backup))
        assert refused.returncode == 1 and "move it aside first" in refused.stderr
        restored.start()
        full_voter_by_snapshot(restored.node_id)

        # A store lost without a backup: `recover` makes it empty; it too catches up by snapshot.
        assert recovered.terminate() == 0
        (tmp_path / recovered.node_id).rename(tmp_path / f"{recovered.node_id}.lost")
        create([f"c{i}" for i in range(10)])
        made = run_admin("recover", "--config", str(recovered.config))
        assert made.returncode == 0, made.stderr
        recovered.start()
        status = full_voter_by_snapshot(recovered.node_id)
        assert status["snapshot_index"] > 1  # it never replayed the log from index 1
        listed = cluster.owner().command({"action": "list"})["schedules"]
        names = sorted(s["definition"]["name"] for s in listed)
        assert len(names) == 33
    except AssertionError as exc:
        last = {n: raft_status(n) for n in cluster.voters}
        raise AssertionError(f"{exc}\n{last}\n{cluster.dump_logs()}") from None
    finally:
        client.close()
        cluster.stop()
