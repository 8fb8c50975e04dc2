"""Shared fixtures for the engine tests: real children, and a check that none are left over."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from appliance.engine import (
    Engine,
    ExecutionReport,
    ExecutionRequest,
    ExecutionStatus,
    ScheduledInfo,
)
from appliance.engine.pool import PoolEngine
from appliance.engine.protocol import PARENT_PID_ENV

SCHEDULED = ScheduledInfo(
    namespace="ns-test",
    schedule_id="sched-1",
    schedule_name="nightly report",
    occurrence_id="occ-42",
    attempt=2,
    ownership_epoch=7,
    due_time="2026-11-29T02:00:00Z",
)
_ids = itertools.count(1)


def processes_of_this_test_run() -> set[int]:
    """Pids whose parent is this process, or that carry the engine marker naming this process
    (a child re-parented after its supervisor thread vanished would still carry it)."""
    me = os.getpid()
    marker = f"{PARENT_PID_ENV}={me}".encode() + b"\0"
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            if int(fields[1]) == me:
                found.add(pid)
                continue
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if marker in environ.read():
                    found.add(pid)
        except (OSError, IndexError, ValueError):
            continue
    return found


@pytest.fixture(autouse=True)
def no_orphan_processes() -> Iterator[None]:
    before = processes_of_this_test_run()
    yield
    leftovers = processes_of_this_test_run() - before
    assert not leftovers, f"test left child processes behind: {sorted(leftovers)}"


@pytest.fixture
def make_engine() -> Iterator[Callable[..., Engine]]:
    engines: list[Engine] = []

    def factory(**kwargs: Any) -> Engine:
        kwargs.setdefault("max_concurrent", 2)
        kwargs.setdefault("max_queued", 2)
        kwargs.setdefault("warm_children", 1)
        engine = Engine(**kwargs)
        engines.append(engine)
        return engine

    yield factory
    for engine in engines:
        assert engine.shutdown(wait_seconds=10.0), "engine shutdown left work behind"


@pytest.fixture
def engine(make_engine: Callable[..., Engine]) -> Engine:
    return make_engine()


def request(
    code: str,
    *,
    heap_mb: int = 64,
    timeout_seconds: float = 5.0,
    execution_id: str | None = None,
    scheduled: ScheduledInfo = SCHEDULED,
) -> ExecutionRequest:
    return ExecutionRequest(
        execution_id=execution_id or f"exec-{next(_ids)}",
        code=code,
        scheduled=scheduled,
        heap_mb=heap_mb,
        timeout_seconds=timeout_seconds,
    )


def submit(engine: PoolEngine, code: str, **kwargs: Any) -> ExecutionReport:
    return engine.reserve().capability(request(code, **kwargs), lambda: True).submit()


def run(
    engine: PoolEngine, code: str, *, wait_seconds: float = 20.0, **kwargs: Any
) -> ExecutionReport:
    submitted = submit(engine, code, **kwargs)
    report = engine.wait(submitted.execution_id, wait_seconds)
    assert report.status.terminal, f"still running after {wait_seconds} s"
    return report


class RunningWatcher:
    """Wakes when an execution's script has started (its running report with started_at)."""

    def __init__(self, engine: PoolEngine) -> None:
        self._started: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        engine.add_listener(self._on_report)

    def _event(self, execution_id: str) -> threading.Event:
        with self._lock:
            return self._started.setdefault(execution_id, threading.Event())

    def _on_report(self, report: ExecutionReport) -> None:
        if report.status is ExecutionStatus.RUNNING and report.started_at is not None:
            self._event(report.execution_id).set()

    def wait_started(self, execution_id: str, timeout_seconds: float = 20.0) -> None:
        assert self._event(execution_id).wait(timeout_seconds), "script never started"


class FakeClock:
    """A clock that advances one second per reading, from a fixed instant."""

    def __init__(self) -> None:
        self._next = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            value = self._next
            self._next += timedelta(seconds=1)
            return value


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
