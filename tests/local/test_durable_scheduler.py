"""Durable tasks: claims, receipts, fencing epochs, misfire policies and at-least-once recovery."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from appliance.local import (
    DurabilityNotConfigured,
    DurableSchedulerConfigV1,
    FileStateProvider,
    MemoryStateProvider,
    MisfirePolicy,
    ScheduledTask,
    Scheduler,
    SchedulerError,
    StateProviderError,
    TaskCancelled,
    TaskSchedule,
    TaskState,
)
from tests.local.conftest import START, WAIT_S

MINUTE = timedelta(minutes=1)
TTL_MS = 3_000


class RecordingProvider(MemoryStateProvider):
    def __init__(self):
        super().__init__()
        self.renewed = threading.Event()

    def renew(self, claim, now, ttl):
        fresh = super().renew(claim, now, ttl)
        self.renewed.set()
        return fresh


@pytest.fixture
def durable(clock):
    created: list[Scheduler] = []

    def make(provider, owner="node-a"):
        config = DurableSchedulerConfigV1(owner, claim_ttl_ms=TTL_MS)
        scheduler = Scheduler.with_state_provider(provider, config, clock=clock)
        created.append(scheduler)
        return scheduler

    yield make
    for scheduler in created:
        scheduler.shutdown_with_timeout(WAIT_S)


def every_minute(callback, misfire=MisfirePolicy.FIRE_ONCE):
    schedule = TaskSchedule.every(MINUTE, start_at=START + MINUTE)
    return ScheduledTask("minutely", schedule, callback, misfire=misfire)


def test_process_local_scheduler_refuses_durable_tasks(make_scheduler, clock):
    scheduler = make_scheduler(clock=clock)
    assert scheduler.fencing_epoch is None
    with pytest.raises(DurabilityNotConfigured):
        scheduler.schedule_durable("job", every_minute(lambda ctx: None))


def test_durable_run_exposes_the_epoch_and_commits_a_receipt(durable, clock):
    provider = MemoryStateProvider()
    scheduler = durable(provider)
    epochs: list[int | None] = []
    handle = scheduler.schedule_durable(
        "job", every_minute(lambda ctx: epochs.append(ctx.fencing_epoch))
    )
    assert handle.snapshot().durable_key == "job"
    clock.advance(MINUTE)
    handle.wait_until(lambda s: s.runs_completed == 1, WAIT_S)
    assert epochs == [scheduler.fencing_epoch]
    record = provider.load("job")
    assert record.next_run == START + 2 * MINUTE
    assert record.claim is None
    assert [(r.due, r.outcome, r.epoch) for r in record.receipts] == [
        (START + MINUTE, "succeeded", scheduler.fencing_epoch)
    ]


def test_local_tasks_have_no_fencing_epoch(durable, clock):
    scheduler = durable(MemoryStateProvider())
    seen = []
    task = ScheduledTask(
        "local", TaskSchedule.once(START), lambda ctx: seen.append(ctx.fencing_epoch)
    )
    scheduler.schedule(task).wait_finished(WAIT_S)
    assert seen == [None]


def test_duplicate_durable_key_is_refused(durable):
    scheduler = durable(MemoryStateProvider())
    scheduler.schedule_durable("job", every_minute(lambda ctx: None))
    with pytest.raises(SchedulerError, match="already scheduled"):
        scheduler.schedule_durable("job", every_minute(lambda ctx: None))


def test_restart_resumes_from_the_stored_next_run_with_a_newer_epoch(durable, clock):
    provider = MemoryStateProvider()
    first = durable(provider)
    handle = first.schedule_durable("job", every_minute(lambda ctx: None))
    clock.advance(MINUTE)
    handle.wait_until(lambda s: s.runs_completed == 1, WAIT_S)
    assert first.shutdown_with_timeout(WAIT_S)
    second = durable(provider)
    assert second.fencing_epoch > first.fencing_epoch
    resumed = second.schedule_durable("job", every_minute(lambda ctx: None))
    snapshot = resumed.snapshot()
    assert (snapshot.next_due, snapshot.runs_completed) == (START + 2 * MINUTE, 1)


def test_fire_once_misfire_runs_once_then_returns_to_the_grid(durable, clock):
    provider = MemoryStateProvider()
    durable(provider).schedule_durable("job", every_minute(lambda ctx: None)).cancel()
    clock.advance(10 * MINUTE + timedelta(seconds=30))  # nine slots missed while down
    dues = []
    handle = durable(provider).schedule_durable("job", every_minute(lambda c: dues.append(c.due)))
    snapshot = handle.wait_until(lambda s: s.runs_completed == 1, WAIT_S)
    assert dues == [START + MINUTE]
    assert snapshot.next_due == START + 11 * MINUTE


def test_skip_misfire_drops_missed_slots(durable, clock):
    provider = MemoryStateProvider()
    durable(provider).schedule_durable("job", every_minute(lambda ctx: None)).cancel()
    clock.advance(10 * MINUTE + timedelta(seconds=30))
    ran = []
    task = every_minute(lambda ctx: ran.append(ctx.due), misfire=MisfirePolicy.SKIP)
    handle = durable(provider).schedule_durable("job", task)
    assert handle.snapshot().next_due == START + 11 * MINUTE
    assert provider.load("job").next_run == START + 11 * MINUTE
    assert ran == []


def test_recovery_is_at_least_once_and_the_old_owner_is_fenced(durable, clock):
    provider = MemoryStateProvider()
    old = durable(provider)
    started, release = threading.Event(), threading.Event()
    old_handle = old.schedule_durable(
        "job", every_minute(lambda ctx: (started.set(), release.wait(WAIT_S)))
    )
    clock.advance(MINUTE)
    assert started.wait(WAIT_S)  # the slot is claimed and running; no receipt yet
    assert provider.load("job").claim.epoch == old.fencing_epoch

    # The process is presumed dead (it hangs): a restarted owner runs the same slot again.
    new = durable(provider)
    runs = []
    new_handle = new.schedule_durable(
        "job", every_minute(lambda ctx: runs.append((ctx.due, ctx.attempt, ctx.fencing_epoch)))
    )
    new_handle.wait_until(lambda s: s.runs_completed == 1, WAIT_S)
    assert runs == [(START + MINUTE, 1, new.fencing_epoch)]

    release.set()  # the old callback finishes late: its receipt is refused
    snapshot = old_handle.wait_finished(WAIT_S)
    assert snapshot.state is TaskState.FENCED
    assert "receipt refused" in snapshot.error
    record = provider.load("job")
    assert [r.epoch for r in record.receipts] == [new.fencing_epoch]


def test_running_claims_are_renewed(durable, clock):
    provider = RecordingProvider()
    scheduler = durable(provider)
    started, release = threading.Event(), threading.Event()
    handle = scheduler.schedule_durable(
        "job", every_minute(lambda ctx: (started.set(), release.wait(WAIT_S)))
    )
    clock.advance(MINUTE)
    assert started.wait(WAIT_S)
    handle.wait_until(lambda s: s.state is TaskState.RUNNING, WAIT_S)
    expiry_before = provider.load("job").claim.expires_at
    clock.advance(timedelta(milliseconds=TTL_MS // 3))
    assert provider.renewed.wait(WAIT_S)
    assert provider.load("job").claim.expires_at > expiry_before
    release.set()
    handle.wait_until(lambda s: s.runs_completed == 1, WAIT_S)


def test_losing_the_claim_cancels_the_callback(durable, clock):
    provider = MemoryStateProvider()
    scheduler = durable(provider)
    started = threading.Event()
    cancelled = []
    handle = scheduler.schedule_durable(
        "job",
        every_minute(lambda ctx: (started.set(), cancelled.append(ctx.wait_cancelled(WAIT_S)))),
    )
    clock.advance(MINUTE)
    assert started.wait(WAIT_S)
    claim = provider.load("job").claim
    thief_epoch = provider.acquire_epoch()
    provider.claim(
        "job", "node-b", thief_epoch, claim.due, 1, claim.expires_at, timedelta(minutes=5)
    )
    clock.advance(timedelta(milliseconds=TTL_MS // 3))
    snapshot = handle.wait_finished(WAIT_S)
    assert cancelled == [True]
    assert snapshot.state is TaskState.FENCED


def test_file_provider_carries_state_across_reopen(durable, clock, tmp_path):
    path = tmp_path / "state.snapshot"
    provider = FileStateProvider(path)
    first = durable(provider)
    handle = first.schedule_durable("job", every_minute(lambda ctx: None))
    clock.advance(MINUTE)
    handle.wait_until(lambda s: s.runs_completed == 1, WAIT_S)
    assert first.shutdown_with_timeout(WAIT_S)
    provider.close()
    with FileStateProvider(path) as reopened:
        second = durable(reopened)
        assert second.fencing_epoch == first.fencing_epoch + 1
        snapshot = second.schedule_durable("job", every_minute(lambda ctx: None)).snapshot()
        assert snapshot.next_due == START + 2 * MINUTE
        assert second.shutdown_with_timeout(WAIT_S)


def test_a_slot_claimed_by_another_owner_waits_for_the_claim_to_lapse(durable, clock):
    provider = MemoryStateProvider()
    other_epoch = provider.acquire_epoch()  # node-b started earlier: an older epoch
    scheduler = durable(provider)
    ran = []
    handle = scheduler.schedule_durable("job", every_minute(lambda ctx: ran.append(ctx.due)))
    other_claim = provider.claim(
        "job", "node-b", other_epoch, START + MINUTE, 1, START, timedelta(minutes=5)
    )
    clock.advance(MINUTE)
    snapshot = handle.wait_until(lambda s: s.next_due == other_claim.expires_at, WAIT_S)
    assert snapshot.state is TaskState.SCHEDULED and ran == []
    clock.set(other_claim.expires_at)  # node-b never committed: its claim lapses
    handle.wait_until(lambda s: s.runs_completed == 1, WAIT_S)
    assert ran == [START + MINUTE]
    assert provider.load("job").receipts[-1].epoch == scheduler.fencing_epoch


def test_a_changed_definition_restarts_the_schedule_from_now(durable, clock):
    provider = MemoryStateProvider()
    durable(provider).schedule_durable("job", every_minute(lambda ctx: None)).cancel()
    hourly = ScheduledTask("job", TaskSchedule.every(timedelta(hours=1)), lambda ctx: None)
    snapshot = durable(provider).schedule_durable("job", hourly).snapshot()
    assert snapshot.next_due == START + timedelta(hours=1)
    assert provider.load("job").definition == "every:3600000000us"


def test_a_run_cancelled_by_shutdown_stays_due_for_recovery(durable, clock):
    provider = MemoryStateProvider()
    scheduler = durable(provider)
    started = threading.Event()

    def stops_when_cancelled(ctx):
        started.set()
        if ctx.wait_cancelled(WAIT_S):
            raise TaskCancelled()

    scheduler.schedule_durable("job", every_minute(stops_when_cancelled))
    clock.advance(MINUTE)
    assert started.wait(WAIT_S)
    assert scheduler.shutdown_with_timeout(WAIT_S) is True
    record = provider.load("job")
    assert (record.next_run, record.attempt, record.claim) == (START + MINUTE, 1, None)
    assert record.receipts[-1].outcome == "cancelled"


def test_a_run_that_completes_during_shutdown_advances_the_record(durable, clock):
    provider = MemoryStateProvider()
    scheduler = durable(provider)
    started = threading.Event()
    handle = scheduler.schedule_durable(
        "job", every_minute(lambda ctx: (started.set(), ctx.wait_cancelled(WAIT_S)))
    )
    clock.advance(MINUTE)
    assert started.wait(WAIT_S)
    assert scheduler.shutdown_with_timeout(WAIT_S) is True
    assert handle.status() is TaskState.CANCELLED  # no further local runs
    record = provider.load("job")
    assert (record.next_run, record.runs_completed) == (START + 2 * MINUTE, 1)
    assert record.receipts[-1].outcome == "succeeded"


class BrokenProvider(MemoryStateProvider):
    def __init__(self, error: Exception):
        super().__init__()
        self.error = error

    def claim(self, *args, **kwargs):
        raise self.error


@pytest.mark.parametrize(
    ("error", "state"),
    [(StateProviderError("disk full"), TaskState.FENCED), (RuntimeError("bug"), TaskState.FAILED)],
)
def test_provider_failures_end_the_task_but_never_shrink_the_pool(durable, clock, error, state):
    scheduler = durable(BrokenProvider(error))
    handle = scheduler.schedule_durable("job", every_minute(lambda ctx: None))
    clock.advance(MINUTE)
    snapshot = handle.wait_finished(WAIT_S)
    assert snapshot.state is state
    assert str(error) in snapshot.error
    probe = scheduler.schedule(ScheduledTask("probe", TaskSchedule.once(START), lambda ctx: None))
    assert probe.wait_finished(WAIT_S).state is TaskState.COMPLETED
    assert scheduler.live_thread_count == 1 + 4  # coordinator + the default 4 workers
