"""Shutdown semantics: admission, cooperative cancellation, repeatable observation, drop."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest

import appliance.local.scheduler as scheduler_module
from appliance.local import (
    THREAD_STACK_BYTES,
    ScheduledTask,
    Scheduler,
    SchedulerClosed,
    SchedulerConfig,
    SchedulerError,
    ShutdownIncomplete,
    TaskSchedule,
    TaskState,
)
from tests.local.conftest import START, WAIT_S

SHORT_S = 0.05


def once(name, callback, at=START):
    return ScheduledTask(name, TaskSchedule.once(at), callback)


def test_cooperative_callback_lets_shutdown_return_true(make_scheduler, clock):
    scheduler = make_scheduler(clock=clock)
    started = threading.Event()
    saw_cancel: list[bool] = []

    def cooperative(ctx):
        started.set()
        saw_cancel.append(ctx.wait_cancelled(WAIT_S))

    handle = scheduler.schedule(once("coop", cooperative))
    assert started.wait(WAIT_S)
    assert scheduler.shutdown_with_timeout(WAIT_S) is True
    assert saw_cancel == [True]
    assert scheduler.live_thread_count == 0
    assert handle.status() is TaskState.COMPLETED  # it returned normally after cancelling
    assert scheduler.shutdown_with_timeout(0) is True  # repeatable once finished


def test_uncooperative_callback_gives_false_until_it_returns(make_scheduler, clock):
    scheduler = make_scheduler(clock=clock)
    started, release = threading.Event(), threading.Event()
    scheduler.schedule(once("stubborn", lambda ctx: (started.set(), release.wait(WAIT_S))))
    assert started.wait(WAIT_S)
    assert scheduler.shutdown_with_timeout(SHORT_S) is False
    assert scheduler.shutdown_with_timeout(SHORT_S) is False  # still live: observe again
    assert scheduler.live_thread_count == 1  # only the stubborn worker; coordinator is gone
    release.set()
    assert scheduler.shutdown_with_timeout(WAIT_S) is True
    assert scheduler.live_thread_count == 0


def test_shutdown_raises_a_scheduler_error_on_incomplete_teardown(
    make_scheduler, clock, monkeypatch
):
    monkeypatch.setattr(scheduler_module, "SHUTDOWN_WAIT_SECONDS", SHORT_S)
    scheduler = make_scheduler(clock=clock)
    started, release = threading.Event(), threading.Event()
    scheduler.schedule(once("stubborn", lambda ctx: (started.set(), release.wait(WAIT_S))))
    assert started.wait(WAIT_S)
    with pytest.raises(ShutdownIncomplete, match="quarantine") as caught:
        scheduler.shutdown()
    assert isinstance(caught.value, SchedulerError)
    release.set()
    scheduler.shutdown()  # completes now, no error


def test_shutdown_default_budget_is_five_seconds():
    assert scheduler_module.SHUTDOWN_WAIT_SECONDS == 5.0


def test_admission_closes_with_shutdown(make_scheduler, clock):
    scheduler = make_scheduler(clock=clock)
    assert scheduler.shutdown_with_timeout(WAIT_S) is True
    with pytest.raises(SchedulerClosed):
        scheduler.schedule(once("late", lambda ctx: None))
    assert scheduler.snapshot().admission_open is False


def test_accepted_callbacks_are_drained_with_cancellation_set(make_scheduler, clock):
    scheduler = make_scheduler(SchedulerConfig(max_concurrent_tasks=1), clock=clock)
    started, release = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def record(ctx):
        seen[ctx.task_name] = ctx.is_cancelled()

    scheduler.schedule(once("first", lambda ctx: (started.set(), release.wait(WAIT_S))))
    assert started.wait(WAIT_S)
    queued = scheduler.schedule(once("queued", record))
    queued.wait_until(lambda s: s.state is TaskState.QUEUED, WAIT_S)
    future = scheduler.schedule(once("future", record, at=START + timedelta(hours=1)))
    assert scheduler.shutdown_with_timeout(SHORT_S) is False
    release.set()
    assert scheduler.shutdown_with_timeout(WAIT_S) is True
    assert seen == {"queued": True}  # accepted work drained, cancelled; future work never ran
    assert future.status() is TaskState.SCHEDULED


def test_garbage_collection_requests_shutdown_without_waiting(clock):
    started, release = threading.Event(), threading.Event()
    scheduler = Scheduler(clock=clock)
    threads = scheduler._core.threads()
    scheduler.schedule(once("stubborn", lambda ctx: (started.set(), release.wait(WAIT_S))))
    assert started.wait(WAIT_S)
    del scheduler
    gc.collect()
    coordinator, *workers = threads
    coordinator.join(WAIT_S)
    assert not coordinator.is_alive()  # shutdown was requested by the finalizer
    assert any(worker.is_alive() for worker in workers)  # detached, not waited for
    release.set()
    for worker in workers:
        worker.join(WAIT_S)
        assert not worker.is_alive()


def test_interpreter_exit_does_not_wait_for_a_stuck_callback():
    script = (
        "import threading\n"
        "from datetime import UTC, datetime\n"
        "from appliance.local import Scheduler, ScheduledTask, TaskSchedule\n"
        "started = threading.Event()\n"
        "s = Scheduler()\n"
        "s.schedule(ScheduledTask('stuck', TaskSchedule.once(datetime.now(UTC)),\n"
        "           lambda ctx: (started.set(), threading.Event().wait())))\n"
        "started.wait(10)\n"
        "print('started', flush=True)\n"
    )
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "started\n"
    assert time.monotonic() - began < 20


def test_threads_get_1_mib_stacks_and_the_process_setting_is_restored(clock, monkeypatch):
    real_stack_size = threading.stack_size
    before = real_stack_size()
    calls: list[int] = []

    def recording_stack_size(*args):
        if args:
            calls.append(args[0])
        return real_stack_size(*args)

    monkeypatch.setattr(threading, "stack_size", recording_stack_size)
    scheduler = Scheduler(SchedulerConfig(max_concurrent_tasks=3), clock=clock)
    try:
        assert calls == [THREAD_STACK_BYTES, before] * 4  # 3 workers + 1 coordinator
        assert THREAD_STACK_BYTES == 1024 * 1024
        assert real_stack_size() == before
    finally:
        assert scheduler.shutdown_with_timeout(WAIT_S)


def test_finalizer_never_blocks_even_when_the_core_lock_is_held(clock):
    scheduler = Scheduler(clock=clock)
    core = scheduler._core
    with core.lock:  # as if the collector ran on a thread inside the core
        core.request_shutdown_from_finalizer()
        assert core.shutdown_pending is True
    coordinator = core.threads()[0]
    coordinator.join(WAIT_S)  # the coordinator carries the pending request out
    assert not coordinator.is_alive()
    assert scheduler.snapshot().admission_open is False
    assert scheduler.shutdown_with_timeout(WAIT_S) is True
    with pytest.raises(SchedulerClosed):
        scheduler.schedule(once("late", lambda ctx: None))


def test_finalizer_requests_shutdown_when_the_lock_is_free(clock):
    scheduler = Scheduler(clock=clock)
    coordinator = scheduler._core.threads()[0]
    scheduler._finalizer()  # what garbage collection or interpreter exit calls
    coordinator.join(WAIT_S)
    assert not coordinator.is_alive()
    assert scheduler.snapshot().admission_open is False
    assert scheduler.shutdown_with_timeout(WAIT_S) is True
