"""Configuration limits, tested at their boundaries."""

from __future__ import annotations

from datetime import timedelta

import pytest

from appliance.local import (
    MAX_SCHEDULER_TASKS,
    MAX_SCHEDULER_WORKERS,
    DurableSchedulerConfigV1,
    InvalidSchedulerConfig,
    RetryPolicy,
    ScheduledTask,
    SchedulerConfig,
    TaskLimits,
    TaskSchedule,
)
from tests.local.conftest import START


def test_worker_limit_is_64_inclusive():
    assert MAX_SCHEDULER_WORKERS == 64
    assert SchedulerConfig(max_concurrent_tasks=64).max_concurrent_tasks == 64
    with pytest.raises(InvalidSchedulerConfig, match="max_concurrent_tasks"):
        SchedulerConfig(max_concurrent_tasks=65)
    with pytest.raises(InvalidSchedulerConfig):
        SchedulerConfig(max_concurrent_tasks=0)


def test_task_limit_is_65536_inclusive():
    assert MAX_SCHEDULER_TASKS == 65_536
    assert SchedulerConfig(max_tasks=65_536).max_tasks == 65_536
    with pytest.raises(InvalidSchedulerConfig, match="max_tasks"):
        SchedulerConfig(max_tasks=65_537)
    with pytest.raises(InvalidSchedulerConfig):
        SchedulerConfig(max_tasks=0)


@pytest.mark.parametrize(
    ("workers", "max_tasks", "capacity"),
    [(1, 1, 1), (1, 65_536, 2), (4, 5, 5), (4, 8, 8), (4, 9, 8), (64, 65_536, 128)],
)
def test_queue_is_bounded_to_twice_the_workers_or_max_tasks_whichever_is_smaller(
    workers, max_tasks, capacity
):
    config = SchedulerConfig(max_concurrent_tasks=workers, max_tasks=max_tasks)
    assert config.queue_capacity == capacity


def test_retry_policy_bounds():
    assert RetryPolicy(max_retries=100, delay=timedelta(days=1)).max_retries == 100
    with pytest.raises(InvalidSchedulerConfig):
        RetryPolicy(max_retries=101)
    with pytest.raises(InvalidSchedulerConfig):
        RetryPolicy(delay=timedelta(days=1, microseconds=1))
    with pytest.raises(InvalidSchedulerConfig):
        RetryPolicy(max_retries=-1)


def test_task_carries_explicit_limits():
    schedule = TaskSchedule.once(START)
    assert ScheduledTask("x" * 128, schedule, print).name == "x" * 128
    with pytest.raises(InvalidSchedulerConfig, match=r"task\.name"):
        ScheduledTask("x" * 129, schedule, print)
    with pytest.raises(InvalidSchedulerConfig, match="priority"):
        ScheduledTask("p", schedule, print, priority=1001)
    assert ScheduledTask("p", schedule, print, priority=-1000).priority == -1000
    with pytest.raises(InvalidSchedulerConfig, match="max_runs"):
        TaskLimits(max_runs=0)
    assert TaskLimits(max_runs=1).max_runs == 1


def test_durable_config_bounds():
    assert DurableSchedulerConfigV1("node-a", claim_ttl_ms=1_000).renew_every_ms == 333
    with pytest.raises(InvalidSchedulerConfig, match="claim_ttl_ms"):
        DurableSchedulerConfigV1("node-a", claim_ttl_ms=999)
    with pytest.raises(InvalidSchedulerConfig, match="claim_ttl_ms"):
        DurableSchedulerConfigV1("node-a", claim_ttl_ms=3_600_001)
    with pytest.raises(InvalidSchedulerConfig, match="owner_id"):
        DurableSchedulerConfigV1("bad owner")
    with pytest.raises(InvalidSchedulerConfig, match="owner_id"):
        DurableSchedulerConfigV1("o" * 65)
