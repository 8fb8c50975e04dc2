"""Reusable children, a fresh isolate per execution: isolation, replacement, retirement, limits."""

from __future__ import annotations

import os
import resource
from collections.abc import Callable

import pytest

from appliance.engine import (
    Engine,
    EngineStats,
    ExecutionReport,
    ExecutionStatus,
    InvalidEngineConfig,
)
from appliance.engine.engine import CHILD_EXECUTIONS_MAX_LIMIT
from appliance.engine.model import REASON_CANCELLED, REASON_OUT_OF_MEMORY, ScheduledInfo

from .conftest import SCHEDULED, RunningWatcher, pid_exists, run, submit
from .test_process import wait_gone


@pytest.fixture
def one_child(make_engine: Callable[..., Engine]) -> Engine:
    """One slot and one warm child: consecutive executions run in the same child if reused."""
    return make_engine(max_concurrent=1, max_queued=1, warm_children=1)


def wait_for_stats(engine: Engine, predicate: Callable[[EngineStats], bool]) -> None:
    """Block until the engine's stats satisfy predicate (woken by the engine's own condition)."""
    with engine._cond:
        assert engine._cond.wait_for(lambda: predicate(engine.stats()), timeout=10.0)


def in_one_child(engine: Engine, *codes: str, **kwargs: object) -> list[ExecutionReport]:
    reports = [run(engine, code, **kwargs) for code in codes]  # type: ignore[arg-type]
    assert len({r.pid for r in reports}) == 1, "the executions did not share one child"
    return reports


def test_consecutive_executions_share_one_child_without_spawning(one_child: Engine) -> None:
    first = run(one_child, "1")
    spawned = one_child.stats().children_spawned_total
    reports = [run(one_child, f"{n} + 1") for n in range(5)]
    assert [r.result for r in reports] == [1, 2, 3, 4, 5]
    assert {r.pid for r in reports} == {first.pid}
    assert one_child.stats().children_spawned_total == spawned


def test_a_global_of_one_execution_is_not_visible_to_the_next(one_child: Engine) -> None:
    _, second = in_one_child(
        one_child,
        "globalThis.leak = 'secret'; var declared = 1; 1",
        "[typeof leak, typeof declared]",
    )
    assert second.result == ["undefined", "undefined"]


def test_patched_prototypes_and_builtins_do_not_reach_the_next_execution(
    one_child: Engine,
) -> None:
    patch = """
        Array.prototype.push = function () { return 'patched'; };
        Object.prototype.polluted = 1;
        JSON.stringify = () => '"hijacked"';
        Math.random = () => 4;
        console.log = () => {};
        [].push(1)
    """
    check = """
        console.log('still logging');
        const a = []; a.push(1);
        [a.length, ({}).polluted === undefined, Math.random() < 1, JSON.stringify([1])]
    """
    first, second = in_one_child(one_child, patch, check)
    assert first.result == "patched"  # the patch really took effect in its own run
    assert second.result == [1, True, True, "[1]"]
    assert second.output == "still logging\n"


def test_each_execution_sees_its_own_frozen_scheduled_object(one_child: Engine) -> None:
    tamper = """
        try { scheduled.attempt = 99; } catch (e) {}
        try { Object.defineProperty(globalThis, 'scheduled', { value: 1 }); } catch (e) {}
        [Object.isFrozen(scheduled), scheduled.attempt]
    """
    other = ScheduledInfo("ns-other", "sched-2", None, "occ-43", 3, 8, "2026-11-29T03:00:00Z")
    first = run(one_child, tamper)
    second = run(
        one_child,
        "[scheduled.namespace, scheduled.attempt, scheduled.occurrence_id]",
        scheduled=other,
    )
    assert first.pid == second.pid
    assert first.result == [True, SCHEDULED.attempt]
    assert second.result == ["ns-other", 3, "occ-43"]


