"""Wall time, injected: the one clock protocol (SPEC §2 "Time is injected").

Theory of operation: everything that reads the wall clock takes a clock at construction and asks
it, so a test or a simulator can move time. ``Clock`` is the shared meaning — "what instant is
it", as an aware UTC datetime — used by the engine (started/finished stamps;
appliance/engine/clock.py re-exports it), the local library and the runner. Two extensions add one
capability each: the runner's ``RunnerClock`` adds Unix seconds and the test-only time scale
(``--time-scale N``, ``ScaledClock``); the local library's clock (appliance/local/clock.py) adds an
interruptible wait. ``SystemClock`` satisfies all of them but the wait. Raft timers and join
budgets never use these clocks: they stay on the monotonic clock, unscaled.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current wall-clock time, timezone-aware (UTC)."""
        ...


class RunnerClock(Clock, Protocol):
    """The runner's clock: wall seconds, possibly running ``time_scale`` times fast (tests)."""

    time_scale: float

    def now_s(self) -> float:
        """Seconds since the Unix epoch (wall time, possibly scaled)."""
        ...


class _FromSeconds:
    @abstractmethod
    def now_s(self) -> float:
        """Seconds since the Unix epoch; each clock below provides it."""

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_s(), UTC)


class SystemClock(_FromSeconds):
    """The real wall clock."""

    time_scale = 1.0

    def now_s(self) -> float:
        return time.time()

    def now(self) -> datetime:
        return datetime.now(UTC)


class ScaledClock(_FromSeconds):
    """Tests only (``--time-scale N``): wall time N times faster from process start,
    ``start + (monotonic - start_mono) * N``. Derived from the monotonic clock, so a step of the
    system clock after start does not move it."""

    def __init__(self, time_scale: float, *, start_wall_s: float | None = None) -> None:
        if not 1.0 <= time_scale <= 100_000.0:
            raise ValueError("time_scale must be in [1, 100000]")
        self.time_scale = time_scale
        self._start_wall_s = time.time() if start_wall_s is None else start_wall_s
        self._start_mono_s = time.monotonic()

    def now_s(self) -> float:
        return self._start_wall_s + (time.monotonic() - self._start_mono_s) * self.time_scale


class OffsetClock(_FromSeconds):
    """Tests only (``--clock-offset-seconds``): another clock shifted by ``offset_s``, so a chaos
    run can give one voter a wrong wall clock, or keep a restarted voter on the cluster's scaled
    timeline instead of restarting the scale from the real time."""

    def __init__(self, inner: RunnerClock, offset_s: float) -> None:
        self._inner = inner
        self._offset_s = offset_s
        self.time_scale = inner.time_scale

    def now_s(self) -> float:
        return self._inner.now_s() + self._offset_s
