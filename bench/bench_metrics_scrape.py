"""How much a ``/metrics`` scrape and a health view cost on a voter at the largest limits.

A real in-process voter (tests/runner/harness: loop, core, machine, single-voter Raft, manual
clock, scripted worker) with ``limits.schedules`` = 1024 schedules, each with one completed
occurrence and two missed slots, so the exposition holds the worst-case label cardinality. Prints
the exposition size and the median/max wall time of rendering it and of the health view.

    .venv/bin/python bench/bench_metrics_scrape.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package (harness)

from appliance.config.runner import parse_runner_config
from appliance.metrics import RunnerMetrics, VoterObservability
from appliance.metrics.exposition import render
from tests.runner.harness import T0, Voter, definition, wait_until

SCHEDULES = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
ROUNDS = 30


def _states(voter: Voter) -> dict[str, int]:
    return voter.machine.read(lambda st: st.counts().by_state)


def main() -> None:
    document = {
        "node_id": "v1", "advertise_addr": "127.0.0.1", "cluster_port": 9, "peers": [],
        "data_dir": "/nonexistent/v1", "admission_addr": "127.0.0.1:9",
        "admission_bearer_env": "A", "cluster_bearer_env": "C",
        "limits": {"schedules": SCHEDULES, "records": 4096, "outstanding": 2048, "running": 1024},
        "remote": {
            "url": "http://127.0.0.1:9", "bearer_env": "W", "expires_at": "2099-01-01T00:00:00Z",
            "session": "bench", "timeout_seconds": 60, "heap_mb": 64, "namespace": "ns",
            "worker_id": "w1",
        },
    }  # fmt: skip
    voter = Voter(cfg=parse_runner_config(document))
    with voter:
        for i in range(SCHEDULES):
            reply = voter.command(
                json.dumps({"action": "create", "definition": definition(name=f"s{i}")})
            )
            if not reply.get("ok"):
                raise SystemExit(f"create failed: {reply}")
        voter.advance_to(T0 + 181)  # slots T0+60 and T0+120 missed, T0+180 runs
        # The checkpoint budget lets one observation create only part of 1024 records; the
        # rest are dropped for capacity (counted too). Wait until nothing is live any more.
        wait_until(
            lambda: (
                voter.machine.read(lambda st: st.counts().outstanding) == 0
                and _states(voter)["Succeeded"] > 0
            ),
            "every selected slot to complete",
            timeout_s=120,
        )
        time.sleep(1.0)
        records = voter.machine.read(lambda st: st.counts().records)
        views = VoterObservability(voter.runner, metrics=RunnerMetrics())
        scrape_s, health_s = [], []
        size = 0
        for _ in range(ROUNDS):
            start = time.perf_counter()
            size = len(render(views.registry))
            scrape_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            views.health()
            health_s.append(time.perf_counter() - start)
        views.close()
    print(f"schedules={SCHEDULES} records={records} exposition_bytes={size}")
    print(
        f"scrape_ms median={statistics.median(scrape_s) * 1000:.1f} max={max(scrape_s) * 1000:.1f}"
    )
    print(
        f"health_ms median={statistics.median(health_s) * 1000:.1f} max={max(health_s) * 1000:.1f}"
    )


if __name__ == "__main__":
    main()
