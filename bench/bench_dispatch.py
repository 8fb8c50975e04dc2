"""Due instant -> engine accepted (202) latency on a 3-voter loopback cluster, and idle CPU.

Real processes: three ``appliance runner`` voters (``--time-scale``) and one ``appliance
worker``. Phase 1 measures each voter's CPU over ``--idle-seconds`` with no schedule. Phase 2
creates ``--schedules`` schedules ``* * * * *`` (Concurrent) on the owner and runs for
``--seconds`` real seconds. Latencies come from the owner's decision log, whose ``late_ms``
fields say how long after the due instant each step happened, in real milliseconds:

- ``selection``: the pulse woke and the observation is committed (``ObserveAndClaim``: the
  claims of the occurrences it created are in the same commit);
- ``claim``: the claim with its binding is committed (for a claim made in the observation, the
  same commit; ``ClaimOccurrence`` for what the observation left Pending);
- ``admission``: the worker's permit request is committed (after its reserve);
- ``dispatch_accepted``: the worker answered 202 (after consume and submit).

Run: ``.venv/bin/python bench/bench_dispatch.py [--schedules 4 --seconds 30 --scale 60]``.
Not run by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.runner.cluster import Cluster, Voter

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> str:
    if not values:
        return "n/a"
    return (
        f"n={len(values)} p50={percentile(values, 0.5):.1f} ms "
        f"p99={percentile(values, 0.99):.1f} ms max={max(values):.1f} ms "
        f"mean={statistics.fmean(values):.1f} ms"
    )


def late(owner: Voter, event: str) -> list[float]:
    return [
        float(e["late_ms"])
        for e in owner.events()
        if e.get("event") == event and e.get("late_ms") is not None
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schedules", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--scale", type=float, default=60.0)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        # Default Raft timings (heartbeat 100 ms); timeout_seconds large enough that the
        # scaled observation deadline never fires before a real-time engine answers.
        cluster = Cluster(
            Path(root), 3, time_scale=args.scale, worker=True, timeout_seconds=3600, raft=None
        )
        try:
            cluster.start()
            owner = cluster.owner()
            time.sleep(1.0)  # let start-up settle before measuring idle CPU
            pids = {v.node_id: v.proc.pid for v in cluster.voters.values() if v.proc}
            before = {node: cpu_s(pid) for node, pid in pids.items()}
            time.sleep(args.idle_seconds)
            idle = {
                node: 100.0 * (cpu_s(pid) - before[node]) / args.idle_seconds
                for node, pid in pids.items()
            }
            for i in range(args.schedules):
                definition = {
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
                reply = owner.command({"action": "create", "definition": definition})
                if not reply.get("ok"):
                    raise SystemExit(f"create failed: {json.dumps(reply)}")
            time.sleep(args.seconds)
            listing = owner.command({"action": "list"})
            states: dict[str, int] = listing["counts"]["by_state"]
        finally:
            cluster.stop()
        print(f"cluster: 3 voters + 1 worker on loopback, time scale {args.scale}")
        print(f"schedules: {args.schedules} x '* * * * *', {args.seconds:.0f} s real")
        print(f"final states: { {k: v for k, v in states.items() if v} }")
        print("due -> pulse+observe committed:", summary(late(owner, "selection")))
        print("due -> claim committed:        ", summary(late(owner, "claim")))
        print("due -> admission committed:    ", summary(late(owner, "admission")))
        print("due -> engine accepted (202):  ", summary(late(owner, "dispatch_accepted")))
        for node, percent in sorted(idle.items()):
            print(f"idle CPU {node}: {percent:.2f} % of one core")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
