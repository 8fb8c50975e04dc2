"""Built-in Raft over real loopback HTTP with durable SQLite stores (RunnerStore, synchronous=FULL).

Three voters in one process (each with its own waitress listener, pooled client and store in a
temporary directory): sequential commit latency (p50, p99), throughput with 8 concurrent
proposers (group commit), and failover time (stop the leader's member, then time until the next
proposal commits on the new leader), with the default timeouts (heartbeat 100 ms, election
1-2 s). Not the SIGKILL / separate-process benchmark of issue 4 (that needs `appliance runner`),
but the same code path minus process boundaries.

    .venv/bin/python bench/bench_raft_http.py [--proposals N] [--tls | --compare-tls ROUNDS]

``--tls``: mutual TLS between the voters (a throwaway cluster CA, appliance.cluster_init.pki).
``--compare-tls ROUNDS``: the sequential commit p50 without and with mutual TLS, alternating in
the same run (ROUNDS of each), and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from appliance.cluster_init import pki
from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.credentials import resolve_runner_credentials
from appliance.config.runner import parse_runner_config
from appliance.http.tls import voter_name
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


def write_pki(root: Path, ids: list[str]) -> dict[str, dict[str, str]]:
    authority = pki.new_authority("bench cluster CA")
    tls_dir = root / "tls"
    tls_dir.mkdir()
    pki.write_public(tls_dir / "ca.pem", authority.cert_pem())
    sections = {}
    for node_id in ids:
        issued = pki.issue(
            authority, node_id, dns_names=[voter_name(node_id)], ip_addresses=["127.0.0.1"]
        )
        pki.write_public(tls_dir / f"{node_id}.pem", issued.cert_pem())
        pki.write_private(tls_dir / f"{node_id}.key", issued.key_pem())
        sections[node_id] = {
            "ca_file": str(tls_dir / "ca.pem"),
            "cert_file": str(tls_dir / f"{node_id}.pem"),
            "key_file": str(tls_dir / f"{node_id}.key"),
        }
    return sections


def start_cluster(root: Path, tls: bool) -> tuple[dict[str, RaftMember], list[RunnerStore]]:
    ids = ["n1", "n2", "n3"]
    ports = dict(zip(ids, free_ports(3), strict=True))
    sections = write_pki(root, ids) if tls else {}
    members, stores = {}, []
    for node_id in ids:
        doc = runner_doc(node_id, ports, root)
        if tls:
            doc["tls"] = sections[node_id]
        cfg = parse_runner_config(doc)
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
    return members, stores


def sequential_ms(leader: RaftMember, proposals: int) -> list[float]:
    latencies = []
    for n in range(proposals):
        start = time.perf_counter()
        leader.replication.propose(b"seq-%d" % n, timeout_s=10)
        latencies.append((time.perf_counter() - start) * 1000)
    latencies.sort()
    return latencies


def stop_cluster(members: dict[str, RaftMember], stores: list[RunnerStore]) -> None:
    for member in members.values():
        member.stop()
    for store in stores:
        store.close()


def compare_tls(rounds: int, proposals: int) -> None:
    p50: dict[bool, list[float]] = {False: [], True: []}
    for round_number in range(rounds):
        for tls in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                members, stores = start_cluster(Path(tmp), tls)
                try:
                    leader = wait_leader(members)
                    sequential_ms(leader, 50)  # warm: connections and handshakes made
                    p50[tls].append(statistics.median(sequential_ms(leader, proposals)))
                finally:
                    stop_cluster(members, stores)
            print(
                f"round {round_number + 1} {'mTLS ' if tls else 'plain'}: "
                f"sequential commit p50 {p50[tls][-1]:.3f} ms",
                flush=True,
            )
    plain, tls = statistics.median(p50[False]), statistics.median(p50[True])
    print(
        f"median over {rounds} rounds of {proposals} sequential commits: plain {plain:.3f} ms, "
        f"mutual TLS {tls:.3f} ms, ratio {tls / plain:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--proposals", type=int, default=500)
    parser.add_argument("--tls", action="store_true", help="mutual TLS between the voters")
    parser.add_argument("--compare-tls", type=int, default=0, metavar="ROUNDS")
    args = parser.parse_args()
    if args.compare_tls:
        compare_tls(args.compare_tls, args.proposals)
        return
    with tempfile.TemporaryDirectory() as tmp:
        members, stores = start_cluster(Path(tmp), args.tls)
        leader = wait_leader(members)
        latencies = sequential_ms(leader, args.proposals)
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
        transport = "mutual TLS" if args.tls else "HTTP"
        print(
            f"3 voters, loopback {transport}, SQLite synchronous=FULL: "
            f"sequential commit p50 {statistics.median(latencies):.2f} ms, "
            f"p99 {latencies[int(len(latencies) * 0.99) - 1]:.2f} ms; "
            f"8 proposers {throughput:.0f}/s; failover {failover_ms:.0f} ms"
        )
        stop_cluster(survivors, stores)


if __name__ == "__main__":
    main()
