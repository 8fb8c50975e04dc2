"""Cancel: cancelled only once the child is reaped; completion may win the race."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from appliance.engine import Engine, ExecutionStatus, UnknownExecution
from appliance.engine.model import REASON_CANCELLED

from .conftest import RunningWatcher, pid_exists, run, submit


def test_cancel_of_a_busy_loop_is_cancelled_with_the_child_reaped(engine: Engine) -> None:
    watcher = RunningWatcher(engine)
    submitted = submit(engine, "while (true) {}", timeout_seconds=60)
    watcher.wait_started(submitted.execution_id)
    pid = engine.status(submitted.execution_id).pid
    assert pid is not None and pid_exists(pid)

    started = time.monotonic()
    report = engine.cancel(submitted.execution_id, wait_seconds=10)
    assert report.status is ExecutionStatus.CANCELLED
    assert report.reason == REASON_CANCELLED
    assert report.pid == pid
    assert not pid_exists(pid)  # reaped, not merely signalled
    assert time.monotonic() - started < 2.0
    assert engine.stats().running == 0 and engine.stats().reserved == 0


def test_completion_that_won_the_race_keeps_its_result(engine: Engine) -> None:
    done = run(engine, "'finished first'")
    report = engine.cancel(done.execution_id, wait_seconds=1)
    assert report.status is ExecutionStatus.COMPLETED
    assert report.result == "finished first"


def test_cancel_of_a_queued_execution_never_starts_a_child(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(max_concurrent=1, max_queued=1)
    watcher = RunningWatcher(engine)
    busy = submit(engine, "while (true) {}", timeout_seconds=60)
    watcher.wait_started(busy.execution_id)
    queued = submit(engine, "'should never run'")
    assert queued.status is ExecutionStatus.RUNNING and queued.started_at is None
    assert engine.stats().queued == 1

    report = engine.cancel(queued.execution_id, wait_seconds=1)
    assert report.status is ExecutionStatus.CANCELLED
    assert report.pid is None and report.started_at is None
    assert engine.stats().queued == 0
    assert engine.cancel(busy.execution_id).status is ExecutionStatus.CANCELLED


def test_cancel_of_an_unknown_execution_raises(engine: Engine) -> None:
    with pytest.raises(UnknownExecution):
        engine.cancel("no-such-execution")


def test_cancel_is_idempotent_once_terminal(engine: Engine) -> None:
    watcher = RunningWatcher(engine)
    submitted = submit(engine, "while (true) {}", timeout_seconds=60)
    watcher.wait_started(submitted.execution_id)
    first = engine.cancel(submitted.execution_id)
    second = engine.cancel(submitted.execution_id)
    assert first == second
    assert second.status is ExecutionStatus.CANCELLED
