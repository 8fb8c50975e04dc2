"""Checked clock arithmetic.

Python raises ``OverflowError`` past ``datetime.max``; the scheduler turns that into
``InvalidSchedule`` so an unrepresentable deadline is reported, never a crashed coordinator.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from appliance.core.errors import InvalidSchedule

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MICROSECOND = timedelta(microseconds=1)


def checked_add(instant: datetime, delta: timedelta, what: str) -> datetime:
    """``instant + delta``, or ``InvalidSchedule`` naming ``what`` when it is unrepresentable."""
    try:
        return instant + delta
    except OverflowError:
        raise InvalidSchedule(
            f"{what}: {instant.isoformat()} + {delta} is past the last representable instant"
        ) from None


def checked_multiply(delta: timedelta, factor: int, what: str) -> timedelta:
    try:
        return delta * factor
    except OverflowError:
        raise InvalidSchedule(f"{what}: {delta} x {factor} is not representable") from None


def to_utc(instant: datetime, what: str) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise InvalidSchedule(f"{what}: naive datetime {instant.isoformat()}; pass an aware one")
    try:
        return instant.astimezone(UTC)
    except OverflowError:
        raise InvalidSchedule(
            f"{what}: {instant.isoformat()} is not representable in UTC"
        ) from None


def micros_since_epoch(instant: datetime) -> int:
    """Integer key for heaps: exact, and cheaper to compare than datetimes."""
    return (instant - EPOCH) // ONE_MICROSECOND


def format_instant(instant: datetime) -> str:
    """Fixed-width RFC 3339 UTC text (used by the V1 snapshot)."""
    u = instant.astimezone(UTC)
    return (
        f"{u.year:04d}-{u.month:02d}-{u.day:02d}T"
        f"{u.hour:02d}:{u.minute:02d}:{u.second:02d}.{u.microsecond:06d}Z"
    )


def parse_instant(text: str) -> datetime:
    if len(text) != 27 or not text.endswith("Z"):
        raise ValueError(f"instant {text!r} is not YYYY-MM-DDTHH:MM:SS.ffffffZ")
    parsed = datetime.fromisoformat(text[:-1])
    if parsed.tzinfo is not None or format_instant(parsed.replace(tzinfo=UTC)) != text:
        raise ValueError(f"instant {text!r} is not in canonical form")
    return parsed.replace(tzinfo=UTC)
