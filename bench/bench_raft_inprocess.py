"""Raft core + driver overhead, in one process: no HTTP, no fsync (MemoryLogStorage).

Three RaftReplication members connected by a loopback transport that still encodes and decodes
every message with the wire codec. Measures sequential commit latency (p50, p99) and throughput
with 8 concurrent proposers; the result is the CPU cost floor of our Raft, to compare with the
real loopback-HTTP + fsync benchmark once the transport exists.

    .venv/bin/python bench/bench_raft_inprocess.py [--proposals N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from appliance.raft import MemoryLogStorage, Message
from appliance.raft.codec import decode, encode
from appliance.replication import RaftReplication, single

DIGEST = "d" * 64


class Loopback:
    def __init__(self) -> None:
        self.members: dict[str, RaftReplication] = {}

    def send(self, message: Message) -> None:
        self.members[message.to].deliver(decode(encode(message, DIGEST), DIGEST))


def trio() -> list[RaftReplication]:
    net = Loopback()
    ids = ["n1", "n2", "n3"]
    for node_id in ids:
        net.members[node_id] = RaftReplication(
            node_id=node_id,
            voters=ids,
            storage=MemoryLogStorage(),
            transport=net,
            apply=lambda index, command: index,
            heartbeat_ms=20,
            election_timeout_min_ms=200,
            election_timeout_max_ms=400,
        )
    members = list(net.members.values())
    for member in members:
        member.start()
    return members


def measure(leader: RaftReplication, proposals: int) -> dict[str, float]:
    latencies = []
    for n in range(proposals):
        start = time.perf_counter()
        leader.propose(b"seq-%d" % n, timeout_s=10)
        latencies.append((time.perf_counter() - start) * 1000)
    latencies.sort()
    start = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: leader.propose(b"par-%d" % n, timeout_s=10), range(proposals)))
    elapsed = time.perf_counter() - start
    return {
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1],
        "throughput_8_per_s": proposals / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--proposals", type=int, default=2000)
    args = parser.parse_args()
    members = trio()
    deadline = time.monotonic() + 10
    while not any(m.is_leader() for m in members) and time.monotonic() < deadline:
        time.sleep(0.01)
    leader = next(m for m in members if m.is_leader())
    result = measure(leader, args.proposals)
    print("3 voters in-process (codec, no fsync):", {k: round(v, 3) for k, v in result.items()})
    for m in members:
        m.stop()
    lone = single(node_id="solo", storage=MemoryLogStorage(), apply=lambda i, c: i)
    lone.start()
    result = measure(lone, args.proposals)
    print("single voter (no fsync):", {k: round(v, 3) for k, v in result.items()})
    lone.stop()


if __name__ == "__main__":
    main()
