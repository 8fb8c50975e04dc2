"""Strict numeric five-field cron parsing (SPEC §3 "Cron").

Theory of operation: the expression is split into exactly five whitespace-separated fields
(minute, hour, day-of-month, month, day-of-week). Each field is a comma list of items; an item is
``*``, ``N``, ``A-B``, ``*/S``, or ``A-B/S``. Everything else is refused with a message that
starts with ``cron:`` and names the field and the problem, so the operator can fix it without
reading the grammar. The result is a frozen :class:`CronFields` of sorted value tuples, which the
calendar steps through directly (no per-call parsing on the hot path).

Day-of-week 7 is Sunday and folds onto 0. Whether day-of-month and day-of-week were written as a
literal ``*`` is kept, because that decides AND versus OR of the two day fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from appliance.core.errors import InvalidSchedule

CRON_BYTES_MAX = 256

# The largest day of each month in any year (February has 29 in leap years).
MONTH_DAYS_MAX = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    size: int  # how many distinct values: the largest step allowed (Croner's rule)


_FIELDS = (
    _FieldSpec("minute", 0, 59, 60),
    _FieldSpec("hour", 0, 23, 24),
    _FieldSpec("day-of-month", 1, 31, 31),
    _FieldSpec("month", 1, 12, 12),
    _FieldSpec("day-of-week", 0, 7, 7),  # 7 is Sunday again, so a week has 7 values
)

_NUMBER = re.compile(r"[0-9]+\Z")
_ALIAS = re.compile(r"@[A-Za-z]+\Z")
_NAME = re.compile(r"[A-Za-z]{2,}")


@dataclass(frozen=True)
class CronFields:
    """The expanded value sets of a valid expression, each sorted and non-empty."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_month: tuple[int, ...]
    months: tuple[int, ...]
    days_of_week: tuple[int, ...]  # 0 = Sunday … 6 = Saturday (7 already folded onto 0)
    dom_is_star: bool
    dow_is_star: bool
    is_fixed_time: bool  # Croner's "fixed-time": minute and hour each one value, no * or /

    @property
    def days_use_or(self) -> bool:
        """Both day fields restricted: a day matches if either matches (SPEC §3)."""
        return not self.dom_is_star and not self.dow_is_star


def parse_cron(cron: object) -> CronFields:
    """Parse and validate ``cron``; raise :class:`InvalidSchedule` (``cron: …``) if invalid."""
    if not isinstance(cron, str):
        raise InvalidSchedule(f"cron: must be a string, not {type(cron).__name__}")
    size_bytes = len(cron.encode("utf-8", errors="surrogatepass"))
    if size_bytes > CRON_BYTES_MAX:
        raise InvalidSchedule(
            f"cron: expression is {size_bytes} bytes, more than the limit of {CRON_BYTES_MAX}"
        )
    text = cron.strip()
    if not text:
        raise InvalidSchedule("cron: expression is empty")
    if _ALIAS.match(text) or text.startswith("@"):
        raise InvalidSchedule(f"cron: aliases are not allowed ({text})")
    if not text.isascii():
        raise InvalidSchedule("cron: only ASCII digits and the characters * , - / are allowed")
    parts = text.split()
    if len(parts) != 5:
        raise InvalidSchedule(
            f"cron: expected exactly 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(parts)}"
        )
    values = [_parse_field(part, spec) for part, spec in zip(parts, _FIELDS, strict=True)]
    fields = CronFields(
        minutes=values[0],
        hours=values[1],
        days_of_month=values[2],
        months=values[3],
        days_of_week=tuple(sorted({v % 7 for v in values[4]})),
        dom_is_star=parts[2] == "*",
        dow_is_star=parts[4] == "*",
        is_fixed_time=_is_fixed(parts[0], values[0]) and _is_fixed(parts[1], values[1]),
    )
    _require_can_fire(fields)
    return fields


def _is_fixed(text: str, values: tuple[int, ...]) -> bool:
    """Croner 11's default ``fixedTimeRule: "single-value"``: no ``*``, no ``/``, one value.

    So ``0 2 * * *`` and ``0 2-2 * * *`` are fixed-time, while ``0 2,3 * * *``, ``*/30 2 * * *``
    and ``0 */24 * * *`` (a step, even with one value) are interval jobs.
    """
    return "*" not in text and "/" not in text and len(values) == 1