def test_a_pending_timer_of_a_finished_script_never_runs(one_child: Engine) -> None:
    leave_timer = """
        setTimeout(() => { globalThis.late = 'from the first script'; console.log('late'); }, 20);
        setInterval(() => { globalThis.ticks = (globalThis.ticks || 0) + 1; }, 1);
        'left timers behind'
    """
    # The second script waits well past the first one's timers before it looks.
    look = """
        new Promise(resolve => setTimeout(
            () => resolve([typeof late, typeof ticks]), 100))
    """
    first, second = in_one_child(one_child, leave_timer, look)
    assert first.result == "left timers behind"
    assert second.result == ["undefined", "undefined"]
    assert second.output == ""


def test_a_timer_spinning_forever_after_its_script_ended_is_stopped_with_its_isolate(
    one_child: Engine,
) -> None:
    # Disposal terminates the endless callback; the same child then runs the next script.
    first, second = in_one_child(
        one_child, "setTimeout(() => { for (;;) {} }, 0); 'done'", "'next'", timeout_seconds=5.0
    )
    assert (first.result, second.result) == ("done", "next")


def test_a_script_exception_keeps_the_child(one_child: Engine) -> None:
    first, second = in_one_child(one_child, "throw new Error('boom')", "2")
    assert first.status is ExecutionStatus.FAILED
    assert second.result == 2


@pytest.mark.parametrize(
    ("code", "kwargs", "status"),
    [
        ("for (;;) {}", {"timeout_seconds": 0.3}, ExecutionStatus.TIMED_OUT),
        ("const a = []; for (;;) a.push({x: a.length})", {"heap_mb": 16}, ExecutionStatus.FAILED),
    ],
    ids=["timeout", "out_of_memory"],
)
def test_a_child_is_killed_and_reaped_before_a_timeout_or_out_of_memory_is_reported(
    one_child: Engine, code: str, kwargs: dict[str, float], status: ExecutionStatus
) -> None:
    warm = run(one_child, "1")
    report = run(one_child, code, **kwargs)  # type: ignore[arg-type]
    assert report.status is status
    assert report.pid == warm.pid  # it ran in the reused child ...
    assert not pid_exists(report.pid)  # ... which was reaped before the report
    if status is ExecutionStatus.FAILED:
        assert report.reason == REASON_OUT_OF_MEMORY
    after = run(one_child, "3")
    assert after.result == 3 and after.pid != warm.pid


def test_cancel_in_a_reused_child_reports_cancelled_only_after_the_reap(
    one_child: Engine,
) -> None:
    warm = run(one_child, "1")
    watcher = RunningWatcher(one_child)
    seen: list[tuple[ExecutionStatus, bool]] = []

    def on_report(report: ExecutionReport) -> None:
        if report.status is ExecutionStatus.CANCELLED:
            seen.append((report.status, pid_exists(report.pid or 0)))

    one_child.add_listener(on_report)
    spinning = submit(one_child, "for (;;) {}", timeout_seconds=30)
    watcher.wait_started(spinning.execution_id)
    report = one_child.cancel(spinning.execution_id, wait_seconds=10)
    assert report.status is ExecutionStatus.CANCELLED and report.reason == REASON_CANCELLED
    assert report.pid == warm.pid
    assert seen == [(ExecutionStatus.CANCELLED, False)]  # the child was gone when reported
    assert run(one_child, "4").pid != warm.pid


