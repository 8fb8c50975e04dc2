"""Timeouts, the V8 heap limit and the OS memory backstop, against real children."""

from __future__ import annotations

import os
import signal
import time

import pytest

from appliance.engine import Engine, ExecutionRequest, ExecutionStatus, InvalidExecutionRequest
from appliance.engine.model import (
    CODE_BYTES_MAX,
    HEAP_MB_MAX,
    HEAP_MB_MIN,
    OUTPUT_GRACE_SECONDS,
    REASON_CHILD_DIED,
    REASON_OUT_OF_MEMORY,
    REASON_TIMEOUT,
    TIMEOUT_SECONDS_MAX,
)

from .conftest import SCHEDULED, RunningWatcher, pid_exists, request, run, submit

TIMEOUT_TOLERANCE_SECONDS = 0.5


def test_infinite_loop_times_out_near_the_limit(engine: Engine) -> None:
    watcher = RunningWatcher(engine)
    submitted = submit(engine, "console.log('spinning'); while (true) {}", timeout_seconds=1)
    watcher.wait_started(submitted.execution_id)
    started = time.monotonic()
    report = engine.wait(submitted.execution_id, 10)
    elapsed = time.monotonic() - started
    assert report.status is ExecutionStatus.TIMED_OUT
    assert report.reason == REASON_TIMEOUT
    assert 1.0 - 0.05 <= elapsed <= 1.0 + TIMEOUT_TOLERANCE_SECONDS
    assert report.output == "spinning\n"  # the child stopped V8 itself and kept the output
    assert report.pid is not None and not pid_exists(report.pid)


def test_script_finishing_inside_the_timeout_completes(engine: Engine) -> None:
    report = run(
        engine,
        "new Promise(r => setTimeout(() => r('in time'), 300))",
        timeout_seconds=1,
    )
    assert report.status is ExecutionStatus.COMPLETED
    assert report.result == "in time"


def test_never_settling_promise_times_out(engine: Engine) -> None:
    report = run(engine, "new Promise(() => {})", timeout_seconds=1)
    assert report.status is ExecutionStatus.TIMED_OUT


def test_stuck_microtask_is_terminated_at_the_timeout_and_its_child_reaped(
    engine: Engine,
) -> None:
    # A loop inside a promise reaction answers no call: the child terminates the isolate
    # itself (freeing it stops V8), and the child it had to itself is reaped before the report.
    watcher = RunningWatcher(engine)
    submitted = submit(
        engine, "Promise.resolve().then(() => { while (true) {} })", timeout_seconds=1
    )
    watcher.wait_started(submitted.execution_id)
    started = time.monotonic()
    report = engine.wait(submitted.execution_id, 10)
    elapsed = time.monotonic() - started
    assert report.status is ExecutionStatus.TIMED_OUT
    assert report.note is not None and "terminated" in report.note
    # Well before the parent's backstop (which would say "killed"), even on a loaded machine.
    assert 1.0 - 0.05 <= elapsed <= 1.0 + OUTPUT_GRACE_SECONDS + 1.0
    assert report.pid is not None and not pid_exists(report.pid)


def test_a_child_that_does_not_answer_is_killed_by_the_parent_backstop(engine: Engine) -> None:
    # A stopped child cannot enforce anything: the parent kills it at the backstop.
    watcher = RunningWatcher(engine)
    submitted = submit(engine, "new Promise(() => {})", timeout_seconds=0.5)
    watcher.wait_started(submitted.execution_id)
    pid = engine.status(submitted.execution_id).pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    report = engine.wait(submitted.execution_id, 30)
    assert report.status is ExecutionStatus.TIMED_OUT
    assert report.note is not None and "killed" in report.note
    assert not pid_exists(pid)