def _parse_field(text: str, spec: _FieldSpec) -> tuple[int, ...]:
    _refuse_foreign_syntax(text, spec)
    values: set[int] = set()
    for item in text.split(","):
        if item == "":
            raise InvalidSchedule(f"cron: {spec.name} field has an empty list item ({text!r})")
        values.update(_parse_item(item, spec))
    return tuple(sorted(values))


def _refuse_foreign_syntax(text: str, spec: _FieldSpec) -> None:
    """Name the extension an operator probably meant, instead of a generic syntax error."""
    name = _NAME.search(text)
    if name:
        raise InvalidSchedule(f"cron: names are not allowed ({name.group(0)})")
    for char, what in (("?", "?"), ("#", "#"), ("L", "L"), ("W", "W")):
        if char in text.upper():
            raise InvalidSchedule(f"cron: {what} is not supported in the {spec.name} field")
    for char in text:
        if not (char.isdigit() or char in "*,-/"):
            raise InvalidSchedule(
                f"cron: {spec.name} field has an invalid character {char!r}; "
                "only digits and * , - / are allowed"
            )


def _parse_item(item: str, spec: _FieldSpec) -> range:
    base, slash, step_text = item.partition("/")
    if slash:
        step = _number(step_text, spec, what="step")
        if step == 0:
            raise InvalidSchedule(f"cron: {spec.name} field has step 0 ({item})")
    else:
        step = 1
    if slash and base == "":
        raise InvalidSchedule(
            f"cron: {spec.name} field has a step without a start ({item}); use */{step_text}"
        )
    if base == "*":
        low, high = spec.low, spec.high
        if spec.name == "day-of-week":
            high = 6  # "*" and "*/S" step over the week once; 7 would repeat Sunday
    elif "-" in base:
        first, _, last = base.partition("-")
        low = _number(first, spec, what="value")
        high = _number(last, spec, what="value")
        _check_range(low, spec)
        _check_range(high, spec)
        if low > high:
            raise InvalidSchedule(
                f"cron: {spec.name} field has a reversed range {low}-{high}; "
                "ranges must go from low to high"
            )
    else:
        if slash:
            raise InvalidSchedule(
                f"cron: {spec.name} field has a step with a numeric start ({item}); "
                f"use */{step_text} or a range such as {base}-{spec.high}/{step_text}"
            )
        low = high = _number(base, spec, what="value")
        _check_range(low, spec)
    if slash and step > spec.size:
        raise InvalidSchedule(
            f"cron: {spec.name} field step {step} is larger than the field's range "
            f"of {spec.size} values"
        )
    return range(low, high + 1, step)


def _number(text: str, spec: _FieldSpec, *, what: str) -> int:
    if text == "":
        raise InvalidSchedule(f"cron: {spec.name} field has a missing number")
    if not _NUMBER.match(text):
        raise InvalidSchedule(f"cron: {spec.name} field has an invalid {what} {text!r}")
    return int(text)


def _check_range(value: int, spec: _FieldSpec) -> None:
    if not spec.low <= value <= spec.high:
        raise InvalidSchedule(
            f"cron: {spec.name} field value {value} is out of range {spec.low}-{spec.high}"
        )


def _require_can_fire(fields: CronFields) -> None:
    """Refuse a pattern whose calendar part can never match a real date.

    Only day-of-month with month can be impossible: hours and minutes always exist on a matching
    day (a DST gap moves or skips one instance, it cannot remove every year's), and a restricted
    day-of-week always matches some day of every month. With OR semantics a restricted
    day-of-week alone matches, so only "day-of-month restricted, day-of-week literally *"
    can be empty. The Gregorian calendar repeats every 400 years (146,097 days, a whole number of
    weeks), so "some month of the pattern has one of its days in some year of the cycle" is the
    complete question, and within a cycle every month reaches its largest length (February 29
    recurs at most 8 years apart, e.g. 2096 → 2104). So checking each day against the month's
    largest length decides it exactly, with no search.
    """
    if not fields.dow_is_star:
        return
    for month in fields.months:
        if fields.days_of_month[0] <= MONTH_DAYS_MAX[month - 1]:
            return
    raise InvalidSchedule(
        "cron: pattern can never fire (no listed month has any of the listed days of the month)"
    )
