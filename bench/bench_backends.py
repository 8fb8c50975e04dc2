"""Benchmark: the whole runner on both replication backends, same run, same machine.

Real processes on loopback for each backend in turn: three ``appliance runner`` instances
(``--time-scale``) and one ``appliance worker``; for etcd the three runners share one prefix of a
real 3-member etcd cluster started here (no peers). Both use the product's default timings: the
built-in Raft's default timers, etcd's default lease TTL (5 s) unless ``--etcd-ttl`` says otherwise.

- Latency: ``--schedules`` schedules ``* * * * *`` (Concurrent) run for ``--seconds`` real seconds;
  each sample is the owner's ``dispatch_accepted`` ``late_ms``: real milliseconds from the due
  instant to the worker's 202 (every committed step in between goes through the backend).
- Failover, ``--failovers`` times: the owner is SIGKILLed; the sample is the real time from just
  before the signal to the ``ts`` of the next committed decision, the ``ownership_acquired``
  another runner logs after its ``AcquireOwnership`` command committed. The killed runner is then
  restarted and allowed to catch up before the next kill.

Run: ``.venv/bin/python bench/bench_backends.py [--schedules 4 --seconds 30 --failovers 3]``.
Not run by pytest.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.etcd.cluster import EtcdCluster
from tests.etcd.members import fresh_prefix
from tests.runner.cluster import Cluster, Voter, wait_for

CATCH_UP_S = 3.0  # a restarted runner's time to rejoin before the next kill


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def definition(i: int) -> dict[str, Any]:
    return {
        "name": f"bench-{i}",
        "code": "1 + 1",
        "cron": "* * * * *",
        "timezone": "UTC",
        "policy": {
            "missed": {"CatchUp": {"cap": 10}},
            "overlap": "Concurrent",
            "retry": {"max_retries": 0, "delay_seconds": 0},
        },
    }


def accepted_late_ms(owner: Voter) -> list[float]:
    return [
        float(e["late_ms"])
        for e in owner.events()
        if e.get("event") == "dispatch_accepted" and e.get("late_ms") is not None
    ]


def acquired_after(cluster: Cluster, killed: str, since_s: float) -> float | None:
    for voter in cluster.voters.values():
        if voter.node_id == killed:
            continue
        for event in voter.events():
            if event.get("event") == "ownership_acquired" and float(event["ts"]) >= since_s:
                return float(event["ts"])
    return None


def run_backend(
    root: Path, replication: dict[str, Any] | None, args: argparse.Namespace
) -> tuple[list[float], list[float], tuple[float, float]]:
    """(due→202 samples ms, failover samples ms, 1-min load average at start and after the
    latency phase): the machine is shared, so every figure is printed with its load."""
    load_start = os.getloadavg()[0]
    cluster = Cluster(
        root,
        3,
        time_scale=args.scale,
        worker=True,
        timeout_seconds=3600,
        raft=None,  # the product's default Raft timers
        replication=replication,
    )
    try:
        cluster.start()
        owner = cluster.owner()
        for i in range(args.schedules):
            reply = owner.command({"action": "create", "definition": definition(i)})
            if not reply.get("ok"):
                raise SystemExit(f"create failed: {reply}")
        time.sleep(args.seconds)
        latency = accepted_late_ms(owner)
        load_end = os.getloadavg()[0]
        failover: list[float] = []
        for _ in range(args.failovers):
            owner = cluster.owner()
            killed_at_s = time.time()
            owner.kill()
            acquired_s = wait_for(
                lambda o=owner, t=killed_at_s: acquired_after(cluster, o.node_id, t),
                "the next owner's committed acquisition",
                timeout_s=60.0,
            )
            failover.append((acquired_s - killed_at_s) * 1000.0)
            owner.start()
            time.sleep(CATCH_UP_S)
        return latency, failover, (load_start, load_end)
    finally:
        cluster.stop()


def row(name: str, latency: list[float], failover: list[float], load: tuple[float, float]) -> str:
    each = ", ".join(f"{f:.0f}" for f in failover)
    median = percentile(failover, 0.5) if failover else float("nan")
    return (
        f"| {name} | {len(latency)} | {percentile(latency, 0.5):.1f} | "
        f"{percentile(latency, 0.99):.1f} | {max(latency):.1f} | {each} | {median:.0f} | "
        f"{load[0]:.1f} → {load[1]:.1f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schedules", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--scale", type=float, default=60.0)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--etcd-ttl", type=int, default=None, help="lease TTL s (default: 5)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "etcd-data").mkdir()
        etcd = EtcdCluster(root / "etcd-data", 3)
        etcd.start()
        try:
            replication: dict[str, Any] = {
                "kind": "etcd",
                "endpoints": etcd.endpoints,
                "prefix": fresh_prefix(),
            }
            if args.etcd_ttl is not None:
                replication["lease_ttl_seconds"] = args.etcd_ttl
            (root / "raft").mkdir()
            (root / "etcd").mkdir()
            raft_result = run_backend(root / "raft", None, args)
            etcd_result = run_backend(root / "etcd", replication, args)
        finally:
            etcd.stop()
    load_after = os.getloadavg()
    ttl = args.etcd_ttl or 5
    print(
        f"3 runners + 1 worker on loopback, time scale {args.scale}, {args.schedules} x "
        f"'* * * * *' for {args.seconds:.0f} s, {args.failovers} failovers; "
        f"{os.cpu_count()} cores; load average before {load_before[0]:.2f}, "
        f"after {load_after[0]:.2f}"
    )
    print(
        "| backend | samples | due→202 p50 ms | p99 ms | max ms | failover ms (each) | median "
        "| load 1-min |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(row("built-in raft (default timers)", *raft_result))
    print(row(f"etcd (3 members, lease TTL {ttl} s)", *etcd_result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
