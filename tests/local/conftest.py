from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from appliance.local import ManualClock, Scheduler, SchedulerConfig

START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
WAIT_S = 10.0  # bound for awaited events; tests finish far sooner unless broken


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def make_scheduler() -> Iterator:
    created: list[Scheduler] = []

    def make(config: SchedulerConfig | None = None, **kwargs) -> Scheduler:
        scheduler = Scheduler(config, **kwargs)
        created.append(scheduler)
        return scheduler

    yield make
    for scheduler in created:
        scheduler.shutdown_with_timeout(WAIT_S)
