"""Snapshots and log compaction on the etcd backend, against a real 3-member etcd (issue 19 item 6).

Three runners with real stores and machines apply the simulator's command log through etcd at tiny
thresholds. One is stopped; the owner snapshots its checkpoint into etcd several times and deletes
the log below it; etcd's history is compacted. The stopped runner restarts behind the first kept
log key and catches up by installing the snapshot, ending byte-identical to the owner.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.replication.etcd import EtcdFatal, EtcdReplication
from appliance.replication.etcd_gateway import (
    EtcdGateway,
    EtcdUnavailable,
    prefix_end,
    put_op,
    range_op,
)
from appliance.replication.etcd_snapshot import (
    CHUNK_BYTES,
    SnapshotInvalid,
    SnapshotKeys,
    SnapshotMeta,
    SnapshotMoved,
    decode_meta,
    read_meta,
    read_snapshot,
    write_snapshot,
)
from appliance.runner.machine import Machine
from appliance.sim.system.world import LIMITS, SystemOptions, SystemSim
from appliance.store.runner_store import RunnerStore
from tests.etcd.cluster import EtcdCluster
from tests.etcd.members import WAIT_S, fresh_prefix, settings, wait_for
from tests.store.helpers import open_runner

SNAPSHOT_ENTRIES = 5
TRAILING_ENTRIES = 2
CATCH_UP_S = 5.0  # issue 19: a runner behind the pruned point catches up within 5 s
DIGEST = "contract-digest-under-test"


def commands(seed: int = 10) -> list[bytes]:  # seed 10 commits 58 entries
    """A real committed log: the whole-system simulator's (owners, claims, outcomes, cancels)."""
    sim = SystemSim(seed, SystemOptions())
    sim.run()
    committed = sim.ledger.committed
    return [committed[index] for index in sorted(committed)]


class StoredRunner:
    """A runner's replication, machine and store; ``stop`` leaves the store on disk."""

    def __init__(
        self,
        node_id: str,
        data_dir: Path,
        endpoints: list[str],
        prefix: str,
        *,
        check_interval_s: float = 0.05,
        **tuning: Any,
    ) -> None:
        self.node_id, self.data_dir, self.endpoints, self.prefix = (
            node_id,
            data_dir,
            endpoints,
            prefix,
        )
        self.store: RunnerStore = open_runner(data_dir)
        self.machine = Machine(self.store, LIMITS)
        tuned = dataclasses.replace(
            settings(endpoints, prefix),
            **{
                "snapshot_entries": SNAPSHOT_ENTRIES,
                "trailing_entries": TRAILING_ENTRIES,
                "compaction_check_interval_s": check_interval_s,
                "contract_digest": DIGEST,
                **tuning,
            },
        )
        self.replication = EtcdReplication(
            node_id=node_id,
            settings=tuned,
            apply=self.machine.apply,
            applied_index=self.machine.applied_index,
            store=self.store,
            restore=self.machine.restore,
        )
        self.replication.start()

    def stop(self) -> None:
        self.replication.stop()
        assert self.machine.close()
        self.store.close()

    def checkpoint(self) -> tuple[int, dict[str, bytes]]:
        assert self.machine.flush(WAIT_S)
        return self.store.load_checkpoint()


def log_indexes(gateway: EtcdGateway, keys: SnapshotKeys) -> list[int]:
    _, kvs = gateway.range(keys.log, prefix_end(keys.log))
    return [int(kv.key[len(keys.log) :]) for kv in kvs]


def consistent_view(gateway: EtcdGateway, keys: SnapshotKeys) -> tuple[Any, list[int], list[bytes]]:
    """(snapshot metadata, log indexes, chunk keys) read in ONE txn, so at one revision."""
    result = gateway.txn(
        [],
        [
            {"request_range": range_op(keys.meta)},
            {"request_range": range_op(keys.log, prefix_end(keys.log))},
            {"request_range": range_op(keys.chunks, prefix_end(keys.chunks))},
        ],
        idempotent=True,
    )
    meta_kvs, log_kvs, chunk_kvs = result.ranges()
    meta = decode_meta(meta_kvs[0].value) if meta_kvs else None
    indexes = [int(kv.key[len(keys.log) :]) for kv in log_kvs]
    return meta, indexes, [kv.key for kv in chunk_kvs]


