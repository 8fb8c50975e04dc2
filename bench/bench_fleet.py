"""A fleet under a burst (issue 33, "Must show"): 1,024 schedules due in one minute, on 3 voters
and 2 workers against the same on 1 worker, in the same invocation (real processes, loopback).

Each run: ``--schedules`` (1,024) schedules ``M H D Mo *`` naming the same real minute
(``--time-scale 1``), trivial scripts (``1 + 1``), CatchUp cap 1, Skip, no retry; limits raised to
allow it (as bench/bench_burst.py does); every worker runs ``max_concurrent: 4`` and a queue of the
burst. The one-worker run uses ``remote.url`` + ``worker_id``; the fleet run ``remote.workers``
with two workers. Reported: final states, Unknown, how the claims split between workers, when
the last attempt was accepted by an engine (the owner's ``dispatch_accepted`` ``late_ms``, real
seconds after the minute) and finished (its terminal timeline entry), and the CPU seconds of every
cluster process from the minute until the burst settled.

    .venv/bin/python bench/bench_fleet.py
    .venv/bin/python bench/bench_fleet.py --schedules 256 --only fleet

Not run by pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_burst import (  # noqa: E402
    WORKER_QUEUE_MAX,
    OutcomeTail,
    all_events,
    create_all,
    definition,
    set_limits,
)
from bench.process_cpu import CpuSampler  # noqa: E402
from tests.runner.cluster import Cluster, wait_for  # noqa: E402


def roles(cluster: Cluster, owner: Any) -> dict[int, str]:
    out = {
        voter.proc.pid: "leader" if voter is owner else f"follower {voter.node_id}"
        for voter in cluster.voters.values()
        if voter.proc is not None
    }
    for worker in cluster.workers:
        if worker.proc is not None:
            out[worker.proc.pid] = worker.worker_id
    return out


def burst(workers: int, args: argparse.Namespace) -> dict[str, Any]:
    n = args.schedules
    queued = min(n, WORKER_QUEUE_MAX)
    with tempfile.TemporaryDirectory() as root:
        cluster = Cluster(
            Path(root),
            3,
            time_scale=1.0,
            timeout_seconds=10,
            worker=True,
            raft=None,
            fleet=[{} for _ in range(workers)] if workers > 1 else None,
            worker_engine={"max_concurrent": 4, "max_queued": queued},
        )
        set_limits(cluster, {"schedules": n, "running": n, "outstanding": 2 * n, "records": 4 * n})
        try:
            cluster.start()
            owner = cluster.owner()
            wait_for(
                lambda: any(e.get("event") == "charging_adopted" for e in owner.events()),
                "every voter's capabilities",
            )
            began = time.monotonic()
            create_all(owner, [definition("probe", "0 0 1 1 *", "Skip")])
            owner.command({"action": "delete", "id": 1}, timeout_s=60)
            per_s = (time.monotonic() - began) / 2
            due_s = math.ceil((time.time() + 1.5 * per_s * n + 15) / 60) * 60
            due = time.gmtime(due_s)
            cron = f"{due.tm_min} {due.tm_hour} {due.tm_mday} {due.tm_mon} *"
            create_all(owner, [definition(f"burst-{i}", cron, "Skip") for i in range(n)])
            if time.time() > due_s - 2:
                raise SystemExit("creating the schedules took too long for the chosen minute")
            while time.time() < due_s:
                time.sleep(0.2)
            load_at_due = os.getloadavg()
            sampler = CpuSampler(roles(cluster, owner))
            sampler.start()
            outcomes = OutcomeTail([voter.log for voter in cluster.voters.values()])

            def settled() -> bool | None:
                time.sleep(0.5)
                return True if outcomes.terminal() >= n else None

            with contextlib.suppress(AssertionError):
                wait_for(settled, "the burst to settle", timeout_s=args.settle_s)
            cpu_s = sampler.stop()
            occurrences = owner.command({"action": "list"}, timeout_s=60)["occurrences"]
            events = all_events(cluster)
        finally:
            cluster.stop()
    accepted = sorted(
        float(e["late_ms"])
        for e in events
        if e.get("event") == "dispatch_accepted" and e.get("late_ms") is not None
    )
    finished = [o["timeline"][-1][1] - o["due"] for o in occurrences if o["state"] == "Succeeded"]
    claims = Counter(str(e.get("worker")) for e in events if e.get("event") == "claim")
    return {
        "workers": workers,
        "schedules": n,
        "states": dict(Counter(o["state"] for o in occurrences)),
        "unknown": sum(1 for o in occurrences if o["state"] == "Unknown"),
        "attempts_above_1": sum(1 for o in occurrences if o["attempt"] > 1),
        "claims_by_worker": dict(sorted(claims.items())),
        "p50_accepted_s": round(accepted[len(accepted) // 2] / 1000, 2) if accepted else None,
        "last_accepted_s": round(accepted[-1] / 1000, 2) if accepted else None,
        "last_finished_s": max(finished) if finished else None,
        "capacity_waits": sum(1 for e in events if e.get("event") == "capacity_wait"),
        "fenced": sum(1 for e in events if e.get("event") == "dispatch_fenced"),
        "unreachable_fenced": sum(1 for e in events if e.get("event") == "unreachable_fenced"),
        # A takeover fences every unadmitted claim (each runs again as attempt 2).
        "ownership_acquired": sum(1 for e in events if e.get("event") == "ownership_acquired"),
        "load_at_due": [round(x, 2) for x in load_at_due],
        "cpu_s": cpu_s,
        "cpu_ms_per_occurrence": round(1000 * sum(cpu_s.values()) / max(len(occurrences), 1), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schedules", type=int, default=1024)
    parser.add_argument("--settle-s", type=float, default=240.0)
    parser.add_argument("--only", choices=("one", "fleet"), default=None)
    args = parser.parse_args()
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"fleet burst of {args.schedules} at {head}", flush=True)
    for which, workers in (("one", 1), ("fleet", 2)):
        if args.only not in (None, which):
            continue
        print(json.dumps(burst(workers, args)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
