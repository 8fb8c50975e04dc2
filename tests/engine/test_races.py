"""Submissions, completions, cancels and shutdown racing each other: the books always balance."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pytest

from appliance.engine import Engine, ExecutionReport, ExecutionStatus, PoolFull

from .conftest import pid_exists, request

SCRIPTS = [
    "'quick'",
    "let s = 0; for (let i = 0; i < 3e6; i++) s += i; s",
    "while (true) {}",
    "new Promise(r => setTimeout(() => r('later'), 100))",
    "throw new Error('planned')",
]


@pytest.mark.parametrize("seed", [20261129, 7])
def test_random_cancels_against_running_and_queued_work_leave_nothing_behind(
    make_engine: Callable[..., Engine], seed: int
) -> None:
    rng = random.Random(seed)
    engine = make_engine(max_concurrent=2, max_queued=4, warm_children=2)
    peak_running = []
    engine.add_listener(lambda report: peak_running.append(engine.stats().running))

    submitted: list[str] = []
    cancellers: list[threading.Thread] = []
    for _ in range(12):
        try:
            reservation = engine.reserve()
        except PoolFull:
            engine.cancel(submitted[rng.randrange(len(submitted))], wait_seconds=10)
            continue
        the_request = request(rng.choice(SCRIPTS), timeout_seconds=2)
        reservation.capability(the_request, lambda: True).submit()
        submitted.append(the_request.execution_id)
        if rng.random() < 0.4:
            victim = submitted[rng.randrange(len(submitted))]
            canceller = threading.Thread(target=engine.cancel, args=(victim, 10))
            canceller.start()
            cancellers.append(canceller)

    reports: list[ExecutionReport] = [engine.wait(i, 30) for i in submitted]
    for canceller in cancellers:
        canceller.join(10)
        assert not canceller.is_alive()
    assert all(r.status.terminal for r in reports)
    for report in reports:
        if report.status is ExecutionStatus.CANCELLED and report.pid is not None:
            assert not pid_exists(report.pid)
    stats = engine.stats()
    assert (stats.reserved, stats.running, stats.queued) == (0, 0, 0)
    assert max(peak_running) <= 2


def test_shutdown_racing_submissions_settles_every_execution(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(max_concurrent=2, max_queued=2, warm_children=2)
    ids = []
    for code in ("while (true) {}", "while (true) {}", "'a'", "'b'"):
        the_request = request(code, timeout_seconds=30)
        engine.reserve().capability(the_request, lambda: True).submit()
        ids.append(the_request.execution_id)
    assert engine.shutdown(wait_seconds=10)
    for execution_id in ids:
        report = engine.status(execution_id)
        assert report.status.terminal
        assert report.pid is None or not pid_exists(report.pid)
    assert engine.stats().reserved == 0
