"""Commit latency while a log compaction runs, against none, in the same run (not run by pytest).

One voter (``RaftReplication`` single flavour) on a real ``RunnerStore`` (WAL, synchronous=FULL):
every proposal is committed by its own durable write, so a proposal's latency is what a commit
costs the leader. The log is first filled with ``--backlog`` entries of 1.5 KB (about one
occurrence each) and checkpointed. Then, alternating in rounds so that machine load affects both
sides alike: ``--commits`` sequential proposals with no compaction running, then a compaction of
``--chunk`` entries is triggered (the node forgets them, ``storage.compact`` records it, the
reclaimer deletes the rows 256 per transaction off the node's turn) and ``--commits`` proposals
are measured while the reclaimer works. Target (issue 19): p99 while compacting <= 1.5 x without.

    .venv/bin/python bench/bench_raft_compaction.py [--backlog 40000] [--chunk 5000]
        [--commits 300] [--rounds 6] [--dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from appliance.core.canonical import canonical_digest
from appliance.raft.compaction import CompactionPolicy
from appliance.replication.raft_replication import NoNetwork, RaftReplication
from appliance.store.runner_store import RunnerStore

CONTRACT = {"voters": {"n1": "127.0.0.1:4401"}, "limits": {}, "schedules": [], "remote": {}}
PAYLOAD = b"\x01" + b"x" * 1500
NEVER = CompactionPolicy(snapshot_entries=10**9, trailing_entries=0, snapshot_bytes=1 << 50)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backlog", type=int, default=40_000)
    parser.add_argument("--chunk", type=int, default=5_000)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-", dir=args.dir))
    store = RunnerStore.create_or_open(
        root / "n1", contract=CONTRACT, contract_digest=canonical_digest(CONTRACT)
    )
    for start in range(1, args.backlog + 1, 500):
        stop = min(start + 500, args.backlog + 1)
        store.persist(term=1, voted_for="n1", entries=[(i, 1, PAYLOAD) for i in range(start, stop)])
    store.save_transition(args.backlog, {"meta": b"{}"})
    replication = RaftReplication(
        node_id="n1",
        voters=("n1",),
        storage=store,
        transport=NoNetwork(),
        apply=lambda index, data: index,
        applied_index=args.backlog,
        compaction=NEVER,  # the bench triggers compactions itself (below)
    )
    driver = replication.driver
    replication.start()
    command = b"y" * 1500
    quiet: list[float] = []
    busy: list[float] = []
    reclaim_s: list[float] = []

    def commit_many(sink: list[float], stop_when_idle: bool) -> None:
        for _ in range(args.commits):
            t0 = time.perf_counter()
            replication.propose(command, timeout_s=10)
            sink.append((time.perf_counter() - t0) * 1000)
            if stop_when_idle and driver.reclaimer is not None and driver.reclaimer.wait_idle(0):
                return

    try:
        replication.propose(command, timeout_s=10)  # the barrier of its first term
        compacted = 0
        for _round in range(args.rounds):
            commit_many(quiet, stop_when_idle=False)
            applied = driver._node.applied_index
            store.save_transition(applied, {})  # the checkpoint covers what was applied
            target = min(compacted + args.chunk, applied)
            with driver._turn:  # what the driver does at a tick when its policy says so
                term = driver._node.compact(target)
                store.compact(target, term, ("n1",))
            assert driver.reclaimer is not None
            started = time.perf_counter()
            driver.reclaimer.poke()
            commit_many(busy, stop_when_idle=True)
            driver.reclaimer.wait_idle(60)
            reclaim_s.append(time.perf_counter() - started)
            compacted = target
    finally:
        replication.stop()
        store.close()
    q50, q99 = statistics.median(quiet), pct(quiet, 0.99)
    b50, b99 = statistics.median(busy), pct(busy, 0.99)
    print(f"store {root}, backlog {args.backlog} entries of {len(PAYLOAD)} B, chunk {args.chunk}")
    print(f"without compaction: {len(quiet)} commits, p50 {q50:.3f} ms, p99 {q99:.3f} ms")
    print(f"while compacting:   {len(busy)} commits, p50 {b50:.3f} ms, p99 {b99:.3f} ms")
    print(
        f"ratio p99 {b99 / q99:.2f} (target <= 1.5), p50 {b50 / q50:.2f}; each compaction of "
        f"{args.chunk} entries took {statistics.median(reclaim_s):.2f} s to reclaim (median)"
    )


if __name__ == "__main__":
    main()
