"""The cost of one Raft commit, per voter and per thread: CPU and context switches (issue 37).

Three voter processes on loopback (the same voters as ``bench_raft_vs_etcd.py``: each a
``RaftMember`` over its ``RunnerStore``, fsync on, product timers), proposals made inside the
leader process (``POST /load``, as the runner proposes). For ``--commits`` sequential commits it
reports, per voter, the CPU (user + system, ``/proc``) and the context switches (voluntary and
not) per commit, and per thread of the voter: on a shared machine wall-clock latency swings with
the other tenants, while the CPU and the wake-ups a commit costs move far less. This checkout and
``--baseline-ref`` (extracted with ``git archive``) run alternately, ``--rounds`` times each, in
one invocation, and the load average is printed with every round.

    .venv/bin/python bench/bench_commit_cost.py [--commits 3000] [--rounds 2]
        [--proposers 1] [--baseline-ref 08f87a9]

Thread names come from the voters themselves (``GET /threads``, this checkout's bench voter);
a baseline voter without that route is reported by thread id. Not run by pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import bench.bench_raft_vs_etcd as rv  # noqa: E402


def per_thread(pid: int) -> dict[str, tuple[float, int]]:
    """Thread id -> (CPU seconds, context switches) of one process, from ``/proc``."""
    out: dict[str, tuple[float, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            status = (task / "status").read_text().splitlines()
        except OSError:
            continue  # the thread ended meanwhile
        switches = sum(int(line.split()[1]) for line in status if "ctxt_switches" in line)
        cpu_s = (int(fields[11]) + int(fields[12])) / rv.os.sysconf("SC_CLK_TCK")
        out[task.name] = (cpu_s, switches)
    return out


def process_totals(pid: int) -> tuple[float, int]:
    threads = per_thread(pid)
    return rv.cpu_of(pid), sum(switches for _, switches in threads.values())


def thread_names(cluster: rv.RaftCluster, client: Any, name: str) -> dict[str, str]:
    with contextlib.suppress(Exception):
        response = client.get(cluster.url(name, "/threads"), bearer=rv.BENCH_TOKEN)
        if response.status == 200:
            return {str(k): str(v) for k, v in response.json().items()}
    return {}


def measure(tree: Path, commits: int, proposers: int) -> dict[str, Any]:
    rv.RaftCluster.tree = tree
    with tempfile.TemporaryDirectory() as tmp:
        cluster = rv.RaftCluster(Path(tmp))
        cluster.start()
        client = rv.new_client()
        try:
            leader = cluster.wait_leader(client)
            cluster.load(client, leader, proposers, max(1, 300 // proposers))  # warm up
            pids = {name: proc.pid for name, proc in cluster.procs.items()}
            names = {name: thread_names(cluster, client, name) for name in pids}
            before = {name: (process_totals(pid), per_thread(pid)) for name, pid in pids.items()}
            result = cluster.load(client, leader, proposers, commits // proposers)
            after = {name: (process_totals(pid), per_thread(pid)) for name, pid in pids.items()}
        finally:
            client.close()
            cluster.stop()
    assert result is not None
    done = max(1, len(result["latencies_ms"]))
    voters = {}
    for name in pids:
        (cpu0, cs0), threads0 = before[name]
        (cpu1, cs1), threads1 = after[name]
        groups: dict[str, list[float]] = {}
        for tid, (cpu, switches) in threads1.items():
            cpu_start, switches_start = threads0.get(tid, (0.0, 0))
            label = re.sub(r"[-_]\d+$", "-N", names[name].get(tid, f"tid {tid}"))
            group = groups.setdefault(label, [0.0, 0.0])
            group[0] += (cpu - cpu_start) * 1000 / done
            group[1] += (switches - switches_start) / done
        voters[name] = {
            "role": "leader" if name == leader else "follower",
            "cpu_ms": (cpu1 - cpu0) * 1000 / done,
            "switches": (cs1 - cs0) / done,
            "threads": {k: v for k, v in groups.items() if v[0] >= 0.005 or v[1] >= 0.05},
        }
    return {
        "commits": done,
        "p50_ms": statistics.median(result["latencies_ms"]),
        "per_s": done / result["elapsed_s"],
        "voters": voters,
    }


def show(label: str, r: dict[str, Any]) -> None:
    total_cpu = sum(v["cpu_ms"] for v in r["voters"].values())
    total_cs = sum(v["switches"] for v in r["voters"].values())
    print(
        f"{label}: {r['commits']} commits, p50 {r['p50_ms']:.2f} ms, {r['per_s']:.0f}/s; per "
        f"commit, 3 voters: CPU {total_cpu:.3f} ms, context switches {total_cs:.1f}; "
        f"load {rv.read_loadavg()}"
    )
    for name, v in sorted(r["voters"].items(), key=lambda kv: kv[1]["role"]):
        threads = "; ".join(
            f"{k} {cpu:.3f} ms / {cs:.2f} cs"
            for k, (cpu, cs) in sorted(v["threads"].items(), key=lambda kv: -kv[1][0])
        )
        print(
            f"   {name} {v['role']}: {v['cpu_ms']:.3f} ms, {v['switches']:.2f} switches "
            f"per commit ({threads})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--proposers", type=int, default=1)
    parser.add_argument("--baseline-ref", default=rv.BASELINE_REF)
    args = parser.parse_args()
    print(f"this={rv.git_head()} baseline={args.baseline_ref} loadavg {rv.read_loadavg()}")
    totals: dict[str, list[float]] = {"this": [], "baseline": []}
    with rv.tree_of(args.baseline_ref) as baseline_tree:
        for round_ in range(args.rounds):
            sides = [("this", REPO), ("baseline", baseline_tree)]
            if round_ % 2:
                sides.reverse()  # each side goes first in turn
            for label, tree in sides:
                r = measure(tree, args.commits, args.proposers)
                show(f"round {round_ + 1} {label}", r)
                totals[label].append(sum(v["cpu_ms"] for v in r["voters"].values()))
    this, base = statistics.median(totals["this"]), statistics.median(totals["baseline"])
    print(
        f"median CPU per commit over the 3 voters: this {this:.3f} ms, baseline {base:.3f} ms "
        f"(this / baseline {this / base:.2f}); load {rv.read_loadavg()}"
    )


if __name__ == "__main__":
    main()
