"""A follower stopped across several log compactions catches up by snapshot (issue 19).

Three real ``appliance runner`` voters with tiny compaction thresholds (``raft.snapshot_entries``
5, ``trailing_entries`` 2). One follower is stopped; the cluster commits 30 more schedules, and
the leader compacts its log at least three times past the follower's last entry. The follower
restarts and must catch up by installing the leader's snapshot within 5 s, after which its
checkpoint is byte-identical to the leader's.
"""

from __future__ import annotations

import json
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
        for i in range(30):
            assert owner.command({"action": "create", "definition": {**YEARLY, "name": f"b{i}"}})[
                "ok"
            ]
        leader = wait_for(
            lambda: (
                (s := raft_status(owner.node_id))
                and s["compactions"] - left_at["compactions"] >= 3
                and s["snapshot_index"] > left_at["last_log_index"]
                and s
            ),
            "three compactions past the stopped follower",
        )

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
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        client.close()
        cluster.stop()
