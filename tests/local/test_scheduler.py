"""Scheduler behaviour: the pool bound, saturation, retries, cancellation and checked time."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from appliance.core.errors import InvalidSchedule
from appliance.local import (
    RetryPolicy,
    RunOutcome,
    ScheduledTask,
    Scheduler,
    SchedulerConfig,
    TaskCancelled,
    TaskLimitExceeded,
    TaskLimits,
    TaskSchedule,
    TaskState,
)
from tests.local.conftest import START, WAIT_S

DATETIME_MAX = datetime.max.replace(tzinfo=UTC)


def once(name, callback, at=START, **kwargs):
    return ScheduledTask(name, TaskSchedule.once(at), callback, **kwargs)


def finished(snapshot):
    return snapshot.state.is_terminal


def test_pool_never_runs_more_callbacks_than_max_concurrent_tasks(make_scheduler, clock):
    workers = 3
    scheduler = make_scheduler(SchedulerConfig(max_concurrent_tasks=workers), clock=clock)
    lock = threading.Lock()
    barrier = threading.Barrier(workers, timeout=WAIT_S)
    active = 0
    peak = 0
    callback_threads: set[int] = set()

    def callback(ctx):
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
            callback_threads.add(threading.get_ident())
        if ctx.task_id <= workers:
            barrier.wait()  # proves `workers` callbacks really run at the same time
        with lock:
            active -= 1

    handles = [scheduler.schedule(once(f"t{i}", callback)) for i in range(24)]
    for handle in handles:
        assert handle.wait_until(finished, WAIT_S).state is TaskState.COMPLETED
    assert peak == workers
    assert len(callback_threads) <= workers
    assert len(scheduler._core.pool.threads) == workers
    assert scheduler.live_thread_count == workers + 1  # plus the coordinator


def test_excess_due_work_stays_scheduled_and_is_counted_as_saturation(make_scheduler, clock):
    scheduler = make_scheduler(SchedulerConfig(max_concurrent_tasks=1, max_tasks=16), clock=clock)
    gate = threading.Event()
    ran: list[str] = []
    blocker = scheduler.schedule(once("blocker", lambda ctx: gate.wait(WAIT_S)))
    blocker.wait_until(lambda s: s.state is TaskState.RUNNING, WAIT_S)

    later = START + timedelta(seconds=1)
    handles = [
        scheduler.schedule(once(f"t{i}", lambda ctx: ran.append(ctx.task_name), at=later))
        for i in range(5)
    ]
    clock.advance(timedelta(seconds=1))
    handles[1].wait_until(lambda s: s.state is TaskState.QUEUED, WAIT_S)
    assert scheduler.queued_task_count == 2  # min(2 x 1 worker, 16)
    assert scheduler.queue_saturation_count >= 1
    assert [h.status() for h in handles[2:]] == [TaskState.SCHEDULED] * 3

    gate.set()
    for handle in handles:
        snapshot = handle.wait_until(finished, WAIT_S)
        assert snapshot.state is TaskState.COMPLETED
        assert snapshot.last_result.attempt == 1  # deferral did not consume an attempt
    assert sorted(ran) == [f"t{i}" for i in range(5)]
    assert scheduler.queued_task_count == 0


def test_deferred_work_does_not_consume_a_retry(make_scheduler, clock):
    scheduler = make_scheduler(SchedulerConfig(max_concurrent_tasks=1, max_tasks=8), clock=clock)
    gate = threading.Event()
    scheduler.schedule(once("blocker", lambda ctx: gate.wait(WAIT_S)))
    attempts: list[int] = []

    def fail_first_attempt(ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    task = once("flaky", fail_first_attempt, retry=RetryPolicy(max_retries=1))
    handles = [scheduler.schedule(once(f"fill{i}", lambda ctx: None)) for i in range(3)]
    handle = scheduler.schedule(task)
    gate.set()
    snapshot = handle.wait_until(finished, WAIT_S)
    assert attempts == [1, 2]
    assert snapshot.state is TaskState.COMPLETED
    assert all(h.wait_until(finished, WAIT_S).state is TaskState.COMPLETED for h in handles)


def test_higher_priority_runs_first_then_earlier_deadline_then_registration(make_scheduler, clock):
    scheduler = make_scheduler(SchedulerConfig(max_concurrent_tasks=1, max_tasks=8), clock=clock)
    order: list[str] = []
    gate = threading.Event()
    blocker = scheduler.schedule(once("blocker", lambda ctx: gate.wait(WAIT_S)))
    blocker.wait_until(lambda s: s.state is TaskState.RUNNING, WAIT_S)
    due = START + timedelta(seconds=5)
    record = lambda ctx: order.append(ctx.task_name)  # noqa: E731
    scheduler.schedule(once("low-late", record, at=due, priority=0))
    scheduler.schedule(once("low-early", record, at=due - timedelta(seconds=1), priority=0))
    scheduler.schedule(once("high", record, at=due, priority=5))
    last = scheduler.schedule(once("low-late-2", record, at=due, priority=0))
    clock.advance(timedelta(seconds=5))
    gate.set()
    last.wait_until(finished, WAIT_S)
    assert order == ["high", "low-early", "low-late", "low-late-2"]


def test_failed_attempts_retry_after_the_delay_then_fail(make_scheduler, clock):
    scheduler = make_scheduler(clock=clock)
    attempts: list[int] = []

    def always_fails(ctx):
        attempts.append(ctx.attempt)
        raise ValueError("boom")

    retry = RetryPolicy(max_retries=2, delay=timedelta(seconds=10))
    handle = scheduler.schedule(once("fails", always_fails, retry=retry))
    snapshot = handle.wait_until(lambda s: s.state is TaskState.RETRY_WAITING, WAIT_S)
    assert snapshot.next_due == START + timedelta(seconds=10)
    assert snapshot.attempt == 2
    clock.advance(timedelta(seconds=10))
    handle.wait_until(lambda s: s.attempt == 3, WAIT_S)
    clock.advance(timedelta(seconds=10))
    snapshot = handle.wait_until(finished, WAIT_S)
    assert attempts == [1, 2, 3]
    assert snapshot.state is TaskState.FAILED
    assert snapshot.last_result.outcome is RunOutcome.FAILED
    assert snapshot.last_result.error == "ValueError: boom"


def test_interval_keeps_its_cadence_and_coalesces_missed_slots(make_scheduler, clock):
    scheduler = make_scheduler(clock=clock)
    dues: list[datetime] = []
    every = TaskSchedule.every(timedelta(seconds=10), start_at=START + timedelta(seconds=10))
    handle = scheduler.schedule(ScheduledTask("tick", every, lambda ctx: dues.append(ctx.due)))
    assert handle.snapshot().next_due == START + timedelta(seconds=10)
    clock.advance(timedelta(seconds=10))
    handle.wait_until(lambda s: s.runs_completed == 1, WAIT_S)
    clock.advance(timedelta(seconds=35))  # now START+45: slots 20, 30 and 40 are due
    snapshot = handle.wait_until(lambda s: s.runs_completed == 2, WAIT_S)
    assert dues == [START + timedelta(seconds=10), START + timedelta(seconds=20)]
    assert snapshot.next_due == START + timedelta(seconds=50)


def test_max_runs_limits_a_recurring_task(make_scheduler, clock):
    scheduler = make_scheduler(clock=clock)
    every = TaskSchedule.every(timedelta(seconds=1), start_at=START)
    handle = scheduler.schedule(
        ScheduledTask("twice", every, lambda ctx: None, limits=TaskLimits(max_runs=2))
    )
    handle.wait_until(lambda s: s.runs_completed == 1, WAIT_S)
    clock.advance(timedelta(seconds=1))
    snapshot = handle.wait_until(finished, WAIT_S)
    assert (snapshot.state, snapshot.runs_completed) == (TaskState.COMPLETED, 2)


def test_registered_tasks_are_limited_to_max_tasks(make_scheduler, clock):
    scheduler = make_scheduler(SchedulerConfig(max_tasks=2), clock=clock)
    later = START + timedelta(hours=1)
    first = scheduler.schedule(once("a", print, at=later))
    scheduler.schedule(once("b", print, at=later))
    with pytest.raises(TaskLimitExceeded):
        scheduler.schedule(once("c", print, at=later))
    assert first.cancel() is True
    assert scheduler.schedule(once("c", print, at=later)).status() is TaskState.SCHEDULED


def test_cancel_before_due_means_it_never_runs(make_scheduler, clock):
    scheduler = make_scheduler(clock=clock)
    ran = threading.Event()
    handle = scheduler.schedule(once("x", lambda ctx: ran.set(), at=START + timedelta(seconds=1)))
    assert handle.cancel() is True
    assert handle.cancel() is False  # already finished
    clock.advance(timedelta(seconds=1))
    probe = scheduler.schedule(once("probe", lambda ctx: None))
    probe.wait_until(finished, WAIT_S)
    assert not ran.is_set()
    assert handle.status() is TaskState.CANCELLED


def test_cancel_while_running_sets_the_context_cancellation(make_scheduler, clock):
    scheduler = make_scheduler(clock=clock)
    started = threading.Event()

    def cooperative(ctx):
        started.set()
        if ctx.wait_cancelled(WAIT_S):
            raise TaskCancelled()

    handle = scheduler.schedule(once("long", cooperative))
    started.wait(WAIT_S)
    assert handle.cancel() is True
    snapshot = handle.wait_until(finished, WAIT_S)
    assert snapshot.state is TaskState.CANCELLED
    assert snapshot.last_result.outcome is RunOutcome.CANCELLED


# ---- checked clock arithmetic near datetime.max ----


def test_first_deadline_exactly_at_datetime_max_is_accepted(make_scheduler, clock):
    clock.set(DATETIME_MAX - timedelta(hours=1))
    scheduler = make_scheduler(clock=clock)
    handle = scheduler.schedule(
        ScheduledTask("edge", TaskSchedule.every(timedelta(hours=1)), lambda ctx: None)
    )
    assert handle.snapshot().next_due == DATETIME_MAX


def test_first_deadline_past_datetime_max_raises_invalid_schedule(make_scheduler, clock):
    clock.set(DATETIME_MAX - timedelta(hours=1) + timedelta(microseconds=1))
    scheduler = make_scheduler(clock=clock)
    with pytest.raises(InvalidSchedule, match="last representable instant"):
        scheduler.schedule(
            ScheduledTask("over", TaskSchedule.every(timedelta(hours=1)), lambda ctx: None)
        )


def test_unrepresentable_next_run_fails_the_task_not_the_coordinator(make_scheduler, clock):
    clock.set(DATETIME_MAX - timedelta(minutes=30))
    scheduler = make_scheduler(clock=clock)
    every = TaskSchedule.every(timedelta(hours=1), start_at=clock.now())
    handle = scheduler.schedule(ScheduledTask("overflowing", every, lambda ctx: None))
    snapshot = handle.wait_until(finished, WAIT_S)
    assert snapshot.state is TaskState.FAILED
    assert snapshot.runs_completed == 1
    assert "InvalidSchedule" in snapshot.error
    probe = scheduler.schedule(once("still-alive", lambda ctx: None, at=clock.now()))
    assert probe.wait_until(finished, WAIT_S).state is TaskState.COMPLETED


def test_unrepresentable_retry_deadline_fails_the_task(make_scheduler, clock):
    clock.set(DATETIME_MAX - timedelta(hours=1))
    scheduler = make_scheduler(clock=clock)

    def fails(ctx):
        raise RuntimeError("fails")

    retry = RetryPolicy(max_retries=3, delay=timedelta(days=1))
    handle = scheduler.schedule(once("retry-overflow", fails, at=clock.now(), retry=retry))
    snapshot = handle.wait_until(finished, WAIT_S)
    assert snapshot.state is TaskState.FAILED
    assert "retry.delay" in snapshot.error
    probe = scheduler.schedule(once("still-alive", lambda ctx: None, at=clock.now()))
    assert probe.wait_until(finished, WAIT_S).state is TaskState.COMPLETED


def test_one_shot_at_datetime_max_runs_when_the_clock_gets_there(make_scheduler, clock):
    scheduler = make_scheduler(clock=clock)
    handle = scheduler.schedule(once("last", lambda ctx: None, at=DATETIME_MAX))
    clock.set(DATETIME_MAX)
    assert handle.wait_until(finished, WAIT_S).state is TaskState.COMPLETED


def test_at_the_configured_maximum_65536_due_tasks_retain_at_most_128_candidates(clock):
    config = SchedulerConfig(max_concurrent_tasks=64, max_tasks=65_536)
    scheduler = Scheduler(config, clock=clock)
    lock = threading.Lock()
    done = threading.Event()
    ran = 0
    queued_peak = 0

    def callback(ctx):
        nonlocal ran, queued_peak
        with lock:
            ran += 1
            queued_peak = max(queued_peak, scheduler._core.queued)
            if ran == 65_536:
                done.set()

    try:
        due = TaskSchedule.once(START + timedelta(seconds=1))
        for i in range(65_536):
            scheduler.schedule(ScheduledTask(f"t{i}", due, callback))
        with pytest.raises(TaskLimitExceeded):
            scheduler.schedule(ScheduledTask("one-too-many", due, callback))
        clock.advance(timedelta(seconds=1))
        assert done.wait(60)
        assert ran == 65_536
        assert scheduler._core.index.stats.retained_peak == 128
        assert queued_peak <= 128
        assert scheduler.queue_saturation_count > 0
    finally:
        assert scheduler.shutdown_with_timeout(WAIT_S)
