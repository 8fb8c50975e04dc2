"""Worker exec latency: POST exec -> 202 over real HTTP, including the permit round trip.

Run from the repository root: ``.venv/bin/python bench/bench_worker.py [--count N]``. Starts a
real worker process (temp data_dir, loopback port) and a local admission peer that grants at
once, then sends N sequential execs of a trivial script, each awaited to completion before the
next. Reports p50/p99 of exec -> 202 and the worker process RSS (engine children excluded).
Results go to docs/worker.md by hand (not run by pytest).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.worker.peers import (
    AdmissionPeer,
    exec_body,
    execution_id,
    running_worker,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100)
    args = parser.parse_args()
    peer = AdmissionPeer("grant")
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            running_worker(
                Path(tmp), [peer.url], engine={"max_concurrent": 4, "max_queued": 16}
            ) as worker,
        ):
            latencies_ms = []
            for occurrence in range(1, args.count + 1):
                started = time.perf_counter()
                response = worker.exec(exec_body("1 + 1", occurrence_id=occurrence))
                latencies_ms.append((time.perf_counter() - started) * 1000)
                if response.status != 202:
                    raise SystemExit(f"exec answered {response.status}: {response.body!r}")
                worker.wait_terminal(execution_id(occurrence))
            latencies_ms.sort()
            p50 = latencies_ms[len(latencies_ms) // 2]
            p99 = latencies_ms[min(len(latencies_ms) - 1, int(len(latencies_ms) * 0.99))]
            with open(f"/proc/{worker.proc.pid}/status", encoding="ascii") as status:
                rss_kib = int(status.read().split("VmRSS:")[1].split()[0])
            print(f"execs: {args.count}")
            print(f"exec -> 202 (incl. permit round trip): p50 {p50:.1f} ms, p99 {p99:.1f} ms")
            print(f"worker RSS (children excluded): {rss_kib // 1024} MiB")
    finally:
        peer.close()


if __name__ == "__main__":
    main()
