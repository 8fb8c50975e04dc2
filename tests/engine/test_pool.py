"""Pool bounds and pressure counters (seeds/002 semantics), listeners, clock, shutdown."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from appliance.engine import (
    DuplicateExecution,
    Engine,
    EngineClosed,
    ExecutionReport,
    ExecutionStatus,
    InvalidEngineConfig,
    PoolFull,
)
from appliance.engine.model import (
    MAX_CONCURRENT_LIMIT,
    MAX_QUEUED_LIMIT,
    OUTPUT_LIMIT_BYTES_MAX,
    REASON_SHUTDOWN,
)

from .conftest import FakeClock, RunningWatcher, pid_exists, request, run, submit


def test_reservations_exactly_at_capacity_pass_and_one_more_is_pool_full(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(max_concurrent=2, max_queued=1, warm_children=0)
    held = [engine.reserve() for _ in range(3)]
    with pytest.raises(PoolFull):
        engine.reserve()
    stats = engine.stats()
    assert stats.reserved == 3
    assert stats.saturation_events == 1
    for reservation in held:
        reservation.release()


def test_every_refused_reservation_counts_as_a_saturation_event(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(max_concurrent=1, max_queued=0, warm_children=0)
    held = engine.reserve()
    for _ in range(3):
        with pytest.raises(PoolFull):
            engine.reserve()
    assert engine.stats().saturation_events == 3
    held.release()
    held.release()  # idempotent
    assert engine.stats().reserved == 0
    engine.reserve().release()  # capacity is really back
    assert engine.stats().saturation_events == 3


def test_admitted_work_beyond_max_concurrent_queues_then_runs(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(max_concurrent=1, max_queued=1)
    watcher = RunningWatcher(engine)
    busy = submit(engine, "while (true) {}", timeout_seconds=60)
    watcher.wait_started(busy.execution_id)
    waiting = submit(engine, "'ran after the busy one'")

    stats = engine.stats()
    assert (stats.running, stats.queued, stats.queued_events) == (1, 1, 1)
    assert engine.status(waiting.execution_id).started_at is None
    with pytest.raises(PoolFull):  # 1 running + 1 queued: the pool is full
        engine.reserve()

    engine.cancel(busy.execution_id)
    report = engine.wait(waiting.execution_id, 20)
    assert report.status is ExecutionStatus.COMPLETED
    assert report.result == "ran after the busy one"
    assert engine.stats().queued == 0 and engine.stats().queued_events == 1


def test_running_children_never_exceed_max_concurrent(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(max_concurrent=2, max_queued=3, warm_children=2)
    peak = []

    def watch(report: ExecutionReport) -> None:
        peak.append(engine.stats().running)

    engine.add_listener(watch)
    ids = [
        submit(engine, "let s = 0; for (let i = 0; i < 1e6; i++) s += i; s").execution_id
        for _ in range(5)
    ]
    reports = [engine.wait(i, 30) for i in ids]
    assert all(r.status is ExecutionStatus.COMPLETED for r in reports)
    assert max(peak) <= 2
    assert engine.stats().queued_events == 3


def test_duplicate_execution_id_is_refused(engine: Engine) -> None:
    first = run(engine, "1", execution_id="same-id")
    reservation = engine.reserve()
    with pytest.raises(DuplicateExecution):
        reservation.capability(request("2", execution_id="same-id"), lambda: True).submit()
    assert engine.stats().reserved == 0
    assert engine.status("same-id") == first


def test_listener_sees_running_then_terminal(engine: Engine) -> None:
    seen: list[ExecutionReport] = []
    engine.add_listener(seen.append)
    report = run(engine, "'x'")
    mine = [r for r in seen if r.execution_id == report.execution_id]
    assert [r.status for r in mine] == [ExecutionStatus.RUNNING, ExecutionStatus.COMPLETED]
    assert mine[0].started_at is not None and mine[0].pid is not None
    assert mine[1] == report


def test_timestamps_come_from_the_injected_clock(make_engine: Callable[..., Engine]) -> None:
    clock = FakeClock()
    engine = make_engine(clock=clock)
    report = run(engine, "'x'")
    assert report.started_at is not None and report.finished_at is not None
    assert report.started_at.year == 2026 and report.started_at.month == 11
    assert (report.finished_at - report.started_at).total_seconds() == 1


@pytest.mark.parametrize(
    ("setting", "value", "valid"),
    [
        ("max_concurrent", 0, False),
        ("max_concurrent", 1, True),
        ("max_concurrent", MAX_CONCURRENT_LIMIT, True),
        ("max_concurrent", MAX_CONCURRENT_LIMIT + 1, False),
        ("max_queued", -1, False),
        ("max_queued", 0, True),
        ("max_queued", MAX_QUEUED_LIMIT, True),
        ("max_queued", MAX_QUEUED_LIMIT + 1, False),
        ("output_limit_bytes", OUTPUT_LIMIT_BYTES_MAX, True),
        ("output_limit_bytes", OUTPUT_LIMIT_BYTES_MAX + 1, False),
        ("warm_children", -1, False),
    ],
)
def test_engine_settings_at_the_boundary(
    make_engine: Callable[..., Engine], setting: str, value: int, valid: bool
) -> None:
    kwargs = {"warm_children": 0, setting: value}
    if valid:
        make_engine(**kwargs)
    else:
        with pytest.raises(InvalidEngineConfig):
            make_engine(**kwargs)


def test_shutdown_cancels_work_reaps_every_child_and_admits_nothing(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(max_concurrent=1, max_queued=1, warm_children=1)
    watcher = RunningWatcher(engine)
    busy = submit(engine, "while (true) {}", timeout_seconds=60)
    watcher.wait_started(busy.execution_id)
    queued = submit(engine, "'never'")
    busy_pid = engine.status(busy.execution_id).pid
    assert busy_pid is not None

    assert engine.shutdown(wait_seconds=10) is True
    for execution_id in (busy.execution_id, queued.execution_id):
        report = engine.status(execution_id)
        assert report.status is ExecutionStatus.CANCELLED
        assert report.reason == REASON_SHUTDOWN
    assert not pid_exists(busy_pid)
    assert engine.child_pids() == frozenset()
    with pytest.raises(EngineClosed):
        engine.reserve()


def test_child_pids_lists_warm_and_busy_children(engine: Engine) -> None:
    watcher = RunningWatcher(engine)
    busy = submit(engine, "while (true) {}", timeout_seconds=60)
    watcher.wait_started(busy.execution_id)
    pid = engine.status(busy.execution_id).pid
    assert pid in engine.child_pids()
    engine.cancel(busy.execution_id)
    assert pid not in engine.child_pids()


def test_every_child_pid_is_announced_before_it_runs_work(
    make_engine: Callable[..., Engine],
) -> None:
    announced: list[int] = []
    engine = make_engine(on_child_spawned=announced.append)
    report = run(engine, "'x'")
    assert report.pid in announced


def test_submission_after_shutdown_is_refused_and_submits_nothing(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(warm_children=0)
    capability = engine.reserve().capability(request("'late'"), lambda: True)
    assert engine.shutdown(wait_seconds=10)
    with pytest.raises(EngineClosed):
        capability.submit()
    assert engine.stats().submitted_total == 0 and engine.stats().reserved == 0
