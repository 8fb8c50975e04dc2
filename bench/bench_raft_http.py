"""Built-in Raft over real loopback HTTP with durable SQLite stores (RunnerStore, synchronous=FULL).

Three voters in one process (each with its own waitress listener, pooled client and store in a
temporary directory): sequential commit latency (p50, p99), throughput with 8 concurrent
proposers (group commit), and failover time (stop the leader's member, then time until the next
proposal commits on the new leader), with the default timeouts (heartbeat 100 ms, election
1-2 s). Not the SIGKILL / separate-process benchmark of issue 4 (that needs `appliance runner`),
but the same code path minus process boundaries.

    .venv/bin/python bench/bench_raft_http.py [--proposals N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.credentials import resolve_runner_credentials
from appliance.config.runner import parse_runner_config
from appliance.replication.raft_member import RaftMember
from appliance.store.runner_store import RunnerStore

# The voters' configs are the Raft member tests' own (one definition of a test cluster).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.replication.test_raft_member import ENV, free_ports, runner_doc


def wait_leader(members: dict[str, RaftMember], timeout_s: float = 30) -> RaftMember:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leaders = [m for m in members.values() if m.replication.is_leader()]
        if len(leaders) == 1:
            return leaders[0]
        time.sleep(0.001)
    raise RuntimeError("no leader")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--proposals", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ids = ["n1", "n2", "n3"]
        ports = dict(zip(ids, free_ports(3), strict=True))
        members, stores = {}, []
        for node_id in ids:
            cfg = parse_runner_config(runner_doc(node_id, ports, root))
            digest = contract_digest(cfg)
            store = RunnerStore.create_or_open(
                cfg.data_dir, contract=sealed_contract(cfg), contract_digest=digest
            )
            stores.append(store)
            members[node_id] = RaftMember(
                cfg,
                resolve_runner_credentials(cfg, ENV),
                store,
                lambda i, c: i,
                contract_digest=digest,
            )
        for member in members.values():
            member.start()
        leader = wait_leader(members)
        latencies = []
        for n in range(args.proposals):
            start = time.perf_counter()
            leader.replication.propose(b"seq-%d" % n, timeout_s=10)
            latencies.append((time.perf_counter() - start) * 1000)
        latencies.sort()
        start = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda n: leader.replication.propose(b"p%d" % n, timeout_s=10),
                    range(args.proposals * 4),
                )
            )
        throughput = args.proposals * 4 / (time.perf_counter() - start)
        old_id = next(i for i, m in members.items() if m is leader)
        killed_at = time.perf_counter()
        leader.stop()
        survivors = {i: m for i, m in members.items() if i != old_id}
        while True:
            new = wait_leader(survivors)
            try:
                new.replication.propose(b"after-failover", timeout_s=5)
                break
            except Exception:
                time.sleep(0.001)
        failover_ms = (time.perf_counter() - killed_at) * 1000
        print(
            f"3 voters, loopback HTTP, SQLite synchronous=FULL: "
            f"sequential commit p50 {statistics.median(latencies):.2f} ms, "
            f"p99 {latencies[int(len(latencies) * 0.99) - 1]:.2f} ms; "
            f"8 proposers {throughput:.0f}/s; failover {failover_ms:.0f} ms"
        )
        for member in survivors.values():
            member.stop()
        for store in stores:
            store.close()


if __name__ == "__main__":
    main()
