"""Benchmark appliance.local against APScheduler 3 doing the same work, in the same run.

1. Dispatch overhead per task: N one-shot no-op tasks are registered while not yet due, then
   released at once (appliance.local: a ManualClock advanced past their due time; APScheduler:
   ``start(paused=True)`` then ``resume()``); the time until every callback has run, divided by N.
   Both use the same number of callback threads and an in-memory store.
2. Scan cost at 65,536 registered tasks with 128 due, at the configured maximum (64 workers, so
   the dispatch queue holds 128): one due-task scan (appliance.local: ``_Core.scan``; APScheduler:
   ``BaseScheduler._process_jobs`` with a memory job store), repeated with fresh due tasks.

Run: .venv/bin/python bench/bench_local.py [--write docs/bench-local.md]
Needs the bench-only extra ``apscheduler<4``.
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import apscheduler
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler

from appliance.local import ManualClock, ScheduledTask, Scheduler, SchedulerConfig, TaskSchedule

WORKERS = 4
DISPATCH_TASKS = 10_000
REPEATS = 5
SCAN_REGISTERED = 65_536
SCAN_DUE = 128
SCAN_REPEATS = 30
WAIT_S = 120.0


class Countdown:
    def __init__(self, total: int):
        self.remaining = total
        self.lock = threading.Lock()
        self.done = threading.Event()

    def __call__(self, *_args: object) -> None:
        with self.lock:
            self.remaining -= 1
            if self.remaining == 0:
                self.done.set()


def dispatch_local(n: int) -> float:
    start = datetime(2030, 1, 1, tzinfo=UTC)
    clock = ManualClock(start)
    scheduler = Scheduler(SchedulerConfig(max_concurrent_tasks=WORKERS, max_tasks=n), clock=clock)
    countdown = Countdown(n)
    due = TaskSchedule.once(start + timedelta(seconds=1))
    for i in range(n):
        scheduler.schedule(ScheduledTask(f"t{i}", due, countdown))
    began = time.perf_counter()
    clock.advance(timedelta(seconds=1))
    if not countdown.done.wait(WAIT_S):
        raise RuntimeError("appliance.local dispatch did not finish")
    elapsed = time.perf_counter() - began
    scheduler.shutdown()
    return elapsed / n


def dispatch_apscheduler(n: int) -> float:
    scheduler = BackgroundScheduler(
        jobstores={"default": MemoryJobStore()},
        executors={"default": ThreadPoolExecutor(WORKERS)},
        job_defaults={"misfire_grace_time": None, "coalesce": False},
        timezone=UTC,
    )
    scheduler.start(paused=True)
    countdown = Countdown(n)
    run_date = datetime.now(UTC)
    for _ in range(n):
        scheduler.add_job(countdown, "date", run_date=run_date)
    began = time.perf_counter()
    scheduler.resume()
    if not countdown.done.wait(WAIT_S):
        raise RuntimeError("APScheduler dispatch did not finish")
    elapsed = time.perf_counter() - began
    scheduler.shutdown(wait=True)
    return elapsed / n


def scan_local() -> tuple[list[float], list[float]]:
    start = datetime(2030, 1, 1, tzinfo=UTC)
    clock = ManualClock(start)
    config = SchedulerConfig(max_concurrent_tasks=64, max_tasks=SCAN_REGISTERED)
    scheduler = Scheduler(config, clock=clock)
    noop = Countdown(10**9)
    far = TaskSchedule.once(start + timedelta(days=365))
    for i in range(SCAN_REGISTERED - SCAN_DUE):
        scheduler.schedule(ScheduledTask(f"idle{i}", far, noop))
    core = scheduler._core
    due_at = start + timedelta(seconds=1)
    samples: list[float] = []
    cpu_samples: list[float] = []
    for round_ in range(SCAN_REPEATS):
        # The clock stays before due_at, so the coordinator's own scans never see them as due.
        handles = [
            scheduler.schedule(ScheduledTask(f"due{round_}-{i}", TaskSchedule.once(due_at), noop))
            for i in range(SCAN_DUE)
        ]
        if len(core.entries) != SCAN_REGISTERED:
            raise RuntimeError(f"expected {SCAN_REGISTERED} registered, have {len(core.entries)}")
        with core.lock:
            began, began_cpu = time.perf_counter(), time.thread_time()
            core.scan(due_at)
            samples.append(time.perf_counter() - began)
            cpu_samples.append(time.thread_time() - began_cpu)
            retained = core.index.stats.retained_peak
        if retained > SCAN_DUE:
            raise RuntimeError(f"retained {retained} candidates")
        for handle in handles:
            handle.wait_finished(WAIT_S)
    scheduler.shutdown()
    return samples, cpu_samples


class _ManualAPScheduler(BackgroundScheduler):
    """Running state without its own loop, so the bench can time one ``_process_jobs`` pass."""

    def _main_loop(self) -> None:
        return


def scan_apscheduler() -> tuple[list[float], list[float]]:
    scheduler = _ManualAPScheduler(
        jobstores={"default": MemoryJobStore()},
        executors={"default": ThreadPoolExecutor(64)},
        job_defaults={"misfire_grace_time": None, "coalesce": False},
        timezone=UTC,
    )
    scheduler.start()
    noop = Countdown(10**9)
    far = datetime.now(UTC) + timedelta(days=365)
    for _ in range(SCAN_REGISTERED - SCAN_DUE):
        scheduler.add_job(noop, "date", run_date=far)
    samples: list[float] = []
    cpu_samples: list[float] = []
    for _ in range(SCAN_REPEATS):
        due_at = datetime.now(UTC) - timedelta(milliseconds=1)
        for _ in range(SCAN_DUE):
            scheduler.add_job(noop, "date", run_date=due_at)
        if len(scheduler.get_jobs()) != SCAN_REGISTERED:
            raise RuntimeError("APScheduler job count drifted")
        began, began_cpu = time.perf_counter(), time.thread_time()
        scheduler._process_jobs()
        samples.append(time.perf_counter() - began)
        cpu_samples.append(time.thread_time() - began_cpu)
    scheduler.shutdown(wait=True)
    return samples, cpu_samples


def p90(samples: list[float]) -> float:
    return sorted(samples)[int(0.9 * len(samples))]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", help="write the markdown report to this path")
    args = parser.parse_args()
    logging.getLogger("apscheduler").setLevel(logging.WARNING)

    local_dispatch = statistics.median(dispatch_local(DISPATCH_TASKS) for _ in range(REPEATS))
    aps_dispatch = statistics.median(dispatch_apscheduler(DISPATCH_TASKS) for _ in range(REPEATS))
    local_scan, local_scan_cpu = scan_local()
    aps_scan, aps_scan_cpu = scan_apscheduler()
    ratio = local_dispatch / aps_dispatch
    local_scan_ms = statistics.median(local_scan) * 1e3
    aps_scan_ms = statistics.median(aps_scan) * 1e3

    verdict_dispatch = "PASS" if ratio <= 0.5 else "FAIL"
    verdict_scan = "PASS" if local_scan_ms <= 5 else "FAIL"
    rows = [
        "| measure | appliance.local | APScheduler 3 | target | result |",
        "|---|---|---|---|---|",
        f"| dispatch overhead per task ({DISPATCH_TASKS:,} one-shot no-op tasks, "
        f"{WORKERS} workers, median of {REPEATS}) | {local_dispatch * 1e6:.1f} us "
        f"| {aps_dispatch * 1e6:.1f} us | <= 0.5 x APScheduler "
        f"| {ratio:.2f} x {verdict_dispatch} |",
        f"| one due-task scan, {SCAN_REGISTERED:,} registered / {SCAN_DUE} due "
        f"(median of {SCAN_REPEATS}) | {local_scan_ms:.3f} ms | {aps_scan_ms:.3f} ms "
        f"| <= 5 ms | {verdict_scan} |",
        f"| scan p90 | {p90(local_scan) * 1e3:.3f} ms | {p90(aps_scan) * 1e3:.3f} ms | | |",
        f"| scan CPU time of the scanning thread, median | "
        f"{statistics.median(local_scan_cpu) * 1e3:.3f} ms "
        f"| {statistics.median(aps_scan_cpu) * 1e3:.3f} ms | | |",
    ]
    table = "\n".join(rows)
    report = f"""# Benchmark: appliance.local vs APScheduler 3

