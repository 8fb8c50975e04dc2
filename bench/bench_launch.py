"""The worker's full launch path for ``1 + 1``, sustained: reused children against fresh ones.

Every execution goes reserve -> permit (HTTP round trip to a local admission peer that grants
at once) -> durable consume -> submit -> completed, and counts only once its terminal record is
committed in the worker's store with the result 2. Arrivals are open-loop at ``--rate`` per
second for ``--seconds``; ``--submitters`` threads (or HTTP clients) carry them, so an arrival
waits when they are all busy, which the lateness figures show.

Two modes:

- ``service`` (default): the real ``WorkerService`` in this process, with the real store on disk
  and a real ``Engine``. Runs twice in one invocation: ``child_executions_max=1000`` (reused
  children, a fresh isolate per execution) and ``child_executions_max=1`` (a fresh child per
  execution, as the engine was before). Also measures submission -> running: from the engine's
  ``submit`` to its RUNNING report with ``started_at`` (the child's ``running`` frame).
- ``process``: a real ``appliance worker`` process over HTTP, first this checkout, then the
  code of ``--baseline-ref`` (extracted with ``git archive`` into a temporary directory, so the
  baseline runs today's engine unchanged). Submission -> running is not observable from outside;
  it reports exec -> 202 and exec -> terminal.

A real voter is not in the loop (the admission peer grants without Raft): see docs/benchmarks.md.

    .venv/bin/python bench/bench_launch.py [--mode service|process] [--rate 120] [--seconds 60]

Not run by pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.config.credentials import Secret  # noqa: E402
from appliance.config.urls import parse_origin  # noqa: E402
from appliance.config.worker import parse_worker_config  # noqa: E402
from appliance.engine import Engine, ExecutionReport, ExecutionStatus, SystemClock  # noqa: E402
from appliance.http import HttpClient  # noqa: E402
from appliance.store.worker_store import WorkerStore  # noqa: E402
from appliance.worker.admission import AdmissionClient  # noqa: E402
from appliance.worker.service import WorkerService  # noqa: E402
from appliance.worker.wire import parse_exec  # noqa: E402
from tests.worker.peers import (  # noqa: E402
    ADMISSION_TOKEN,
    NAMESPACE,
    WORKER_ID,
    WORKER_TOKEN,
    AdmissionPeer,
    exec_body,
    execution_id,
    running_worker,
)

CODE = "1 + 1"
ENGINE = {"max_concurrent": 4, "max_queued": 28}


def percentiles(values_ms: list[float]) -> dict[str, float]:
    if not values_ms:
        return {"n": 0}
    ordered = sorted(values_ms)
    return {
        "n": len(ordered),
        "p50": statistics.median(ordered),
        "p90": ordered[int(0.9 * (len(ordered) - 1))],
        "p99": ordered[int(0.99 * (len(ordered) - 1))],
        "max": ordered[-1],
    }


class TimedEngine(Engine):
    """The real engine, noting when each submission entered it and when its script started."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.submitted_at: dict[str, float] = {}
        self.running_at: dict[str, float] = {}
        self.add_listener(self._on_report)

    def submit_reserved(self, reservation: Any, request: Any) -> ExecutionReport:
        self.submitted_at[request.execution_id] = time.perf_counter()
        return super().submit_reserved(reservation, request)

    def _on_report(self, report: ExecutionReport) -> None:
        if report.status is ExecutionStatus.RUNNING and report.started_at is not None:
            self.running_at.setdefault(report.execution_id, time.perf_counter())


