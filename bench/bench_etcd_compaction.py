"""Cost of one etcd-backend compaction at the default thresholds (issue 19 item 6).

A 3-member etcd on loopback (the tests' ``EtcdCluster``); 15,000 log keys of about 1.5 KB
(issue 19's size per occurrence, after base64) under a prefix: the steady log at
``snapshot_entries`` 10,000 + ``trailing_entries`` 5,000. Then one ``write_snapshot`` of a 1 MiB
checkpoint (2 chunks) that deletes the 10,000 keys below the first kept one, and etcd's history
compaction at its revision. Printed: the time of each, and put latency right after.

    .venv/bin/python bench/bench_etcd_compaction.py
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appliance.replication.etcd_gateway import EtcdGateway, put_op
from appliance.replication.etcd_snapshot import (
    CHUNK_BYTES,
    SnapshotKeys,
    SnapshotMeta,
    compact_history,
    write_snapshot,
)
from tests.etcd.cluster import EtcdCluster

LOG_KEYS = 15_000
FIRST_KEPT = 10_001
VALUE_BYTES = 1_100  # about 1.5 KB once base64
SNAPSHOT_BYTES = 1024 * 1024
PUTS_AFTER = 50


def main() -> None:
    with tempfile.TemporaryDirectory() as base:
        cluster = EtcdCluster(Path(base))
        cluster.start()
        try:
            run(cluster)
        finally:
            cluster.stop()


def run(cluster: EtcdCluster) -> None:
    gateway = EtcdGateway(cluster.endpoints)
    keys = SnapshotKeys(b"/bench")
    leader = b"/bench/leader"
    gateway.txn([], [put_op(leader, b"me")])
    tenure = gateway.range(leader)[1][0].create_revision
    value = os.urandom(VALUE_BYTES)
    started = time.monotonic()
    for first in range(1, LOG_KEYS + 1, 64):
        last = min(first + 64, LOG_KEYS + 1)
        gateway.txn([], [put_op(keys.log_key(i), value) for i in range(first, last)])
    print(f"wrote {LOG_KEYS} log keys in {time.monotonic() - started:.1f} s")
    data = os.urandom(SNAPSHOT_BYTES)
    meta = SnapshotMeta(
        index=LOG_KEYS,
        term=tenure,
        first_index=FIRST_KEPT,
        contract_digest="bench",
        size_bytes=len(data),
        chunks=-(-len(data) // CHUNK_BYTES),
        sha256=hashlib.sha256(data).hexdigest(),
    )
    t0 = time.monotonic()
    revision = write_snapshot(
        gateway,
        keys,
        leader_key=leader,
        tenure_revision=tenure,
        meta_revision=0,
        meta=meta,
        data=data,
    )
    t1 = time.monotonic()
    assert revision is not None
    compact_history(gateway, revision)
    t2 = time.monotonic()
    print(
        f"snapshot {SNAPSHOT_BYTES} B ({meta.chunks} chunks) + delete {FIRST_KEPT - 1} keys: "
        f"{t1 - t0:.3f} s; history compaction: {t2 - t1:.3f} s"
    )
    latencies = []
    for _ in range(PUTS_AFTER):
        sent = time.monotonic()
        gateway.txn([], [put_op(b"/bench/x", value)])
        latencies.append(time.monotonic() - sent)
    latencies.sort()
    print(
        f"put after it: p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms"
    )
    gateway.close()


if __name__ == "__main__":
    main()
