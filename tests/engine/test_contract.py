"""One contract, two engines: the real V8 engine and the in-memory stand-in must agree on every
rule of the pool, the capability, cancel, reports and shutdown (STYLE: an in-memory and a real
implementation of each interface, one contract suite for both)."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from appliance.engine import (
    CapabilityError,
    DuplicateExecution,
    EngineClosed,
    ExecutionReport,
    ExecutionStatus,
    InMemoryEngine,
    PoolFull,
    SubmitRefused,
    UnknownExecution,
)
from appliance.engine.model import REASON_CANCELLED, REASON_SHUTDOWN, REASON_TIMEOUT
from appliance.engine.pool import PoolEngine

from .conftest import FakeClock, RunningWatcher, request, submit


@dataclass(frozen=True)
class Scripts:
    """How to say the same thing to each engine."""

    value: Callable[[Any], str]
    throw: Callable[[str], str]
    spin: str


REAL_SCRIPTS = Scripts(
    value=lambda v: f"({json.dumps(v)})",
    throw=lambda message: f"throw new Error({json.dumps(message)})",
    spin="while (true) {}",
)
MEMORY_SCRIPTS = Scripts(
    value=json.dumps,
    throw=lambda message: f"throw {message}",
    spin="spin",
)


@dataclass
class Subject:
    make: Callable[..., PoolEngine]
    scripts: Scripts


@pytest.fixture(params=["real", "memory"])
def subject(request: pytest.FixtureRequest, make_engine: Callable[..., Any]) -> Iterator[Subject]:
    if request.param == "real":
        yield Subject(make_engine, REAL_SCRIPTS)
        return
    engines: list[InMemoryEngine] = []

    def make(**kwargs: Any) -> InMemoryEngine:
        kwargs.pop("warm_children", None)
        kwargs.setdefault("max_concurrent", 2)
        kwargs.setdefault("max_queued", 2)
        engine = InMemoryEngine(**kwargs)
        engines.append(engine)
        return engine

    yield Subject(make, MEMORY_SCRIPTS)
    for engine in engines:
        assert engine.shutdown(wait_seconds=10)


def finish(engine: PoolEngine, code: str, **kwargs: Any) -> ExecutionReport:
    report = engine.wait(submit(engine, code, **kwargs).execution_id, 30)
    assert report.status.terminal
    return report


def test_completion_value_is_the_result(subject: Subject) -> None:
    engine = subject.make()
    report = finish(engine, subject.scripts.value({"answer": 42}))
    assert report.status is ExecutionStatus.COMPLETED
    assert report.result == {"answer": 42}
    assert report.started_at is not None and report.finished_at is not None


def test_exception_is_failed_with_its_message(subject: Subject) -> None:
    report = finish(subject.make(), subject.scripts.throw("boom"))
    assert report.status is ExecutionStatus.FAILED
    assert report.error is not None and "boom" in report.error


def test_timeout_is_timed_out(subject: Subject) -> None:
    report = finish(subject.make(), subject.scripts.spin, timeout_seconds=0.5)
    assert report.status is ExecutionStatus.TIMED_OUT
    assert report.reason == REASON_TIMEOUT


def test_capacity_is_max_concurrent_plus_max_queued(subject: Subject) -> None:
    engine = subject.make(max_concurrent=1, max_queued=1, warm_children=0)
    held = [engine.reserve(), engine.reserve()]
    with pytest.raises(PoolFull):
        engine.reserve()
    assert engine.stats().saturation_events == 1
    held[0].release()
    held.append(engine.reserve())
    for reservation in held:
        reservation.release()
    assert engine.stats().reserved == 0


def test_capability_is_one_shot_and_rechecks_first(subject: Subject) -> None:
    engine = subject.make(warm_children=0)
    calls = []
    capability = engine.reserve().capability(
        request(subject.scripts.value(1)), lambda: calls.append("recheck") or True
    )
    for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(CapabilityError):
            attempt(capability)
    submitted = capability.submit()
    assert calls == ["recheck"]
    with pytest.raises(CapabilityError):
        capability.submit()
    assert engine.wait(submitted.execution_id, 30).status is ExecutionStatus.COMPLETED


def test_refused_recheck_submits_nothing(subject: Subject) -> None:
    engine = subject.make(warm_children=0)
    the_request = request(subject.scripts.value(1))
    with pytest.raises(SubmitRefused):
        engine.reserve().capability(the_request, lambda: False).submit()
    with pytest.raises(UnknownExecution):
        engine.status(the_request.execution_id)
    assert engine.stats().reserved == 0


def test_work_beyond_max_concurrent_queues_then_runs(subject: Subject) -> None:
    engine = subject.make(max_concurrent=1, max_queued=1)
    watcher = RunningWatcher(engine)
    busy = submit(engine, subject.scripts.spin, timeout_seconds=60)
    watcher.wait_started(busy.execution_id)
    queued = submit(engine, subject.scripts.value("second"))
    assert queued.status is ExecutionStatus.RUNNING and queued.started_at is None
    assert (engine.stats().queued, engine.stats().queued_events) == (1, 1)
    engine.cancel(busy.execution_id)
    report = engine.wait(queued.execution_id, 30)
    assert report.result == "second"


def test_cancel_of_running_work_is_cancelled_and_frees_capacity(subject: Subject) -> None:
    engine = subject.make()
    watcher = RunningWatcher(engine)
    busy = submit(engine, subject.scripts.spin, timeout_seconds=60)
    watcher.wait_started(busy.execution_id)
    report = engine.cancel(busy.execution_id, wait_seconds=10)
    assert report.status is ExecutionStatus.CANCELLED
    assert report.reason == REASON_CANCELLED
    assert (engine.stats().running, engine.stats().reserved) == (0, 0)


def test_cancel_of_queued_work_never_starts_it(subject: Subject) -> None:
    engine = subject.make(max_concurrent=1, max_queued=1)
    watcher = RunningWatcher(engine)
    busy = submit(engine, subject.scripts.spin, timeout_seconds=60)
    watcher.wait_started(busy.execution_id)
    queued = submit(engine, subject.scripts.value(1))
    report = engine.cancel(queued.execution_id, wait_seconds=1)
    assert report.status is ExecutionStatus.CANCELLED
    assert report.started_at is None
    engine.cancel(busy.execution_id)


def test_completion_wins_over_a_later_cancel(subject: Subject) -> None:
    engine = subject.make()
    done = finish(engine, subject.scripts.value("kept"))
    assert engine.cancel(done.execution_id).result == "kept"


def test_listeners_see_running_then_terminal(subject: Subject) -> None:
    engine = subject.make()
    seen: list[ExecutionReport] = []
    engine.add_listener(seen.append)
    report = finish(engine, subject.scripts.value(1))
    mine = [r.status for r in seen if r.execution_id == report.execution_id]
    assert mine == [ExecutionStatus.RUNNING, ExecutionStatus.COMPLETED]


def test_duplicate_execution_id_is_refused(subject: Subject) -> None:
    engine = subject.make()
    finish(engine, subject.scripts.value(1), execution_id="twice")
    with pytest.raises(DuplicateExecution):
        submit(engine, subject.scripts.value(2), execution_id="twice")
    assert engine.stats().reserved == 0


def test_timestamps_come_from_the_injected_clock(subject: Subject) -> None:
    engine = subject.make(clock=FakeClock())
    report = finish(engine, subject.scripts.value(1))
    assert report.started_at is not None and report.finished_at is not None
    assert (report.finished_at - report.started_at).total_seconds() == 1


def test_shutdown_cancels_everything_and_admits_nothing(subject: Subject) -> None:
    engine = subject.make(max_concurrent=1, max_queued=1)
    watcher = RunningWatcher(engine)
    busy = submit(engine, subject.scripts.spin, timeout_seconds=60)
    watcher.wait_started(busy.execution_id)
    queued = submit(engine, subject.scripts.value(1))
    assert engine.shutdown(wait_seconds=10)
    for execution_id in (busy.execution_id, queued.execution_id):
        report = engine.status(execution_id)
        assert report.status is ExecutionStatus.CANCELLED
        assert report.reason == REASON_SHUTDOWN
    with pytest.raises(EngineClosed):
        engine.reserve()
    assert engine.child_pids() == frozenset()