def test_memory_bomb_fails_with_out_of_memory(engine: Engine) -> None:
    report = run(
        engine,
        "console.log('allocating'); const keep = []; for (;;) keep.push(new Array(1e5).fill(0.5))",
        heap_mb=32,
    )
    assert report.status is ExecutionStatus.FAILED
    assert report.reason == REASON_OUT_OF_MEMORY
    assert report.error is not None and "32 MiB" in report.error
    assert report.output == "allocating\n"


def test_v8_out_of_memory_abort_of_the_child_is_failed_out_of_memory(engine: Engine) -> None:
    # One huge allocation inside a builtin escapes the heap-limit check and V8 aborts the
    # process; the parent reads the abort from the child's stderr.
    report = run(
        engine,
        "new Array(2 ** 25).fill(1.5).length",
        heap_mb=16,
        timeout_seconds=30,
        wait_seconds=60,
    )
    assert report.status is ExecutionStatus.FAILED
    assert report.reason == REASON_OUT_OF_MEMORY
    assert report.error is not None and "out of memory" in report.error.lower()


def test_allocation_outside_the_v8_heap_hits_the_os_data_limit(engine: Engine) -> None:
    # ArrayBuffer storage lives outside the V8 heap; RLIMIT_DATA makes it fail, not swap.
    report = run(engine, "const b = []; for (;;) b.push(new ArrayBuffer(1e8))", heap_mb=16)
    assert report.status is ExecutionStatus.FAILED
    assert report.error is not None and "Array buffer allocation failed" in report.error


@pytest.mark.parametrize(
    ("field", "value", "valid"),
    [
        ("heap_mb", HEAP_MB_MIN, True),
        ("heap_mb", HEAP_MB_MIN - 1, False),
        ("heap_mb", HEAP_MB_MAX, True),
        ("heap_mb", HEAP_MB_MAX + 1, False),
        ("heap_mb", 64.0, False),
        ("timeout_seconds", TIMEOUT_SECONDS_MAX, True),
        ("timeout_seconds", TIMEOUT_SECONDS_MAX + 1, False),
        ("timeout_seconds", 0, False),
        ("timeout_seconds", 0.001, True),
        ("code", "x" * CODE_BYTES_MAX, True),
        ("code", "x" * (CODE_BYTES_MAX + 1), False),
        ("execution_id", "", False),
        ("execution_id", "e" * 256, True),
        ("execution_id", "e" * 257, False),
    ],
)
def test_request_limits_at_the_boundary(field: str, value: object, valid: bool) -> None:
    fields = {
        "execution_id": "exec",
        "code": "1",
        "scheduled": SCHEDULED,
        "heap_mb": 64,
        "timeout_seconds": 1,
    }
    fields[field] = value
    checked = ExecutionRequest(**fields)  # type: ignore[arg-type]
    if valid:
        checked.validate()
    else:
        with pytest.raises(InvalidExecutionRequest):
            checked.validate()


def test_invalid_request_is_refused_before_binding_capacity(engine: Engine) -> None:
    reservation = engine.reserve()
    with pytest.raises(InvalidExecutionRequest):
        reservation.capability(request("1", heap_mb=1), lambda: True)
    reservation.release()
    assert engine.stats().reserved == 0


def test_other_v8_fatal_error_is_failed_child_died(engine: Engine) -> None:
    report = run(engine, "'x'.repeat(2 ** 28).split('').length", heap_mb=16)
    assert report.status is ExecutionStatus.FAILED
    assert report.reason == REASON_CHILD_DIED
    assert report.error is not None and "Fatal" in report.error


def test_child_killed_from_outside_is_failed_child_died_not_cancelled(engine: Engine) -> None:
    watcher = RunningWatcher(engine)
    submitted = submit(engine, "while (true) {}", timeout_seconds=60)
    watcher.wait_started(submitted.execution_id)
    pid = engine.status(submitted.execution_id).pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    report = engine.wait(submitted.execution_id, 10)
    assert report.status is ExecutionStatus.FAILED
    assert report.reason == REASON_CHILD_DIED
    assert report.error is not None and "SIGKILL" in report.error
    assert not pid_exists(pid)
