"""When a task runs: one-shot at an instant, a fixed interval, or a cron expression.

Cron schedules delegate to ``appliance.core.calendar`` so the library and the appliance share one
calendar (Croner semantics, DST rules). Every computation goes through checked arithmetic: a
deadline past ``datetime.max`` raises ``InvalidSchedule`` instead of ``OverflowError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from appliance.core.errors import InvalidSchedule

from .timemath import checked_add, checked_multiply, format_instant, to_utc

INTERVAL_MIN = timedelta(milliseconds=1)
INTERVAL_MAX = timedelta(days=3650)
CRON_BYTES_MAX = 256
TIMEZONE_BYTES_MAX = 128


@dataclass(frozen=True)
class TaskSchedule:
    """Build with :meth:`once`, :meth:`every` or :meth:`cron`; immutable and hashable."""

    kind: str
    at: datetime | None = None
    interval: timedelta | None = None
    start_at: datetime | None = None
    expression: str | None = None
    timezone: str | None = None
    _compiled: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        complete = {
            "once": self.at is not None,
            "every": self.interval is not None,
            "cron": self._compiled is not None,
        }
        if not complete.get(self.kind, False):
            raise InvalidSchedule(
                f"schedule: build it with TaskSchedule.once/every/cron (got kind {self.kind!r})"
            )

    @classmethod
    def once(cls, at: datetime) -> TaskSchedule:
        """Run one time at ``at`` (an aware instant; a past instant is due immediately)."""
        return cls(kind="once", at=to_utc(at, "schedule.at"))

    @classmethod
    def every(cls, interval: timedelta, *, start_at: datetime | None = None) -> TaskSchedule:
        """Run every ``interval``; first at ``start_at``, or one interval after registration."""
        if not INTERVAL_MIN <= interval <= INTERVAL_MAX:
            raise InvalidSchedule(
                f"schedule.interval: {interval} is outside [{INTERVAL_MIN}, {INTERVAL_MAX}]"
            )
        start = None if start_at is None else to_utc(start_at, "schedule.start_at")
        return cls(kind="every", interval=interval, start_at=start)

    @classmethod
    def cron(cls, expression: str, timezone: str = "UTC") -> TaskSchedule:
        """Run on a five-field cron expression in an IANA timezone (validated now)."""
        if len(expression.encode()) > CRON_BYTES_MAX:
            raise InvalidSchedule(f"schedule.cron: longer than {CRON_BYTES_MAX} bytes")
        if len(timezone.encode()) > TIMEZONE_BYTES_MAX:
            raise InvalidSchedule(f"schedule.timezone: longer than {TIMEZONE_BYTES_MAX} bytes")
        from appliance.core.calendar import compile_schedule  # shared calendar core

        compiled = compile_schedule(expression, timezone)
        return cls(kind="cron", expression=expression, timezone=timezone, _compiled=compiled)

    def first_due(self, now: datetime) -> datetime:
        """The first due instant for a task registered at ``now``."""
        if self.kind == "once":
            return self.at  # type: ignore[return-value]
        if self.kind == "every":
            if self.start_at is not None:
                return self.start_at
            return checked_add(now, self.interval, "schedule.interval")  # type: ignore[arg-type]
        return self._cron_after(now)

    def next_due(self, previous_due: datetime, now: datetime) -> datetime | None:
        """The next slot strictly after both ``previous_due`` and ``now``; None when finished.

        Slots missed while a run was late coalesce into this one run (the cadence stays on the
        original grid: interval slots remain ``previous_due + k x interval``).
        """
        if self.kind == "once":
            return None
        if self.kind == "every":
            interval: timedelta = self.interval  # type: ignore[assignment]
            steps = 1 if now < previous_due else (now - previous_due) // interval + 1
            offset = checked_multiply(interval, steps, "schedule.interval")
            return checked_add(previous_due, offset, "schedule.interval")
        return self._cron_after(max(previous_due, now))

    def _cron_after(self, instant: datetime) -> datetime:
        try:
            return self._compiled.next_after(instant)
        except InvalidSchedule:
            raise
        except (OverflowError, ValueError) as exc:
            raise InvalidSchedule(f"schedule.cron: no representable next run ({exc})") from None

    def describe(self) -> str:
        """Stable text identifying the schedule (durable records compare it on recovery)."""
        if self.kind == "once":
            return f"once:{format_instant(self.at)}"  # type: ignore[arg-type]
        if self.kind == "every":
            micros = self.interval // timedelta(microseconds=1)  # type: ignore[operator]
            start = "" if self.start_at is None else f":{format_instant(self.start_at)}"
            return f"every:{micros}us{start}"
        return f"cron:{self.expression}@{self.timezone}"
