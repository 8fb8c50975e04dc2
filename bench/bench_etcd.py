"""Benchmark: propose→applied latency and failover time, etcd backend vs the built-in Raft.

Same run, same machine: three runner-side members on a real 3-member etcd cluster on loopback,
and three in-process built-in Raft voters (loopback transport through the wire codec, in-memory
log). Latency: sequential proposals on the leader, from ``propose`` to the apply result.
Failover: the leader is cut off without a goodbye (etcd: its lease is no longer kept alive, as if
the process were frozen; Raft: its messages are dropped), then the time until another member has
committed a new proposal.
Run: ``PYTHONPATH=. .venv/bin/python bench/bench_etcd.py [proposals] [failovers]``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from appliance.raft import NotLeader
from appliance.replication.etcd import EtcdReplication
from tests.etcd.cluster import EtcdCluster
from tests.etcd.members import Trio as EtcdTrio
from tests.replication.test_replication import Trio as RaftTrio


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def latency_ms(propose: object, n: int) -> list[float]:
    samples = []
    for i in range(n):
        start = time.perf_counter()
        propose(b"bench-%d" % i, timeout_s=10)  # type: ignore[operator]
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def commit_anywhere(members: list[object], deadline_s: float) -> None:
    while time.monotonic() < deadline_s:
        for member in members:
            if member.is_leader():  # type: ignore[attr-defined]
                try:
                    member.propose(b"after-failover", timeout_s=5)  # type: ignore[attr-defined]
                    return
                except (NotLeader, TimeoutError):
                    pass
        time.sleep(0.005)
    raise RuntimeError("no commit after failover")


def etcd_run(endpoints: list[str], n: int, failovers: int) -> tuple[list[float], list[float]]:
    trio = EtcdTrio(endpoints, ttl_s=2).start()
    try:
        leader = trio.leader()
        samples = latency_ms(leader.propose, n)
    finally:
        trio.stop()
    times = []
    for _ in range(failovers):
        frozen = threading.Event()
        trio = EtcdTrio(endpoints, ttl_s=2).start()
        try:
            old: EtcdReplication = trio.leader()
            old.propose(b"warm", timeout_s=10)
            old.gateway.lease_keepalive = lambda _id, f=frozen, **_: f.wait(30) and 0  # type: ignore[method-assign]
            old.stop = lambda: None  # type: ignore[method-assign]  # no graceful revoke
            start = time.monotonic()
            others = [m for m in trio.members.values() if m is not old]
            commit_anywhere(others, start + 30)
            times.append((time.monotonic() - start) * 1000)
        finally:
            frozen.set()
            for m in trio.members.values():
                EtcdReplication.stop(m)
    return samples, times


def raft_run(n: int, failovers: int) -> tuple[list[float], list[float]]:
    samples: list[float] = []
    times = []
    for round_ in range(failovers + 1):
        trio = RaftTrio()
        for member in trio.members.values():
            member.start()
        try:
            leader = trio.leader()
            if round_ == 0:
                samples = latency_ms(leader.propose, n)
                continue
            leader.propose(b"warm", timeout_s=10)
            old_id = leader.status()["node_id"]
            trio.net.down.add(old_id)
            start = time.monotonic()
            others = [m for i, m in trio.members.items() if i != old_id]
            commit_anywhere(others, start + 30)
            times.append((time.monotonic() - start) * 1000)
        finally:
            for member in trio.members.values():
                member.stop()
    return samples, times


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    failovers = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with tempfile.TemporaryDirectory() as tmp:
        cluster = EtcdCluster(Path(tmp))
        cluster.start()
        try:
            etcd_lat, etcd_fail = etcd_run(cluster.endpoints, n, failovers)
        finally:
            cluster.stop()
    raft_lat, raft_fail = raft_run(n, failovers)
    print(f"proposals={n} failovers={failovers}")
    print("| backend | propose→applied p50 ms | p99 ms | failover ms (each) | median |")
    print("|---|---|---|---|---|")
    for name, lat, fail in (
        ("etcd (3 members, TTL 2 s)", etcd_lat, etcd_fail),
        ("built-in raft (3 voters)", raft_lat, raft_fail),
    ):
        each = ", ".join(f"{t:.0f}" for t in fail)
        print(
            f"| {name} | {percentile(lat, 50):.2f} | {percentile(lat, 99):.2f} | {each} | "
            f"{statistics.median(fail):.0f} |"
        )


if __name__ == "__main__":
    main()
