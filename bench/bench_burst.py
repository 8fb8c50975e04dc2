"""Capacity under load (issue 17, "Must show"): a burst and a sustained rate, this checkout
against a baseline commit in the same run, on 3 voters + 1 worker (real processes, loopback).

Scenarios (``--scenario``):

- ``burst``: ``--schedules`` (1,024) schedules ``M H D Mo *`` all due at the same real minute
  (``--time-scale 1``), ``1 + 1``, CatchUp cap 1, Skip overlap, no retry. Limits raised to allow
  it: ``schedules`` and ``running`` = the burst, ``outstanding`` = 2 x it, ``records`` = 4 x it.
  Reports every final state, the Unknown count, and when the last attempt was accepted by the
  engine (the owner's ``dispatch_accepted`` ``late_ms``, real ms after the minute) and finished
  (its terminal timeline entry, whole seconds after the minute).
- ``sustained``: ``--schedules`` (96) schedules ``* * * * *`` at ``--time-scale 10``, i.e. 96
  due every 6 real seconds = 16 due per real second, for ``--seconds`` (600) real seconds;
  Concurrent overlap, CatchUp cap 1. Due slots are counted from the owners' ``selection``
  decisions (created + dropped, by reason), outcomes from their ``outcome`` decisions
  (retention retires old records, so the final list holds only the newest).

``timeout_seconds`` is 10 for ``burst`` (scale 1: the observation deadline is 40 real seconds)
and the largest whole number that keeps the scaled deadline no shorter than the engine's real
timeout for ``sustained`` (scale 10: 3, the deadline (3 + 30) / 10 = 3.3 real seconds). The
worker runs ``max_concurrent: 4``; its queue is the default 16 for ``sustained`` and raised to the
burst (at most 1,024) for ``burst`` unless ``--max-queued`` says otherwise. ``burst`` also reports
the CPU seconds of every cluster process from the minute until it settled, and prints issue 37's
targets for both sides with the load average. The baseline (``--baseline-ref``, default
``08f87a9``, main before issue 37) is extracted with ``git archive`` and run by the same
interpreter from its own tree.

    .venv/bin/python bench/bench_burst.py --scenario burst
    .venv/bin/python bench/bench_burst.py --scenario sustained --seconds 600

Not run by pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.process_cpu import CpuSampler  # noqa: E402

WORKER_QUEUE_MAX = 1024  # the worker config's bound on engine.max_queued
from tests.runner.cluster import Cluster, wait_for  # noqa: E402


@contextlib.contextmanager
def tree_of(ref: str | None) -> Iterator[Path]:
    """This checkout (``ref`` None), or the tree of ``ref`` extracted aside."""
    if ref is None:
        yield ROOT
        return
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref], check=True, capture_output=True
    ).stdout
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp)


@contextlib.contextmanager
def running_from(tree: Path) -> Iterator[None]:
    """Processes started meanwhile run the code of ``tree`` (``-m`` puts the cwd first)."""
    previous_cwd, previous_path = os.getcwd(), os.environ.get("PYTHONPATH")
    os.chdir(tree)
    os.environ["PYTHONPATH"] = str(tree)
    try:
        yield
    finally:
        os.chdir(previous_cwd)
        if previous_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous_path


def definition(name: str, cron: str, overlap: str) -> dict[str, Any]:
    return {
        "name": name,
        "code": "1 + 1",
        "cron": cron,
        "timezone": "UTC",
        "policy": {
            "missed": {"CatchUp": {"cap": 1}},
            "overlap": overlap,
            "retry": {"max_retries": 0, "delay_seconds": 0},
        },
    }


def set_limits(cluster: Cluster, limits: dict[str, int]) -> None:
    for voter in cluster.voters.values():
        doc = json.loads(voter.config.read_text())
        doc["limits"] = limits
        voter.config.write_text(json.dumps(doc))


def create_all(owner: Any, definitions: list[dict[str, Any]]) -> None:
    for document in definitions:
        reply = owner.command({"action": "create", "definition": document}, timeout_s=60)
        if not reply.get("ok"):
            raise SystemExit(f"create failed: {json.dumps(reply)[:500]}")


def process_roles(cluster: Cluster, owner: Any) -> dict[int, str]:
    """The pid of each cluster process and what it does in the burst."""
    roles = {
        voter.proc.pid: "leader" if voter is owner else f"follower {voter.node_id}"
        for voter in cluster.voters.values()
        if voter.proc is not None
    }
    if cluster.worker.proc is not None:
        roles[cluster.worker.proc.pid] = "worker"  # its engine children: "worker children"
    return roles


class OutcomeTail:
    """The latest ``outcome`` state of each occurrence, read from the decision logs as they
    grow: only new bytes are read and only outcome lines parsed, so the bench's own CPU (on the
    same two cores as the cluster) stays out of what it measures."""

    def __init__(self, logs: list[Path]) -> None:
        self._offsets = dict.fromkeys(logs, 0)
        self._partial = dict.fromkeys(logs, b"")
        self._last: dict[int, str] = {}

    def terminal(self) -> int:
        for path, offset in self._offsets.items():
            with path.open("rb") as log:
                log.seek(offset)
                chunk = log.read()
            self._offsets[path] = offset + len(chunk)
            *lines, self._partial[path] = (self._partial[path] + chunk).split(b"\n")
            for line in lines:
                if b'"outcome"' not in line:
                    continue
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if event.get("event") == "outcome" and isinstance(event.get("occurrence"), int):
                        self._last[event["occurrence"]] = str(event.get("state"))
        return sum(1 for state in self._last.values() if state not in ("Pending", "Running"))


def all_events(cluster: Cluster) -> list[dict[str, Any]]:
    return [e for voter in cluster.voters.values() for e in voter.events()]


def burst_run(label: str, tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    n = args.schedules
    with tempfile.TemporaryDirectory() as root, running_from(tree):
        cluster = Cluster(Path(root), 3, time_scale=1.0, timeout_seconds=10, worker=True, raft=None)
        set_limits(cluster, {"schedules": n, "running": n, "outstanding": 2 * n, "records": 4 * n})
        # The worker's queue is raised to the burst (a limit raised to allow it, as the voters'
        # are): the owner then sends every exec at once and acceptance is bound by the launch
        # path, not by execution. ``--max-queued 16`` runs the default engine.
        doc = json.loads(cluster.worker.config.read_text())
        queued = args.max_queued or min(n, WORKER_QUEUE_MAX)
        doc["engine"] = {"max_concurrent": 4, "max_queued": queued}
        cluster.worker.config.write_text(json.dumps(doc))
        try:
            cluster.start()
            owner = cluster.owner()
            # Creating 1,024 schedules takes a while: time a few, then pick the first minute
            # that leaves room for the rest (each schedule names that one minute).
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
            load_at_due = None
            while time.time() < due_s:
                time.sleep(0.2)
            load_at_due = os.getloadavg()
            sampler = CpuSampler(process_roles(cluster, owner))
            sampler.start()

            outcomes = OutcomeTail([voter.log for voter in cluster.voters.values()])
            bench_cpu_began = time.process_time()

            def settled() -> bool | None:
                # From the decision logs, not the owner: a `list` of 1,024 records every 50 ms
                # runs on the owner's loop and held the admissions it was measuring.
                time.sleep(0.5)
                return True if outcomes.terminal() >= n else None

            with contextlib.suppress(AssertionError):
                wait_for(settled, "the burst to settle", timeout_s=args.settle_s)
            cpu_s = sampler.stop()
            bench_cpu_s = round(time.process_time() - bench_cpu_began, 2)
            occurrences = owner.command({"action": "list"}, timeout_s=60)["occurrences"]
            events = all_events(cluster)
            status = owner.command({"action": "status"}, timeout_s=60)
        finally:
            cluster.stop()
    accepted = [
        float(e["late_ms"])
        for e in events
        if e.get("event") == "dispatch_accepted" and e.get("late_ms") is not None
    ]
    finished = [o["timeline"][-1][1] - o["due"] for o in occurrences if o["state"] == "Succeeded"]
    sent = {
        e["occurrence"]: float(e["late_ms"])
        for e in events
        if e.get("event") == "capacity_send" and e.get("late_ms") is not None
    }
    send_to_admission = sorted(
        float(e["late_ms"]) - sent[e["occurrence"]]
        for e in events
        if e.get("event") == "admission"
        and e.get("occurrence") in sent
        and e.get("late_ms") is not None
    )
    send_to_accept = sorted(
        float(e["late_ms"]) - sent[e["occurrence"]]
        for e in events
        if e.get("event") == "dispatch_accepted" and e.get("occurrence") in sent
    )
    not_succeeded = [json.dumps(o)[:800] for o in occurrences if o["state"] != "Succeeded"]
    dropped = Counter()
    for e in events:
        if e.get("event") == "selection":
            for _sid, reason, count in e.get("dropped", []):
                dropped[reason] += count
    return {
        "label": label,
        "schedules": n,
        "occurrences": len(occurrences),
        "states": dict(Counter(o["state"] for o in occurrences)),
        "unknown": sum(1 for o in occurrences if o["state"] == "Unknown"),
        "attempts_above_1": sum(1 for o in occurrences if o["attempt"] > 1),
        # A trivial script should never fail: show why the first few did, if any.
        "not_succeeded": not_succeeded[:3],
        "dropped": dict(dropped),
        "last_accepted_s": round(max(accepted) / 1000, 2) if accepted else None,
        "p50_accepted_s": round(sorted(accepted)[len(accepted) // 2] / 1000, 2)
        if accepted
        else None,
        "last_finished_s": max(finished) if finished else None,
        "send_to_admission_ms_p50": round(send_to_admission[len(send_to_admission) // 2], 1)
        if send_to_admission
        else None,
        "send_to_accepted_ms_p50": round(send_to_accept[len(send_to_accept) // 2], 1)
        if send_to_accept
        else None,
        "pool_full_resends": sum(1 for e in events if e.get("event") == "dispatch_not_dispatched"),
        "capacity_waits": sum(1 for e in events if e.get("event") == "capacity_wait"),
        "fenced": sum(1 for e in events if e.get("event") == "dispatch_fenced"),
        "ownership_acquired": sum(1 for e in events if e.get("event") == "ownership_acquired"),
        "dispatch_status": status.get("dispatch"),
        "load_at_due": [round(x, 2) for x in load_at_due] if load_at_due else None,
        # From the minute until the burst settled, all eight processes (the bench excluded).
        "cpu_s": cpu_s,
        "cpu_ms_per_occurrence": round(1000 * sum(cpu_s.values()) / max(len(occurrences), 1), 1),
        "bench_cpu_s": bench_cpu_s,  # this process meanwhile, not in cpu_s
    }


def sustained_run(label: str, tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    n, scale = args.schedules, args.time_scale
    # The observation deadline, (timeout + 30) / scale real seconds, is not shorter than the
    # engine's real timeout: the largest whole timeout that keeps it so.
    timeout_s = max(1, math.floor(30 / (scale - 1))) if scale > 1 else 10
    assert (timeout_s + 30) / scale >= timeout_s
    with tempfile.TemporaryDirectory() as root, running_from(tree):
        cluster = Cluster(
            Path(root), 3, time_scale=scale, timeout_seconds=timeout_s, worker=True, raft=None
        )
        set_limits(cluster, {"schedules": n, "running": 256, "outstanding": 1024, "records": 4096})
        try:
            cluster.start()
            owner = cluster.owner()
            create_all(
                owner, [definition(f"steady-{i}", "* * * * *", "Concurrent") for i in range(n)]
            )
            load_start = os.getloadavg()
            time.sleep(args.seconds)
            # Stop new slots, then let what was due finish.
            for sid in range(1, n + 1):
                owner.command({"action": "disable", "id": sid}, timeout_s=60)
            stop_s = time.time()
            load_end = os.getloadavg()

            def settled() -> bool | None:
                counts = owner.command({"action": "list"}, timeout_s=60)["counts"]["by_state"]
                return True if not counts.get("Pending") and not counts.get("Running") else None

            with contextlib.suppress(AssertionError):
                wait_for(settled, "the work to settle", timeout_s=args.settle_s)
            events = all_events(cluster)
            final = owner.command({"action": "list"}, timeout_s=60)
        finally:
            cluster.stop()
    created: set[int] = set()
    dropped: Counter[str] = Counter()
    for e in events:
        if e.get("event") == "selection":
            created.update(c[1] for c in e.get("created", []))
            for _sid, reason, count in e.get("dropped", []):
                dropped[reason] += count
    last_state: dict[int, str] = {}
    for e in events:
        if e.get("event") == "outcome" and isinstance(e.get("occurrence"), int):
            last_state[e["occurrence"]] = str(e.get("state"))
    for o in final["occurrences"]:  # the records still retained are the latest word
        last_state[o["id"]] = o["state"]
    states = Counter(last_state.get(oid, "never settled") for oid in created)
    due = len(created) + sum(dropped.values())
    accepted = sorted(
        float(e["late_ms"])
        for e in events
        if e.get("event") == "dispatch_accepted" and e.get("late_ms") is not None
    )
    return {
        "label": label,
        "schedules": n,
        "time_scale": scale,
        "timeout_seconds": timeout_s,
        "real_seconds": args.seconds,
        "due_slots": due,
        "due_per_real_s": round(due / args.seconds, 2),
        "created": len(created),
        "dropped": dict(dropped),
        "states": dict(states),
        "succeeded_share": round(states.get("Succeeded", 0) / max(due, 1), 4),
        "unknown": states.get("Unknown", 0),
        "accepted_late_ms_p50": accepted[len(accepted) // 2] if accepted else None,
        "accepted_late_ms_p99": accepted[int(0.99 * (len(accepted) - 1))] if accepted else None,
        "pool_full_resends": sum(1 for e in events if e.get("event") == "dispatch_not_dispatched"),
        "capacity_waits": sum(1 for e in events if e.get("event") == "capacity_wait"),
        "settled_after_stop_s": round(time.time() - stop_s, 1),
        "load_start": [round(x, 2) for x in load_start],
        "load_end": [round(x, 2) for x in load_end],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=("burst", "sustained"), required=True)
    parser.add_argument("--schedules", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--time-scale", type=float, default=10.0, help="sustained only")
    parser.add_argument("--settle-s", type=float, default=180.0)
    # main before issue 37 (the cost of a commit and of an occurrence)
    parser.add_argument("--baseline-ref", default="08f87a9")
    parser.add_argument("--only", choices=("this", "baseline"), default=None)
    parser.add_argument(
        "--max-queued",
        type=int,
        default=None,
        help="burst: the worker's queue (default: the burst, at most 1024)",
    )
    args = parser.parse_args()
    if args.schedules is None:
        # sustained: 16 due per real second = 16 x 60 / scale schedules every scaled minute
        args.schedules = 1024 if args.scenario == "burst" else round(16 * 60 / args.time_scale)
    baseline = args.baseline_ref
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(
        f"{args.scenario}: this checkout {head} against baseline {baseline[:10]}; "
        f"loadavg at start: {read_loadavg()}",
        flush=True,
    )
    run = burst_run if args.scenario == "burst" else sustained_run
    results: dict[str, dict[str, Any]] = {}
    for which, ref in (("this", None), ("baseline", baseline)):
        if args.only not in (None, which):
            continue
        with tree_of(ref) as tree:
            result = run(f"{which} ({head if ref is None else ref[:10]})", tree, args)
        result["loadavg_after"] = read_loadavg()
        results[which] = result
        print(json.dumps(result), flush=True)
    if args.scenario == "burst":
        print_burst_targets(results)
    return 0


def read_loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def print_burst_targets(results: dict[str, dict[str, Any]]) -> None:
    """Issue 37's burst targets for each side, and this checkout against the baseline."""
    rows = [
        ("last finished (s after the minute)", "last_finished_s", 8.0),
        ("CPU ms per occurrence, all processes", "cpu_ms_per_occurrence", 12.0),
        ("Unknown", "unknown", 0),
    ]
    print()
    print("| target | bound | this | baseline | this / baseline | met (this) |")
    print("|---|---|---|---|---|---|")
    for name, key, bound in rows:
        ours = results.get("this", {}).get(key)
        theirs = results.get("baseline", {}).get(key)
        ratio = f"{ours / theirs:.2f}" if ours and theirs else "-"
        met = "-" if ours is None else ("met" if ours <= bound else "NOT met")
        print(f"| {name} | ≤ {bound} | {ours} | {theirs} | {ratio} | {met} |")
    for which, result in results.items():
        cpu = result.get("cpu_s") or {}
        n = max(result.get("occurrences") or 1, 1)
        split = ", ".join(f"{role} {1000 * s / n:.2f}" for role, s in sorted(cpu.items()))
        print(
            f"{which}: CPU ms per occurrence by process: {split}; load at the minute "
            f"{result.get('load_at_due')}, after {result.get('loadavg_after')}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
