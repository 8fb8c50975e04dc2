"""A fleet under a burst (issue 33, "Must show"): 1,024 schedules due in one minute, on 3 voters
and 2 workers against the same on 1 worker, in the same invocation (real processes, loopback).

Each run: ``--schedules`` (1,024) schedules ``M H D Mo *`` naming the same real minute
(``--time-scale 1``), CatchUp cap 1, Skip, no retry; limits raised to allow it (as
bench/bench_burst.py does); every worker has a queue of the burst. The one-worker run uses
``remote.url`` + ``worker_id``; the fleet run ``remote.workers`` with two workers; nothing else
differs between the two runs.

The scripts (the default, the issue's case) await a response that a loopback server in the bench
answers after ``--delay-ms`` (1 s): each is an async IIFE (a global script: no top-level await)
returning ``(await fetch(url)).status``; every worker has an ``egress`` section whose policy
allows only ``GET`` of that one loopback URL, and ``max_concurrent: 64`` (the config's bound) so
that waiting, not 4 slots, is what a worker holds. ``--trivial`` runs ``1 + 1`` on
``max_concurrent: 4`` instead, the figures taken before ``fetch()`` landed.

Reported: final states, Unknown, the GETs the server answered, how the claims split between
workers, when the last attempt was accepted by an engine (the owner's ``dispatch_accepted``
``late_ms``, real seconds after the minute) and finished (its terminal timeline entry), and the
CPU seconds of every cluster process from the minute until the burst settled.

    .venv/bin/python bench/bench_fleet.py
    .venv/bin/python bench/bench_fleet.py --schedules 256 --only fleet
    .venv/bin/python bench/bench_fleet.py --trivial

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
import urllib.parse
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
from bench.slow_upstream import SlowServer  # noqa: E402
from tests.runner.cluster import Cluster, wait_for  # noqa: E402

FETCH_MAX_CONCURRENT = 64  # the worker config's bound on engine.max_concurrent
TRIVIAL_MAX_CONCURRENT = 4  # the default, as in the runs before fetch() landed


def only_this_url_policy(url: str) -> str:
    """A policy that lets a script GET ``url`` (the bench's slow server) and nothing else."""
    parts = urllib.parse.urlsplit(url)
    return f"""package appliance.egress
import rego.v1

default allow := false

allow if {{
	input.method == "GET"
	input.url_parsed.scheme == "{parts.scheme}"
	input.url_parsed.host == "{parts.hostname}"
	input.url_parsed.port == {parts.port}
	input.url_parsed.path == "{parts.path}"
}}
"""


def awaiting_script(url: str) -> str:
    """A global script (no top-level await): the completion value is the IIFE's promise."""
    return (
        "(async () => {\n"
        f"  const response = await fetch({json.dumps(url)});\n"
        "  return response.status;\n"
        "})()"
    )


def dropped_slots(events: list[dict[str, Any]]) -> dict[str, int]:
    """Due slots the owners' observations dropped, by reason (``selection`` events' ``dropped``:
    ``[schedule_id, reason, count]`` rows)."""
    by_reason: Counter[str] = Counter()
    for event in events:
        if event.get("event") == "selection":
            for _schedule_id, reason, count in event.get("dropped") or ():
                by_reason[str(reason)] += int(count)
    return dict(sorted(by_reason.items()))


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


def burst(workers: int, args: argparse.Namespace, server: SlowServer | None) -> dict[str, Any]:
    n = args.schedules
    queued = min(n, WORKER_QUEUE_MAX)
    with tempfile.TemporaryDirectory() as root:
        egress = None
        code = "1 + 1"
        max_concurrent = TRIVIAL_MAX_CONCURRENT
        if server is not None:
            policy = Path(root) / "egress.rego"
            policy.write_text(only_this_url_policy(server.url), encoding="utf-8")
            egress = {"policy_file": str(policy)}
            code = awaiting_script(server.url)
            max_concurrent = FETCH_MAX_CONCURRENT
        served_before = server.served if server is not None else 0
        cluster = Cluster(
            Path(root),
            3,
            time_scale=1.0,
            timeout_seconds=10,
            worker=True,
            raft=None,
            fleet=[{} for _ in range(workers)] if workers > 1 else None,
            worker_engine={"max_concurrent": max_concurrent, "max_queued": queued},
            worker_egress=egress,
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
            create_all(
                owner,
                [{**definition(f"burst-{i}", cron, "Skip"), "code": code} for i in range(n)],
            )
            if time.time() > due_s - 2:
                raise SystemExit("creating the schedules took too long for the chosen minute")
            while time.time() < due_s:
                time.sleep(0.2)
            load_at_due = os.getloadavg()
            sampler = CpuSampler(roles(cluster, owner))
            sampler.start()
            outcomes = OutcomeTail([voter.log for voter in cluster.voters.values()])

            checks = 0

            def settled() -> bool | None:
                # A slot the checkpoint has no room for is dropped as ``capacity`` (counted, no
                # record): the burst has settled when every created occurrence is terminal.
                nonlocal checks
                time.sleep(0.5)
                checks += 1
                events = all_events(cluster) if checks % 10 == 0 else []
                dropped = sum(dropped_slots(events).values())
                return True if outcomes.terminal() >= n - dropped else None

            with contextlib.suppress(AssertionError):
                wait_for(settled, "the burst to settle", timeout_s=args.settle_s)
            cpu_s = sampler.stop()
            load_at_settled = os.getloadavg()
            occurrences = owner.command({"action": "list"}, timeout_s=60)["occurrences"]
            events = all_events(cluster)
        finally:
            cluster.stop()
    accepted = sorted(
        float(e["late_ms"])
        for e in events
        if e.get("event") == "dispatch_accepted" and e.get("late_ms") is not None
    )
    finished = sorted(
        o["timeline"][-1][1] - o["due"] for o in occurrences if o["state"] == "Succeeded"
    )
    claims = Counter(str(e.get("worker")) for e in events if e.get("event") == "claim")
    return {
        "workers": workers,
        "schedules": n,
        "scripts": "trivial" if server is None else f"fetch, {args.delay_ms} ms",
        "max_concurrent": max_concurrent,
        "states": dict(Counter(o["state"] for o in occurrences)),
        "unknown": sum(1 for o in occurrences if o["state"] == "Unknown"),
        "dropped": dropped_slots(events),
        # Every GET the slow server answered in this run: at most one per occurrence.
        "gets_served": None if server is None else server.served - served_before,
        "attempts_above_1": sum(1 for o in occurrences if o["attempt"] > 1),
        "claims_by_worker": dict(sorted(claims.items())),
        "p50_accepted_s": round(accepted[len(accepted) // 2] / 1000, 2) if accepted else None,
        "last_accepted_s": round(accepted[-1] / 1000, 2) if accepted else None,
        "p50_finished_s": finished[len(finished) // 2] if finished else None,
        "last_finished_s": finished[-1] if finished else None,
        "capacity_waits": sum(1 for e in events if e.get("event") == "capacity_wait"),
        "fenced": sum(1 for e in events if e.get("event") == "dispatch_fenced"),
        "unreachable_fenced": sum(1 for e in events if e.get("event") == "unreachable_fenced"),
        # A takeover fences every unadmitted claim (each runs again as attempt 2).
        "ownership_acquired": sum(1 for e in events if e.get("event") == "ownership_acquired"),
        "load_at_due": [round(x, 2) for x in load_at_due],
        "load_at_settled": [round(x, 2) for x in load_at_settled],
        "cpu_s": cpu_s,
        "cpu_ms_per_occurrence": round(1000 * sum(cpu_s.values()) / max(len(occurrences), 1), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schedules", type=int, default=1024)
    parser.add_argument("--settle-s", type=float, default=240.0)
    parser.add_argument("--only", choices=("one", "fleet"), default=None)
    parser.add_argument(
        "--trivial", action="store_true", help="run 1 + 1 on max_concurrent 4 (no fetch)"
    )
    parser.add_argument("--delay-ms", type=int, default=1000, help="the server's answer delay")
    args = parser.parse_args()
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    scripts = "1 + 1" if args.trivial else f"scripts awaiting a {args.delay_ms} ms response"
    print(f"fleet burst of {args.schedules} at {head}, {scripts}", flush=True)
    server = None if args.trivial else SlowServer(args.delay_ms / 1000)
    try:
        for which, workers in (("one", 1), ("fleet", 2)):
            if args.only not in (None, which):
                continue
            print(json.dumps(burst(workers, args, server)), flush=True)
    finally:
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