def open_loop(
    rate: float, seconds: float, submitters: int, launch: Callable[[int], None]
) -> tuple[list[float], float]:
    """Arrivals at `rate`/s for `seconds`; launch(n) in `submitters` threads. (lateness_ms, end)"""
    count = int(rate * seconds)
    start = time.perf_counter() + 0.2
    lateness_ms: list[float] = []
    numbers = itertools.count()
    lock = threading.Lock()

    def carrier() -> None:
        while True:
            with lock:
                n = next(numbers)
            if n >= count:
                return
            due = start + n / rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            lateness_ms.append((time.perf_counter() - due) * 1000)
            launch(n)

    threads = [threading.Thread(target=carrier, daemon=True) for _ in range(submitters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return lateness_ms, start


def service_run(label: str, args: argparse.Namespace, child_executions_max: int) -> dict[str, Any]:
    peer = AdmissionPeer("grant")
    with tempfile.TemporaryDirectory(dir=args.data_root) as tmp:
        config = parse_worker_config(
            {
                "namespace": NAMESPACE,
                "worker_id": WORKER_ID,
                "data_dir": str(Path(tmp) / "data"),
                "bearer_env": "W",
                "admission_bearer_env": "A",
                "admission_urls": [peer.url],
                "listen_addr": "127.0.0.1:9",
                "engine": ENGINE,
            }
        )
        store = WorkerStore.create_or_open(
            config.data_dir, namespace=NAMESPACE, worker_id=WORKER_ID, now_ms=0
        )
        engine = TimedEngine(
            max_concurrent=ENGINE["max_concurrent"],
            max_queued=ENGINE["max_queued"],
            child_executions_max=child_executions_max,
            executions_per_child=config.engine.executions_per_child,  # as the worker does
        )
        client = HttpClient()
        permits = AdmissionClient(
            (parse_origin(peer.url),), Secret(ADMISSION_TOKEN), store.incarnation_id, client
        )
        service = WorkerService(
            config=config, store=store, engine=engine, admission=permits, clock=SystemClock()
        )
        finished_at: dict[str, float] = {}
        answered_ms: list[float] = []
        refused: dict[int, int] = {}
        guard = threading.Lock()

        def on_terminal(report: ExecutionReport) -> None:
            if report.status.terminal:  # the listener runs after the service's store listener
                with guard:
                    finished_at[report.execution_id] = time.perf_counter()

        engine.add_listener(on_terminal)
        try:
            with engine._cond:  # the warm children are up before the clock starts
                engine._cond.wait_for(lambda: engine.stats().warm_children >= 2, timeout=60)

            def launch(n: int) -> None:
                began = time.perf_counter()
                answer = service.execute(parse_exec(exec_body(CODE, occurrence_id=n + 1)))
                with guard:
                    answered_ms.append((time.perf_counter() - began) * 1000)
                    if answer.status != 202:
                        refused[answer.status] = refused.get(answer.status, 0) + 1

            lateness_ms, start = open_loop(args.rate, args.seconds, args.submitters, launch)
            count = int(args.rate * args.seconds)
            deadline = time.monotonic() + 60
            while len(finished_at) < count - sum(refused.values()):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            return summarize(
                label,
                args,
                store,
                engine,
                count,
                start,
                lateness_ms,
                answered_ms,
                finished_at,
                refused,
            )
        finally:
            engine.shutdown(10)
            client.close()
            store.close()
            peer.close()


def summarize(
    label: str,
    args: argparse.Namespace,
    store: WorkerStore,
    engine: TimedEngine,
    count: int,
    start: float,
    lateness_ms: list[float],
    answered_ms: list[float],
    finished_at: dict[str, float],
    refused: dict[int, int],
) -> dict[str, Any]:
    succeeded = 0
    for n in range(count):
        record = store.get_execution(execution_id(n + 1))
        if record is not None and record.status == "completed" and record.result["value"] == 2:
            succeeded += 1
    last = max(finished_at.values()) if finished_at else start
    to_running = [
        (engine.running_at[e] - engine.submitted_at[e]) * 1000
        for e in engine.submitted_at
        if e in engine.running_at
    ]
    return {
        "label": label,
        "offered": count,
        "succeeded": succeeded,
        "refused": refused,
        "span_s": round(last - start, 2),
        "completed_per_s": round(succeeded / max(last - start, 1e-9), 1),
        "submission_to_running_ms": percentiles(to_running),
        "exec_to_answer_ms": percentiles(answered_ms),
        "arrival_lateness_ms": percentiles(lateness_ms),
        "children_spawned": engine.stats().children_spawned_total,
    }


@contextlib.contextmanager
def baseline_checkout(ref: str) -> Iterator[Path]:
    """The tree of `ref`, extracted (no git worktree is created)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref],
        check=True,
        capture_output=True,
    ).stdout
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp)


def process_run(label: str, args: argparse.Namespace, pythonpath: Path | None) -> dict[str, Any]:
    peer = AdmissionPeer("grant")
    extra_env = {} if pythonpath is None else {"PYTHONPATH": str(pythonpath)}
    # `python -m` puts the working directory first on sys.path: the worker (and its engine
    # children, which inherit it) must start in the tree whose code it is meant to run.
    previous_cwd = os.getcwd()
    os.chdir(pythonpath or ROOT)
    try:
        with (
            tempfile.TemporaryDirectory(dir=args.data_root) as tmp,
            running_worker(Path(tmp), [peer.url], engine=ENGINE, extra_env=extra_env) as worker,
        ):
            answered_ms: list[float] = []
            refused: dict[int, int] = {}
            guard = threading.Lock()
            local = threading.local()

            def launch(n: int) -> None:
                if not hasattr(local, "client"):
                    local.client = HttpClient(connect_timeout_ms=2_000, read_timeout_ms=30_000)
                began = time.perf_counter()
                body = json.dumps(exec_body(CODE, occurrence_id=n + 1)).encode()
                response = local.client.request(
                    "POST",
                    f"{worker.url}/api/scheduled/v1/exec",
                    body=body,
                    headers={"Content-Type": "application/json"},
                    bearer=WORKER_TOKEN,
                )
                with guard:
                    answered_ms.append((time.perf_counter() - began) * 1000)
                    if response.status != 202:
                        refused[response.status] = refused.get(response.status, 0) + 1

            lateness_ms, _ = open_loop(args.rate, args.seconds, args.submitters, launch)
            count = int(args.rate * args.seconds)
            succeeded = 0
            finished_ms: list[float] = []
            pids: set[int] = set()
            for n in range(count):
                try:
                    final = worker.wait_terminal(execution_id(n + 1), timeout_seconds=60)
                except Exception:
                    continue
                if final.get("status") == "completed" and final.get("result") == 2:
                    succeeded += 1
                    finished_ms.append(iso_ms(final["finished_at"]))
                    if isinstance(final.get("pid"), int):
                        pids.add(final["pid"])
            first = min(finished_ms) if finished_ms else 0.0
            last = max(finished_ms) if finished_ms else 0.0
            return {
                "label": label,
                "offered": count,
                "succeeded": succeeded,
                "refused": refused,
                "completed_span_s": round((last - first) / 1000, 2),
                "completed_per_s": round(succeeded / max((last - first) / 1000, 1e-9), 1),
                "exec_to_202_ms": percentiles(answered_ms),
                "distinct_child_pids": len(pids),
                "arrival_lateness_ms": percentiles(lateness_ms),
            }
    finally:
        os.chdir(previous_cwd)
        peer.close()


def iso_ms(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


def machine() -> str:
    cpus = os.cpu_count()
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg()
    return (
        f"{platform.node()}: {cpus} CPUs ({model}), Linux {platform.release()}, "
        f"Python {platform.python_version()}, load average {load[0]:.2f} at start"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("service", "process"), default="service")
    parser.add_argument("--rate", type=float, default=120.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--submitters", type=int, default=16)
    parser.add_argument("--baseline-ref", default="6053f5f")
    parser.add_argument("--only", choices=("reused", "fresh"), default=None)
    parser.add_argument(
        "--data-root", default=None, help="where the worker's data_dir goes (e.g. /dev/shm)"
    )
    args = parser.parse_args()
    print(machine(), flush=True)
    print(
        f"mode {args.mode}, rate {args.rate}/s for {args.seconds} s, "
        f"{args.submitters} submitters, engine {ENGINE}, data under {args.data_root or '/tmp'}",
        flush=True,
    )
    runs = [r for r in ("reused", "fresh") if args.only in (None, r)]
    for which in runs:
        if args.mode == "service":
            result = service_run(which, args, 1000 if which == "reused" else 1)
        elif which == "reused":
            result = process_run("this checkout (reused children)", args, None)
        else:
            with baseline_checkout(args.baseline_ref) as tree:
                result = process_run(f"baseline {args.baseline_ref} (fresh child)", args, tree)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
