"""One clock meaning: every wall clock answers ``now()`` with an aware UTC instant, and the
runner's clocks give the same instant in seconds."""

from __future__ import annotations

import time
from datetime import UTC

from appliance.clock import OffsetClock, ScaledClock, SystemClock
from appliance.engine.clock import SystemClock as EngineSystemClock
from appliance.local.clock import SystemClock as LocalSystemClock


def test_the_system_clocks_of_runner_engine_and_library_tell_the_same_time() -> None:
    before = time.time()
    stamps = [c.now() for c in (SystemClock(), EngineSystemClock(), LocalSystemClock())]
    after = time.time()
    for stamp in stamps:
        assert stamp.tzinfo is UTC and before - 1 <= stamp.timestamp() <= after + 1


def test_a_scaled_and_offset_clock_give_now_as_seconds_and_as_a_datetime() -> None:
    clock = OffsetClock(ScaledClock(1.0, start_wall_s=1_800_000_000.0), 60.0)
    assert clock.time_scale == 1.0
    seconds, instant = clock.now_s(), clock.now()
    assert instant.tzinfo is UTC
    assert abs(instant.timestamp() - seconds) < 1.0
    assert 1_800_000_060.0 <= seconds < 1_800_000_070.0
