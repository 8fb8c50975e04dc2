"""The chaos workload: schedules that together cover every policy and every kind of outcome.

Missed: Skip, RunOnce, CatchUp. Overlap: Skip, Queue, Concurrent. Retries with and without a delay.
Scripts that succeed, fail on some attempts only (so a retry can succeed), always fail, await a
promise, and run long (the driver cancels some of those while they run).
"""

from __future__ import annotations

from typing import Any

# Busy for LONG_RUN_MS of real time: long enough to be cancelled or cut off mid-run.
LONG_RUN_MS = 2500


def definition(
    name: str,
    code: str,
    *,
    cron: str = "* * * * *",
    missed: Any = "Skip",
    overlap: str = "Skip",
    max_retries: int = 0,
    delay_seconds: int = 0,
) -> dict[str, Any]:
    return {
        "name": name,
        "code": code,
        "cron": cron,
        "timezone": "UTC",
        "policy": {
            "missed": missed,
            "overlap": overlap,
            "retry": {"max_retries": max_retries, "delay_seconds": delay_seconds},
        },
    }


WORKLOAD: list[dict[str, Any]] = [
    definition("quick-skip-skip", "console.log('ok', scheduled.occurrence_id)"),
    definition(
        "flaky-runonce-queue",
        # Fails the first attempt of every third occurrence: a retry after a confirmed failure.
        "if (scheduled.occurrence_id % 3 === 0 && scheduled.attempt === 1)"
        " { throw new Error('flaky'); } console.log('ok')",
        missed="RunOnce",
        overlap="Queue",
        max_retries=2,
        delay_seconds=20,
    ),
    definition(
        "promise-catchup-concurrent",
        "new Promise((resolve) => resolve(scheduled.due_time))",
        missed={"CatchUp": {"cap": 3}},
        overlap="Concurrent",
    ),
    definition(
        "always-fails-catchup-queue",
        "throw new Error('boom')",
        cron="*/2 * * * *",
        missed={"CatchUp": {"cap": 2}},
        overlap="Queue",
        max_retries=1,
        delay_seconds=0,
    ),
    definition(
        "long-skip-skip",
        f"const end = Date.now() + {LONG_RUN_MS}; while (Date.now() < end) {{}}",
        cron="*/2 * * * *",
    ),
]
LONG_SCHEDULE_ID = 5  # config schedules get ids 1..N in order (SPEC §3)

# Created through the owner's stdin while faults are injected (acknowledged ones must survive).
CREATED = definition(
    "created-runonce-concurrent",
    "console.log('created')",
    cron="*/3 * * * *",
    missed="RunOnce",
    overlap="Concurrent",
)