def history_readable_at(gateway: EtcdGateway, revision: int) -> bool:
    try:
        gateway.call("/v3/kv/range", {"key": "AA==", "revision": str(revision)}, idempotent=False)
    except EtcdUnavailable as exc:
        assert "compacted" in str(exc), exc
        return False
    return True


def test_a_runner_stopped_across_compactions_catches_up_by_snapshot(
    etcd_cluster: EtcdCluster, tmp_path: Path
) -> None:
    workload = commands()
    assert len(workload) > 50
    prefix = fresh_prefix()
    keys = SnapshotKeys(prefix.encode())
    gateway = EtcdGateway(etcd_cluster.endpoints)
    runners = {
        n: StoredRunner(n, tmp_path / n, etcd_cluster.endpoints, prefix) for n in ("r1", "r2", "r3")
    }
    try:
        wait_for(lambda: sum(r.replication.is_leader() for r in runners.values()) == 1, "a leader")
        owner = next(r for r in runners.values() if r.replication.is_leader())
        late = next(r for r in runners.values() if r is not owner)
        split = 10
        for command in workload[:split]:
            owner.replication.propose(command, timeout_s=WAIT_S)
        wait_for(lambda: late.machine.applied_index == split, "the late runner applies 10")
        revision_before, _ = gateway.range(keys.meta)
        assert history_readable_at(gateway, revision_before)
        late.stop()
        for command in workload[split:]:
            owner.replication.propose(command, timeout_s=WAIT_S)
        total = len(workload)
        wait_for(
            lambda: owner.replication.status()["snapshots_written"] >= 3, "three compactions", 20
        )
        wait_for(lambda: owner.store.applied_index() == total, "the owner's checkpoint at the end")
        views: list[Any] = []

        def settled() -> bool:
            # Between a snapshot's chunk puts and its publishing txn the next one's chunks show.
            views[:] = [consistent_view(gateway, keys)]
            # And no further snapshot is due at the owner's final checkpoint.
            meta, _indexes, chunk_keys = views[0]
            if meta is None or total - TRAILING_ENTRIES + 1 - meta.first_index >= SNAPSHOT_ENTRIES:
                return False
            return chunk_keys == [keys.chunk(meta.index, n) for n in range(meta.chunks)]

        wait_for(settled, "the owner's compaction settles")
        meta, indexes, _chunks = views[0]
        assert meta is not None and meta.contract_digest == DIGEST
        assert meta.first_index == meta.index - TRAILING_ENTRIES + 1
        assert meta.first_index > split + 1  # the late runner is behind the pruned point
        # Log keys below the snapshot's first kept index are gone; the rest are all there.
        assert indexes == list(range(meta.first_index, total + 1))
        # etcd's history compaction moved past the revision read before the stop.
        assert owner.replication.status()["compact_revision"] > revision_before
        assert not history_readable_at(gateway, revision_before)

        started_s = time.monotonic()
        restarted = StoredRunner(late.node_id, late.data_dir, etcd_cluster.endpoints, prefix)
        runners[late.node_id] = restarted
        wait_for(
            lambda: restarted.machine.applied_index == total, "catch-up by snapshot", CATCH_UP_S
        )
        assert time.monotonic() - started_s < CATCH_UP_S
        assert restarted.replication.status()["snapshots_installed"] == 1
        assert restarted.store.snapshot_meta()[0] >= meta.index  # it installed etcd's snapshot
        assert restarted.checkpoint() == owner.checkpoint()  # byte-identical parts, same index
        assert restarted.machine.read(lambda s: s.to_json()) == owner.machine.read(
            lambda s: s.to_json()
        )
        # It goes on applying from the log after the snapshot.
        more = workload[-1]
        owner.replication.propose(more, timeout_s=WAIT_S)
        wait_for(lambda: restarted.machine.applied_index == total + 1, "applies past the snapshot")
    finally:
        for runner in runners.values():
            if not runner.replication._stopped.is_set():
                runner.stop()
        gateway.close()


