"""Wall time for the runner, injected (SPEC §2: "Time is injected").

``SystemClock`` is the real wall clock. ``ScaledClock`` (tests only, ``--time-scale N``) makes
wall time run N times faster from process start: ``start + (monotonic - start_mono) * N``. It is
derived from the monotonic clock, so a step of the system clock after start does not move it.
Raft timers never use these clocks: they stay on the monotonic clock, unscaled.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    time_scale: float

    def now_s(self) -> float:
        """Seconds since the Unix epoch (wall time, possibly scaled)."""
        ...


class SystemClock:
    time_scale = 1.0

    def now_s(self) -> float:
        return time.time()


class ScaledClock:
    def __init__(self, time_scale: float, *, start_wall_s: float | None = None) -> None:
        if not 1.0 <= time_scale <= 100_000.0:
            raise ValueError("time_scale must be in [1, 100000]")
        self.time_scale = time_scale
        self._start_wall_s = time.time() if start_wall_s is None else start_wall_s
        self._start_mono_s = time.monotonic()

    def now_s(self) -> float:
        return self._start_wall_s + (time.monotonic() - self._start_mono_s) * self.time_scale


class OffsetClock:
    """Tests only (``--clock-offset-seconds``): another clock shifted by ``offset_s``, so a chaos
    run can give one voter a wrong wall clock, or keep a restarted voter on the cluster's scaled
    timeline instead of restarting the scale from the real time."""

    def __init__(self, inner: Clock, offset_s: float) -> None:
        self._inner = inner
        self._offset_s = offset_s
        self.time_scale = inner.time_scale

    def now_s(self) -> float:
        return self._inner.now_s() + self._offset_s
