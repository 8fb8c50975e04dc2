"""Real ``appliance runner`` processes on etcd: one stopped across three compactions catches up by
installing etcd's snapshot (issue 19 item 6, end to end through RunnerProcess and EtcdMember).

Three runners share one etcd prefix with tiny thresholds (``raft.snapshot_entries`` 5,
``trailing_entries`` 2). One is stopped; the owner commits more schedules and snapshots at least
three times past the stopped runner's applied index. The stopped runner restarts, installs the
snapshot within 5 s, and its checkpoint ends byte-identical to the owner's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import apsw

from appliance.replication.etcd_gateway import EtcdGateway, prefix_end
from appliance.replication.etcd_snapshot import SnapshotKeys, SnapshotMeta, read_meta
from tests.etcd.cluster import EtcdCluster
from tests.etcd.members import fresh_prefix
from tests.runner.cluster import DEMO, Cluster, wait_for

TINY = {"snapshot_entries": 5, "trailing_entries": 2}
YEARLY = {**DEMO, "cron": "0 0 1 1 *"}  # never due while the test runs: nothing else commits
CATCH_UP_S = 5.0


def checkpoint_of(data_dir: Path) -> tuple[int, list[tuple[str, bytes]]]:
    conn = apsw.Connection(str(data_dir / "runner.sqlite3"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        applied = conn.execute("SELECT applied_index FROM checkpoint").fetchall()[0][0]
        parts = conn.execute("SELECT name, data FROM checkpoint_part ORDER BY name").fetchall()
        return applied, parts
    finally:
        conn.close()


def last_log_index(gateway: EtcdGateway, keys: SnapshotKeys) -> int:
    _, kvs = gateway.range(keys.log, prefix_end(keys.log), limit=1, descending=True)
    return int(kvs[0].key[len(keys.log) :]) if kvs else 0


def test_a_runner_process_behind_three_etcd_compactions_catches_up_by_snapshot(
    etcd_cluster: EtcdCluster, tmp_path: Path
) -> None:
    replication = {
        "kind": "etcd",
        "endpoints": etcd_cluster.endpoints,
        "prefix": fresh_prefix(),
        "lease_ttl_seconds": 2,
    }
    cluster = Cluster(tmp_path, 3, time_scale=1.0, replication=replication)
    for voter in cluster.voters.values():  # the harness leaves `raft` out on etcd: add ours
        doc = json.loads(voter.config.read_text())
        voter.config.write_text(json.dumps({**doc, "raft": TINY}))
    keys = SnapshotKeys(replication["prefix"].encode())
    gateway = EtcdGateway(etcd_cluster.endpoints)

    def holds(node_id: str, index: int) -> bool:
        """The runner's durable checkpoint has reached ``index`` (read while it runs)."""
        try:
            return checkpoint_of(tmp_path / node_id)[0] >= index
        except (apsw.Error, IndexError):
            return False

    try:
        cluster.start()
        owner = cluster.owner()
        for i in range(3):
            created = owner.command({"action": "create", "definition": {**YEARLY, "name": f"a{i}"}})
            assert created["ok"], created
        behind = next(v for v in cluster.voters.values() if v is not owner)
        wait_for(lambda: holds(behind.node_id, last_log_index(gateway, keys)), "it follows")
        assert behind.terminate() == 0
        behind_applied = checkpoint_of(tmp_path / behind.node_id)[0]
        seen: list[SnapshotMeta] = []
        for round_ in range(5):
            for i in range(6):
                doc = {**YEARLY, "name": f"b{round_}-{i}"}
                assert owner.command({"action": "create", "definition": doc})["ok"]
            before = seen[-1].index if seen else 0

            def snapshotted(before: int = before) -> SnapshotMeta | None:
                meta, _ = read_meta(gateway, keys)
                return meta if meta is not None and meta.index > before else None

            seen.append(wait_for(snapshotted, "a snapshot in etcd", timeout_s=10))
        assert len({m.index for m in seen}) >= 3
        assert seen[-1].first_index > behind_applied + 1  # behind the pruned point
        _, kvs = gateway.range(keys.log, prefix_end(keys.log))
        assert int(kvs[0].key[len(keys.log) :]) >= seen[-1].first_index  # keys below: gone

        started = time.monotonic()
        behind.start()
        wait_for(
            lambda: "installing the snapshot at" in behind.log.read_text(),
            "the restarted runner installs etcd's snapshot",
            timeout_s=30,
        )
        took_s = time.monotonic() - started
        assert took_s <= CATCH_UP_S, f"installed in {took_s:.2f} s (process start included)"
        # Quiet now: stop the late runner once it holds the last entry, then the owner.
        last = last_log_index(gateway, keys)
        wait_for(lambda: holds(behind.node_id, last), "the restarted runner applies the last entry")
        # (the install can land before its startup ends; SIGTERM is handled once it has started)
        wait_for(
            lambda: behind.log.read_text().count('"event":"started"') == 2, "the restart completes"
        )
        # Followers first, so no runner is left to take ownership (and commit) after the owner.
        third = next(v for v in cluster.voters.values() if v not in (owner, behind))
        assert third.terminate() == 0
        assert behind.terminate() == 0
        assert owner.terminate() == 0
        assert last_log_index(gateway, keys) == last  # nothing committed after the stop
        owner_ckpt = checkpoint_of(tmp_path / owner.node_id)
        behind_ckpt = checkpoint_of(tmp_path / behind.node_id)
        assert behind_ckpt[0] == owner_ckpt[0] == last
        assert behind_ckpt == owner_ckpt  # byte-identical, part by part
        print(f"installed etcd's snapshot in {took_s:.2f} s (process start included)")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        gateway.close()
        cluster.stop()