def test_a_runner_that_cannot_install_the_snapshot_stops_instead_of_skipping(
    etcd_cluster: EtcdCluster, tmp_path: Path
) -> None:
    prefix = fresh_prefix()
    owner = StoredRunner("o1", tmp_path / "o1", etcd_cluster.endpoints, prefix)
    try:
        wait_for(owner.replication.is_leader, "the owner leads")
        for command in commands()[:12]:
            owner.replication.propose(command, timeout_s=WAIT_S)
        wait_for(lambda: owner.replication.status()["snapshots_written"] >= 1, "a compaction")
        cases = (
            (DIGEST, None, "no store"),  # nothing to install into
            ("another-contract", open_runner(tmp_path / "other"), "contract digest"),
        )
        for digest, store, says in cases:
            fatal: list[BaseException] = []
            applied: list[int] = []
            bare = EtcdReplication(
                node_id="bare",
                settings=dataclasses.replace(
                    settings(etcd_cluster.endpoints, prefix), contract_digest=digest
                ),
                apply=lambda i, c, applied=applied: applied.append(i),
                on_fatal=fatal.append,
                store=store,
            )
            bare.start()
            try:
                wait_for(lambda fatal=fatal: fatal, f"the runner stops ({says})")
            finally:
                bare.stop()
                if store is not None:
                    assert store.applied_index() == 0  # nothing was installed
                    store.close()
            assert isinstance(fatal[0], EtcdFatal) and says in str(fatal[0]), fatal
            assert applied == []  # it never applied an entry after a gap
    finally:
        owner.stop()


def test_only_the_leader_writes_and_a_deposed_tenure_publishes_nothing(
    etcd_cluster: EtcdCluster, tmp_path: Path
) -> None:
    prefix = fresh_prefix()
    keys = SnapshotKeys(prefix.encode())
    # Its own compaction thread waits an hour: this test calls compact_once itself.
    owner = StoredRunner(
        "o1", tmp_path / "o1", etcd_cluster.endpoints, prefix, check_interval_s=3600
    )
    gateway = EtcdGateway(etcd_cluster.endpoints)
    try:
        wait_for(owner.replication.is_leader, "the owner leads")
        tenure = owner.replication._tenure
        assert tenure is not None
        stale: Any = dataclasses.replace(tenure, create_revision=tenure.create_revision - 1)
        for command in commands()[:12]:
            owner.replication.propose(command, timeout_s=WAIT_S)
        wait_for(lambda: owner.store.applied_index() == 12, "the checkpoint reaches 12")
        assert owner.replication.compact_once(stale) is False
        assert log_indexes(gateway, keys) == list(range(1, 13))
        assert gateway.range(keys.chunks, prefix_end(keys.chunks))[1] == []  # not even a chunk
        assert read_meta(gateway, keys) == (None, 0)
        # The same call under the live tenure compacts: the guard was the only difference.
        assert owner.replication.compact_once(tenure) is True
        assert log_indexes(gateway, keys) == list(range(12 - TRAILING_ENTRIES + 1, 13))
        assert owner.replication.compact_once(tenure) is False  # not due again yet
    finally:
        owner.stop()
        gateway.close()


def test_snapshot_metadata_is_checked_field_by_field() -> None:
    good = SnapshotMeta(10, 3, 9, "d", CHUNK_BYTES + 1, 2, "ab")
    assert decode_meta(good.encode()) == good
    at_limit = SnapshotMeta(10, 3, 10, "d", CHUNK_BYTES, 1, "ab")  # first kept == index
    assert decode_meta(at_limit.encode()) == at_limit
    for bad, says in (
        (dataclasses.replace(good, first_index=11), "first_index"),
        (dataclasses.replace(good, first_index=0), "first_index"),
        (dataclasses.replace(good, chunks=1), "chunk count"),
        (dataclasses.replace(good, index=-1), "bad number"),
    ):
        with pytest.raises(SnapshotInvalid, match=says):
            decode_meta(bad.encode())
    with pytest.raises(SnapshotInvalid, match="other fields"):
        decode_meta(b'{"index": 1}')
    with pytest.raises(SnapshotInvalid, match="not JSON"):
        decode_meta(b"{")


