"""The cost of an egress policy decision, and of the gate around one request (issue 32).

Run from the repository root: ``.venv/bin/python bench/bench_egress_policy.py [--samples N]``.

Measures, with the example policy shipped in docs/examples/egress.rego:

1. ``evaluate``: one Rego decision in the calling thread (input → JSON → rego-cpp → decision);
2. ``decide``: the same through the policy runner's evaluator pool, as an exchange asks it
   (a thread hand-off and a wait on the answer: what a fetch pays for its decision);
3. ``fetch``: one whole allowed fetch through the gate to a loopback server (URL and header
   checks, the decision, a pinned connection, the record) against the same request made with a
   bare urllib3 connection to the same server in the same run: the gate's overhead.

Prints p50/p99 per figure; the results go to docs/benchmarks.md by hand (not run by pytest).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.egress.model import FetchRequest  # noqa: E402
from appliance.egress.policy import SAMPLE_INPUT, PolicyRunner, RegoPolicy  # noqa: E402
from tests.egress.conftest import INVOCATION, make_gate  # noqa: E402
from tests.egress.target_server import TargetServer  # noqa: E402

EXAMPLE = ROOT / "docs" / "examples" / "egress.rego"
REQUEST = {
    **SAMPLE_INPUT,
    "method": "POST",
    "url": "https://hooks.example.com/hooks/build",
    "url_parsed": {
        "scheme": "https",
        "host": "hooks.example.com",
        "port": 443,
        "path": "/hooks/build",
        "query": "",
    },
    "headers": {
        "content-type": "application/json",
        "accept": "*/*",
        "user-agent": "appliance-egress/1",
        "idempotency-key": "ops/3/17/1",
        "appliance-invocation": "ops/3/17/1",
        "appliance-ownership-epoch": "9",
    },
    "body_bytes": 17,
    "addresses": ["93.184.216.34"],
    "addresses_global": True,
    "credentials": ["HOOK_TOKEN"],
    "invocation": {**SAMPLE_INPUT["invocation"], "schedule_name": "nightly-report"},
}


def timed_ms(samples: int, work: Callable[[], object]) -> list[float]:
    for _ in range(min(20, samples)):  # warm: interpreters compiled, connections, caches
        work()
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        work()
        out.append((time.perf_counter() - started) * 1000)
    return out


def show(name: str, values: list[float]) -> None:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(
        f"{name:<32} p50 {statistics.median(ordered):8.3f} ms   p99 {p99:8.3f} ms   "
        f"(n={len(ordered)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")

    policy = RegoPolicy.load(EXAMPLE.read_text("utf-8"), str(EXAMPLE))
    assert policy.evaluate(REQUEST, 1.0).allowed
    show("evaluate (calling thread)", timed_ms(args.samples, lambda: policy.evaluate(REQUEST, 1)))

    runner = PolicyRunner(policy, timeout_ms=1000)

    def decide() -> None:
        future, timeout_s = runner.start(REQUEST, 5.0)
        future.result(timeout_s)

    show("decide (evaluator pool)", timed_ms(args.samples, decide))
    runner.close()

    import urllib3

    server = TargetServer()
    try:
        allow_all = RegoPolicy.load(
            "package appliance.egress\nimport rego.v1\nallow := true\n", "allow.rego"
        )
        gate = make_gate(allow_all, max_requests=256)
        url = server.url("/status/204")
        fetches = max(1, args.samples // 4)

        def through_gate() -> None:
            attempt = gate.open_attempt(INVOCATION, time.monotonic() + 30)
            attempt.prepare(FetchRequest(url)).run()

        def bare() -> None:
            connection = urllib3.connection.HTTPConnection("127.0.0.1", server.port, timeout=5)
            connection.request("GET", "/status/204")
            connection.getresponse().read()
            connection.close()

        show("fetch through the gate", timed_ms(fetches, through_gate))
        show("bare urllib3, same server", timed_ms(fetches, bare))
        gate.close()
    finally:
        server.close()
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
