"""Management listener round trips on loopback (not run by pytest).

    .venv/bin/python bench/bench_management.py [REQUESTS]

Measures, sequentially over one pooled connection: GET /scheduler/v1/status, POST a create
command, and an MCP tools/call, each through auth, validation, the 64-slot queue and a real
single-voter runner loop (tests/runner/harness.Voter: real loop, core and single-voter Raft,
in memory). Prints the median and p99 in milliseconds.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appliance.config.addresses import HostPort
from appliance.http import HttpClient
from appliance.management import (
    BoundedCommandQueue,
    ManagementListener,
    ThreadedConsumer,
    runner_handler,
)
from tests.management.conftest import TOKENS
from tests.management.mcp_raw import call
from tests.runner.harness import Voter, definition


def measure(fn, count: int) -> tuple[float, float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def main(count: int) -> None:
    with Voter() as voter:
        gateway = BoundedCommandQueue()
        consumer = ThreadedConsumer(gateway, runner_handler(voter.runner)).start()
        listener = ManagementListener(
            HostPort("127.0.0.1", 0), gateway, TOKENS, voter.cfg.limits
        ).start()
        client = HttpClient()
        base = f"http://127.0.0.1:{listener.port}"
        token = TOKENS["operator"]
        create = json.dumps({"action": "create", "definition": definition()}).encode()
        document, headers = call("scheduler_status", {})
        mcp_body = json.dumps(document).encode()

        def status() -> None:
            assert client.get(base + "/scheduler/v1/status", bearer=token).status == 200

        def post_create() -> None:
            response = client.post(base + "/scheduler/v1/commands", create, bearer=token)
            assert response.status == 200, response.body

        def mcp_status() -> None:
            response = client.post(base + "/mcp", mcp_body, bearer=token, headers=headers)
            assert response.status == 200

        try:
            for name, fn, n in (
                ("GET status", status, count),
                ("POST create", post_create, min(count, 60)),  # limits.schedules = 64
                ("MCP tools/call scheduler_status", mcp_status, count),
            ):
                median, p99 = measure(fn, n)
                print(f"{name:34s} n={n:5d}  median {median:6.2f} ms  p99 {p99:6.2f} ms")
        finally:
            client.close()
            listener.stop()
            consumer.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