def test_a_snapshot_larger_than_a_chunk_is_cut_at_the_boundary_and_read_back_whole(
    etcd_cluster: EtcdCluster,
) -> None:
    keys = SnapshotKeys(fresh_prefix().encode())
    leader_key = keys.meta + b"-leader"
    gateway = EtcdGateway(etcd_cluster.endpoints)
    try:
        gateway.txn([], [put_op(leader_key, b"me")])
        tenure_revision = gateway.range(leader_key)[1][0].create_revision
        meta_revision = 0
        for size in (CHUNK_BYTES, CHUNK_BYTES + 1, 2 * CHUNK_BYTES + 7):
            data = os.urandom(size)
            meta = SnapshotMeta(
                index=size,
                term=tenure_revision,
                first_index=size,
                contract_digest=DIGEST,
                size_bytes=size,
                chunks=-(-size // CHUNK_BYTES),
                sha256=hashlib.sha256(data).hexdigest(),
            )
            revision = write_snapshot(
                gateway,
                keys,
                leader_key=leader_key,
                tenure_revision=tenure_revision,
                meta_revision=meta_revision,
                meta=meta,
                data=data,
            )
            assert revision is not None
            read, meta_revision = read_meta(gateway, keys)
            assert read == meta
            assert read_snapshot(gateway, keys, meta).data == data
            _, chunks = gateway.range(keys.chunks, prefix_end(keys.chunks))
            assert [len(kv.value) for kv in chunks][:-1] == [CHUNK_BYTES] * (meta.chunks - 1)
            assert len(chunks) == meta.chunks  # the previous snapshot's chunks are gone
        # A metadata revision that is not the current one publishes nothing.
        assert (
            write_snapshot(
                gateway,
                keys,
                leader_key=leader_key,
                tenure_revision=tenure_revision,
                meta_revision=meta_revision - 1,
                meta=dataclasses.replace(meta, index=meta.index + 1),
                data=data,
            )
            is None
        )
        assert read_meta(gateway, keys)[0] == meta
        # A chunk that no longer matches the SHA-256 is never handed to the store.
        gateway.txn([], [put_op(keys.chunk(meta.index, 0), b"x" * CHUNK_BYTES)])
        with pytest.raises(SnapshotMoved, match="SHA-256"):
            read_snapshot(gateway, keys, meta)
    finally:
        gateway.close()


def test_the_byte_trigger_compacts_at_its_threshold_before_the_entry_count(
    etcd_cluster: EtcdCluster, tmp_path: Path
) -> None:
    threshold_bytes = 2_000
    prefix = fresh_prefix()
    owner = StoredRunner(
        "o1",
        tmp_path / "o1",
        etcd_cluster.endpoints,
        prefix,
        check_interval_s=3600,
        snapshot_entries=1_000,  # never due by count here
        snapshot_bytes=threshold_bytes,
    )
    try:
        wait_for(owner.replication.is_leader, "the owner leads")
        tenure = owner.replication._tenure
        assert tenure is not None
        outcomes: list[tuple[int, bool]] = []
        for index, command in enumerate(commands()[:40], start=1):
            owner.replication.propose(command, timeout_s=WAIT_S)
            wait_for(lambda index=index: owner.store.applied_index() == index, "checkpoint")
            kept = owner.replication._sizes_bytes  # bytes of the kept log this owner applied
            first_before = owner.replication.status()["first_log_index"]
            gain = index - TRAILING_ENTRIES + 1 - first_before > 0
            written = owner.replication.compact_once(tenure)
            assert written == (kept >= threshold_bytes and gain), (index, kept, first_before)
            outcomes.append((kept, written))
        assert sum(written for _, written in outcomes) >= 2  # due by bytes, twice at least
        # Just below the threshold it waited; the entry count alone never made it due.
        assert any(kept < threshold_bytes for kept, written in outcomes if not written)
    finally:
        owner.stop()