def test_a_child_is_retired_after_child_executions_max_executions(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(max_concurrent=1, max_queued=0, warm_children=1, child_executions_max=2)
    reports = [run(engine, str(n)) for n in range(5)]
    pids = [r.pid for r in reports]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
    assert wait_gone(pids[0], 10.0) and wait_gone(pids[2], 10.0)


def test_child_executions_max_one_is_a_fresh_child_per_execution(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(max_concurrent=1, max_queued=0, warm_children=1, child_executions_max=1)
    pids = [run(engine, "globalThis.x = 1; 1").pid for _ in range(3)]
    assert len(set(pids)) == 3
    assert not pid_exists(pids[0])  # reaped before its report, as single-use children were


def test_a_child_whose_memory_grew_past_the_limit_is_retired(
    make_engine: Callable[..., Engine],
) -> None:
    # With no room for growth at all, the first sign of growth retires the child; an
    # execution that grows the heap by tens of MiB shows it.
    engine = make_engine(
        max_concurrent=1, max_queued=0, warm_children=1, child_rss_growth_bytes_max=0
    )
    first = run(engine, "const a = new Array(4e6).fill(1.5); a.length", heap_mb=256)
    assert first.result == 4e6
    assert wait_gone(first.pid or 0, 10.0)
    assert run(engine, "1").pid != first.pid


def test_a_child_not_back_ready_within_the_recycle_timeout_is_replaced(
    make_engine: Callable[..., Engine],
) -> None:
    # A fresh isolate takes milliseconds to build: a microsecond is never enough.
    engine = make_engine(
        max_concurrent=1, max_queued=0, warm_children=1, child_recycle_timeout_seconds=1e-6
    )
    first = run(engine, "1")
    assert wait_gone(first.pid or 0, 10.0)
    second = run(engine, "2")
    assert second.result == 2 and second.pid != first.pid


def test_limits_of_one_binding_do_not_constrain_the_next_in_the_same_child(
    one_child: Engine,
) -> None:
    small = run(
        one_child, "try { new ArrayBuffer(6e8); 'allocated' } catch (e) { e.name }", heap_mb=16
    )
    # 600 MB outside the V8 heap is over the soft RLIMIT_DATA of a 16 MiB binding...
    assert small.result == "RangeError"
    big = run(one_child, "new ArrayBuffer(6e8).byteLength", heap_mb=512)
    # ... and within that of a 512 MiB one, in the very same child: the limit is soft.
    assert big.pid == small.pid and big.result == 6e8
    # The report comes after the child disposed of the isolate and gave back its slot and room.
    soft, hard = child_data_limit(big.pid or 0)
    assert (soft, hard) == resource.getrlimit(resource.RLIMIT_DATA)  # restored between runs


def child_data_limit(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits", encoding="ascii") as limits:
        for line in limits:
            if line.startswith("Max data size"):
                soft, hard = line.split()[3:5]
                return tuple(  # type: ignore[return-value]
                    resource.RLIM_INFINITY if v == "unlimited" else int(v) for v in (soft, hard)
                )
    raise AssertionError("no data size limit in /proc/pid/limits")


def test_an_idle_child_beyond_warm_children_is_retired(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(max_concurrent=2, max_queued=0, warm_children=0, child_idle_seconds=0.2)
    report = run(engine, "1")  # started on demand, then idle with no warm child wanted
    assert wait_gone(report.pid or 0, 10.0)
    wait_for_stats(engine, lambda stats: stats.live_children == 0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("child_executions_max", 0),
        ("child_executions_max", CHILD_EXECUTIONS_MAX_LIMIT + 1),
        ("child_rss_growth_bytes_max", -1),
        ("child_recycle_timeout_seconds", 0),
        ("child_idle_seconds", -1.0),
    ],
)
def test_reuse_limits_out_of_bounds_are_refused(name: str, value: float) -> None:
    with pytest.raises(InvalidEngineConfig, match=name):
        Engine(warm_children=0, **{name: value})  # type: ignore[arg-type]


def test_reuse_limits_at_their_bounds_are_accepted() -> None:
    engine = Engine(
        warm_children=0,
        child_executions_max=CHILD_EXECUTIONS_MAX_LIMIT,
        child_rss_growth_bytes_max=0,
    )
    assert engine.shutdown(5.0)
    assert os.getpid()  # the engine started nothing to leave behind (checked by the fixture)
