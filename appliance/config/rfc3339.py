"""RFC 3339 timestamps with an explicit offset (the grant expiry ``remote.expires_at``).

Strict on purpose: a date and a time with seconds, ``T`` as separator, and an offset (``Z`` or
``±hh:mm``). ``-00:00`` is refused because RFC 3339 §4.3 defines it as "offset unknown", which is
exactly what an expiry must not be. Fractions of a second beyond microseconds are truncated. The
canonical form (``format_utc``) is UTC with ``Z``, so two voters writing the same instant with
different offsets seal the same contract.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

from appliance.core.schema import Problems, show

_RFC3339: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)


class TimestampError(ValueError):
    """A timestamp that is not RFC 3339 with an offset; the message is safe to show."""


def parse_rfc3339(text: str) -> datetime:
    """Parse to an aware UTC datetime."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise TimestampError(
            f"must be an RFC 3339 timestamp with an offset (2027-01-31T12:00:00Z), got {show(text)}"
        )
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zulu, sign, off_h, off_m = match.groups()[6:]
    micro = int((fraction or "").ljust(6, "0")[:6])
    if zulu:
        offset = timedelta(0)
    else:
        if sign == "-" and off_h == "00" and off_m == "00":
            raise TimestampError("offset -00:00 means 'unknown offset'; give the real offset or Z")
        if int(off_h) > 23 or int(off_m) > 59:
            raise TimestampError(f"offset {sign}{off_h}:{off_m} is out of range")
        offset = timedelta(hours=int(off_h), minutes=int(off_m)) * (-1 if sign == "-" else 1)
    try:
        local = datetime(year, month, day, hour, minute, second, micro, timezone(offset))
        return local.astimezone(UTC)
    except (ValueError, OverflowError) as err:
        raise TimestampError(f"is not a valid instant: {err}") from None


def format_utc(instant: datetime) -> str:
    """Canonical RFC 3339 in UTC: ``2027-01-31T12:00:00Z`` (microseconds only when non-zero)."""
    utc = instant.astimezone(UTC)
    fraction = f".{utc.microsecond:06d}" if utc.microsecond else ""
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}"
        f"T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}{fraction}Z"
    )


def rfc3339_rule(value: object, path: str, problems: Problems) -> Any:
    if not isinstance(value, str):
        return problems.add(path, f"must be an RFC 3339 timestamp string, got {show(value)}")
    try:
        return parse_rfc3339(value)
    except TimestampError as err:
        return problems.add(path, str(err))