Command: `.venv/bin/python bench/bench_local.py --write docs/bench-local.md`
(bench-only extra: `apscheduler<4`; here APScheduler {apscheduler.__version__}, Python
{platform.python_version()}, {platform.machine()}, 2 shared cores).

{table}

How it is measured:
- *Dispatch*: tasks are registered while not yet due, then all released at once (a
  `ManualClock` advanced past their due time for appliance.local; `start(paused=True)` then
  `resume()` for APScheduler's `BackgroundScheduler` with a `MemoryJobStore` and a
  `ThreadPoolExecutor` of the same size). The time from release until the last callback ran,
  divided by the task count, is the per-task overhead of scanning, queueing, handing to a
  worker, running a no-op and recording the outcome.
- *Scan*: at the configured maximum (64 workers, 65,536 tasks, dispatch queue 128), one
  coordinator scan that finds the 128 due tasks among 65,536, selects them through the bounded
  candidate heap and hands them to the queue (`_Core.scan`), against one
  `BaseScheduler._process_jobs()` pass of APScheduler over the same population. Fresh due tasks
  are registered before each sample; registration is not timed. Wall time includes being
  preempted by the workers the scan wakes; the CPU-time row excludes it.

Why appliance.local is cheaper per task: due tasks wait in one deadline heap per priority level,
so a scan pops only as many tasks as there are free queue slots (O(slots x log n), never
O(due)); while the bounded queue is saturated, the worker that takes an item refills the freed
slot itself under the same lock acquisition, so no coordinator wake-up is paid per task.
APScheduler hands every due job to an unbounded executor queue and records job events per run.
Figures vary with load on the shared machine; compare the two columns of one run.
"""
    print(report)
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            f.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
