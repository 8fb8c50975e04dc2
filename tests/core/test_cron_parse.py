"""SPEC §3 "Cron": the strict numeric five-field grammar, every rejection and every boundary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.core.calendar import compile_schedule, validate_cron
from appliance.core.cron_parse import CRON_BYTES_MAX, parse_cron
from appliance.core.errors import InvalidSchedule

VECTORS = json.loads(
    (Path(__file__).parent.parent / "data" / "croner_vectors.json").read_text(encoding="utf-8")
)


def rejected(cron: object) -> str:
    with pytest.raises(InvalidSchedule) as exc:
        validate_cron(cron)  # type: ignore[arg-type]
    message = str(exc.value)
    assert message.startswith("cron: "), message
    return message


# -- accepted forms -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "minutes", "hours", "days", "months", "weekdays"),
    [
        ("* * * * *", range(60), range(24), range(1, 32), range(1, 13), range(7)),
        ("*/15 * * * *", [0, 15, 30, 45], range(24), range(1, 32), range(1, 13), range(7)),
        ("1-30/7 0 * * *", [1, 8, 15, 22, 29], [0], range(1, 32), range(1, 13), range(7)),
        ("0 0 1,15,20-25 * *", [0], [0], [1, 15, 20, 21, 22, 23, 24, 25], range(1, 13), range(7)),
        ("59 23 31 12 7", [59], [23], [31], [12], [0]),
        ("0 0 1 1 0", [0], [0], [1], [1], [0]),
        ("0 0 * * 5-7", [0], [0], range(1, 32), range(1, 13), [0, 5, 6]),
        ("0 0 * * 0,7", [0], [0], range(1, 32), range(1, 13), [0]),
        ("0 0 * * */2", [0], [0], range(1, 32), range(1, 13), [0, 2, 4, 6]),
        ("0 0 1 */5 *", [0], [0], [1], [1, 6, 11], range(7)),
        ("00 007 * * *", [0], [7], range(1, 32), range(1, 13), range(7)),
    ],
)
def test_accepted_fields_expand_to_exact_value_sets(
    cron: str, minutes, hours, days, months, weekdays
) -> None:
    fields = parse_cron(cron)
    assert fields.minutes == tuple(minutes)
    assert fields.hours == tuple(hours)
    assert fields.days_of_month == tuple(days)
    assert fields.months == tuple(months)
    assert fields.days_of_week == tuple(weekdays)


@pytest.mark.parametrize(
    ("cron", "dom_star", "dow_star", "use_or"),
    [
        ("0 0 * * *", True, True, False),
        ("0 0 13 * *", False, True, False),
        ("0 0 * * 5", True, False, False),
        ("0 0 13 * 5", False, False, True),
        ("0 0 */1 * 5", False, False, True),  # only a literal * counts as a star
        ("0 0 1-31 * 0-6", False, False, True),
    ],
)
def test_day_fields_use_or_only_when_neither_is_a_literal_star(
    cron: str, dom_star: bool, dow_star: bool, use_or: bool
) -> None:
    fields = parse_cron(cron)
    assert (fields.dom_is_star, fields.dow_is_star, fields.days_use_or) == (
        dom_star,
        dow_star,
        use_or,
    )


@pytest.mark.parametrize(
    ("cron", "fixed"),
    [
        ("30 2 * * *", True),
        ("30 2-2 * * *", True),  # one value, no * or /: Croner's "single-value" rule
        ("30 2,2 * * *", True),
        ("0-0 2 * * 1-5", True),
        ("30 2,3 * * *", False),
        ("*/30 2 * * *", False),
        ("30 */24 * * *", False),  # a step is never fixed-time, even with one value
        ("0-59/60 2 * * *", False),
        ("* 2 * * *", False),
        ("30 * * * *", False),
    ],
)
def test_fixed_time_means_minute_and_hour_each_a_single_value_without_star_or_step(
    cron: str, fixed: bool
) -> None:
    assert parse_cron(cron).is_fixed_time is fixed


def test_surrounding_and_repeated_whitespace_is_accepted() -> None:
    assert parse_cron("  0\t0  *  * *\n") == parse_cron("0 0 * * *")


# -- size limit -----------------------------------------------------------------------------------


def _expression_of_bytes(size: int) -> str:
    base = "00" + ",0" * 123 + " * * * *"  # 256 bytes
    assert len(base) == CRON_BYTES_MAX
    return base if size == CRON_BYTES_MAX else base.replace(" ", "  ", size - CRON_BYTES_MAX)


def test_an_expression_of_exactly_256_bytes_is_accepted() -> None:
    validate_cron(_expression_of_bytes(256))


def test_an_expression_of_257_bytes_is_rejected() -> None:
    assert "257 bytes" in rejected(_expression_of_bytes(257))


def test_the_size_limit_counts_utf8_bytes_not_characters() -> None:
    assert "258 bytes" in rejected("é" * 129)
    # 128 two-byte characters are within the size limit and fail for their characters instead.
    assert "bytes" not in rejected("é" * 128)


# -- rejection categories -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "needle"),
    [
        ("0 0 * JAN *", "names are not allowed (JAN)"),
        ("0 0 * * MON", "names are not allowed (MON)"),
        ("0 0 * * mon-fri", "names are not allowed (mon)"),
        ("@daily", "aliases are not allowed (@daily)"),
        ("@reboot", "aliases are not allowed"),
        ("@hourly", "aliases are not allowed"),
        ("0 0 0 * * *", "expected exactly 5 fields"),  # seconds
        ("0 0 1 1 * 2030", "expected exactly 5 fields"),  # year
        ("0 0 0 1 1 * 2030", "expected exactly 5 fields"),
        ("0 0 * *", "got 4"),
        ("", "expression is empty"),
        ("   ", "expression is empty"),
        ("0 0 L * *", "L is not supported in the day-of-month field"),
        ("0 0 15W * *", "W is not supported in the day-of-month field"),
        ("0 0 * * 5#2", "# is not supported in the day-of-week field"),
        ("0 0 * * 5L", "L is not supported in the day-of-week field"),
        ("0 0 ? * *", "? is not supported in the day-of-month field"),
        ("0 0 * * 1.5", "invalid character '.'"),
        ("0 0 * * 1_5", "invalid character '_'"),
        ("*/0 * * * *", "minute field has step 0"),
        ("0 1-5/0 * * *", "hour field has step 0"),
        ("5-1 * * * *", "reversed range 5-1"),
        ("0 0 * * 7-1", "reversed range 7-1"),
        ("0 0 31-1 * *", "reversed range 31-1"),
        ("5/15 * * * *", "step with a numeric start (5/15)"),
        ("/5 * * * *", "step without a start (/5); use */5"),
        ("*/ * * * *", "missing number"),
        ("1- * * * *", "missing number"),
        ("-1 * * * *", "missing number"),
        ("0 0 1,,2 * *", "empty list item"),
        ("0 0 1, * *", "empty list item"),
        ("0 0 ,1 * *", "empty list item"),
        ("*/*/2 * * * *", "invalid step"),
        ("0 0 1-2-3 * *", "invalid value"),
        ("\uff10 0 * * *", "only ASCII"),  # a full-width digit zero
    ],
)
def test_every_invalid_category_is_rejected_with_the_field_and_problem(
    cron: str, needle: str
) -> None:
    assert needle in rejected(cron)


@pytest.mark.parametrize(
    ("cron", "needle"),
    [
        ("60 * * * *", "minute field value 60 is out of range 0-59"),
        ("0-60 * * * *", "minute field value 60 is out of range 0-59"),
        ("0 24 * * *", "hour field value 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month field value 0 is out of range 1-31"),
        ("0 0 32 * *", "day-of-month field value 32 is out of range 1-31"),
        ("0 0 * 0 *", "month field value 0 is out of range 1-12"),
        ("0 0 * 13 *", "month field value 13 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week field value 8 is out of range 0-7"),
        ("0 0 * * 0-8", "day-of-week field value 8 is out of range 0-7"),
        ("0 0 0059 * *", "day-of-month field value 59 is out of range 1-31"),
    ],
)
def test_values_one_past_each_field_boundary_are_rejected(cron: str, needle: str) -> None:
    assert needle in rejected(cron)


@pytest.mark.parametrize(
    ("largest_step", "one_too_large", "field"),
    [
        ("*/60 * * * *", "*/61 * * * *", "minute"),
        ("0 */24 * * *", "0 */25 * * *", "hour"),
        ("0 0 */31 * *", "0 0 */32 * *", "day-of-month"),
        ("0 0 1 */12 *", "0 0 1 */13 *", "month"),
        ("0 0 * * */7", "0 0 * * */8", "day-of-week"),
        ("0-59/60 * * * *", "0-59/61 * * * *", "minute"),
    ],
)
def test_a_step_may_be_as_large_as_the_field_but_not_larger(
    largest_step: str, one_too_large: str, field: str
) -> None:
    validate_cron(largest_step)
    assert f"{field} field step" in rejected(one_too_large)
    assert "larger than the field's range" in rejected(one_too_large)


@pytest.mark.parametrize("cron", ["0 0 31 2 *", "0 0 30 2 *", "0 0 30,31 2 *", "0 0 31 4,6,9,11 *"])
def test_a_pattern_that_can_never_fire_is_rejected(cron: str) -> None:
    assert "can never fire" in rejected(cron)


@pytest.mark.parametrize(
    "cron",
    [
        "0 0 29 2 *",  # every leap year
        "0 0 31 2,3 *",  # March has a 31st
        "0 0 31 2 1",  # OR: every Monday of February
        "0 0 30 2 */1",  # OR with a restricted (non-star) day-of-week
    ],
)
def test_rare_but_possible_patterns_are_accepted(cron: str) -> None:
    validate_cron(cron)


def test_a_non_string_cron_is_rejected() -> None:
    assert "must be a string" in rejected(None)
    assert "must be a string" in rejected(5)


def test_compile_schedule_validates_the_cron_before_the_timezone() -> None:
    with pytest.raises(InvalidSchedule, match=r"^cron: "):
        compile_schedule("61 * * * *", "Not/AZone")


# -- agreement with the reference ------------------------------------------------------------------


@pytest.mark.parametrize(
    "case", VECTORS["acceptance"], ids=[case["pattern"] for case in VECTORS["acceptance"]]
)
def test_whatever_croner_rejects_we_reject_too(case: dict) -> None:
    if not case["croner_accepts"] or not case["croner_fires"]:
        rejected(case["pattern"])


# Croner accepts these; SPEC §3 rejects them, and SPEC wins.
SPEC_STRICTER_THAN_CRONER = {
    "0 0 * JAN *",
    "0 0 * * MON",
    "@daily",
    "0 0 0 * * *",
    "0 0 L * *",
    "0 0 15W * *",
    "0 0 * * 5#2",
    "0 0 ? * *",
}


def test_where_croner_is_more_permissive_spec_wins() -> None:
    accepted_by_croner = {
        case["pattern"] for case in VECTORS["acceptance"] if case["croner_accepts"]
    }
    assert accepted_by_croner >= SPEC_STRICTER_THAN_CRONER
    for cron in SPEC_STRICTER_THAN_CRONER:
        rejected(cron)
    for case in VECTORS["acceptance"]:
        fires = case["croner_accepts"] and case["croner_fires"]
        if fires and case["pattern"] not in SPEC_STRICTER_THAN_CRONER:
            validate_cron(case["pattern"])
