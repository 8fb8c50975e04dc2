"""Injected time for the local scheduler.

The coordinator never sleeps on its own: it asks the clock to wait until a deadline *or* until a
wakeup event is set. ``SystemClock`` maps that onto ``Event.wait``; ``ManualClock`` wakes every
waiter whenever a test advances it, so tests await events instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

from appliance.clock import Clock as WallClock
from appliance.clock import SystemClock as WallSystemClock

# A wall clock can jump; re-checking at least this often bounds how late a jump is noticed.
SYSTEM_WAIT_SECONDS_MAX = 30.0


class Clock(WallClock, Protocol):
    """The wall clock (appliance/clock.py) plus an interruptible wait.

    ``wait`` returns when ``now() >= deadline`` (``None``: no deadline), when ``wakeup`` is set,
    or spuriously; callers re-check their state after every return.
    """

    def wait(self, wakeup: threading.Event, deadline: datetime | None) -> None: ...


class SystemClock(WallSystemClock):
    """The real wall clock, with ``Event.wait`` as the wait."""

    def wait(self, wakeup: threading.Event, deadline: datetime | None) -> None:
        timeout_s = SYSTEM_WAIT_SECONDS_MAX
        if deadline is not None:
            remaining_s = (deadline - self.now()).total_seconds()
            timeout_s = min(max(remaining_s, 0.0), SYSTEM_WAIT_SECONDS_MAX)
        if timeout_s > 0:
            wakeup.wait(timeout_s)


class ManualClock:
    """A clock that only moves when told to; every advance wakes every waiter."""

    def __init__(self, start: datetime):
        if start.tzinfo is None:
            raise ValueError("ManualClock start must be an aware datetime")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()
        self._waiters: set[threading.Event] = set()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now = self._now + delta
            waiters = list(self._waiters)
            now = self._now
        for event in waiters:
            event.set()
        return now

    def set(self, instant: datetime) -> None:
        with self._lock:
            self._now = instant.astimezone(UTC)
            waiters = list(self._waiters)
        for event in waiters:
            event.set()

    def wait(self, wakeup: threading.Event, deadline: datetime | None) -> None:
        # Register before checking the time so an advance in between cannot be missed.
        with self._lock:
            self._waiters.add(wakeup)
            expired = deadline is not None and self._now >= deadline
        try:
            if not expired:
                # Bounded so a forgotten test cannot hang a thread forever.
                wakeup.wait(SYSTEM_WAIT_SECONDS_MAX)
        finally:
            with self._lock:
                self._waiters.discard(wakeup)


def monotonic_s() -> float:
    """Monotonic seconds, for join budgets (never scaled, never faked)."""
    return time.monotonic()
