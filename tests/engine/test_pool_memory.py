"""Pool rules that need no V8, proved on the in-memory engine (same pool code as Engine)."""

from __future__ import annotations

import threading

import pytest

from appliance.engine import ExecutionRequest, ExecutionStatus, InMemoryEngine, UnknownExecution
from appliance.engine.memory import ScriptOutcome

from .conftest import RunningWatcher, submit


def test_oldest_terminal_reports_are_dropped_beyond_reports_max() -> None:
    engine = InMemoryEngine(max_concurrent=1, max_queued=0, reports_max=2)
    try:
        ids = [engine.wait(submit(engine, str(i)).execution_id, 10).execution_id for i in range(3)]
        with pytest.raises(UnknownExecution):
            engine.status(ids[0])
        assert [engine.status(i).result for i in ids[1:]] == [1, 2]
    finally:
        assert engine.shutdown(5)


def test_running_executions_are_never_dropped() -> None:
    engine = InMemoryEngine(max_concurrent=2, max_queued=0, reports_max=2)
    watcher = RunningWatcher(engine)
    try:
        busy = submit(engine, "spin", timeout_seconds=60)
        watcher.wait_started(busy.execution_id)
        first = engine.wait(submit(engine, "1").execution_id, 10)
        second = engine.wait(submit(engine, "2").execution_id, 10)
        with pytest.raises(UnknownExecution):  # three records, limit two: the oldest ended goes
            engine.status(first.execution_id)
        assert engine.status(second.execution_id).result == 2
        assert engine.status(busy.execution_id).status is ExecutionStatus.RUNNING
        assert engine.cancel(busy.execution_id).status is ExecutionStatus.CANCELLED
    finally:
        assert engine.shutdown(5)


def test_code_is_dropped_once_the_execution_ends() -> None:
    seen: list[str] = []

    def behaviour(request: ExecutionRequest, stop: threading.Event) -> ScriptOutcome:
        seen.append(request.code)
        return ScriptOutcome(ExecutionStatus.COMPLETED, result=len(request.code))

    engine = InMemoryEngine(behaviour=behaviour)
    try:
        report = engine.wait(submit(engine, "x" * 1000).execution_id, 10)
        assert report.result == 1000 and seen == ["x" * 1000]
        execution = engine._executions[report.execution_id]
        assert execution.request.code == ""
    finally:
        assert engine.shutdown(5)


def test_behaviour_outcome_after_cancel_wins_like_a_completion() -> None:
    entered = threading.Event()
    release = threading.Event()

    def stubborn(request: ExecutionRequest, stop: threading.Event) -> ScriptOutcome:
        entered.set()
        release.wait(10)
        return ScriptOutcome(ExecutionStatus.COMPLETED, result="finished anyway")

    engine = InMemoryEngine(behaviour=stubborn)
    try:
        submitted = submit(engine, "ignored")
        assert entered.wait(10)
        still = engine.cancel(submitted.execution_id, wait_seconds=0.05)
        assert still.status is ExecutionStatus.RUNNING  # stop requested, not yet confirmed
        release.set()
        report = engine.wait(submitted.execution_id, 10)
        assert report.status is ExecutionStatus.COMPLETED
        assert report.result == "finished anyway"
    finally:
        release.set()
        assert engine.shutdown(5)
