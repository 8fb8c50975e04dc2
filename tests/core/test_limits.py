"""Limits (SPEC §3): defaults, every bound at the boundary, cross-checks, strict types."""

from __future__ import annotations

import pytest

from appliance.core.errors import InvalidConfig
from appliance.core.limits import Limits, limits_to_json, parse_limits


def problems_of(obj: object) -> list[tuple[str, str]]:
    with pytest.raises(InvalidConfig) as err:
        parse_limits(obj)
    return err.value.problems


def test_an_empty_object_gives_the_spec_defaults() -> None:
    assert parse_limits({}) == Limits(
        schedules=64, records=4096, outstanding=128, running=16, grace_seconds=5
    )


def test_limits_round_trip_through_json_with_every_field_explicit() -> None:
    limits = Limits(schedules=3, records=10, outstanding=9, running=2, grace_seconds=0)
    assert limits_to_json(limits) == {
        "schedules": 3,
        "records": 10,
        "outstanding": 9,
        "running": 2,
        "grace_seconds": 0,
    }
    assert parse_limits(limits_to_json(limits)) == limits


@pytest.mark.parametrize(
    ("field", "low", "high"),
    [("schedules", 1, 1024), ("records", 1, 65536), ("grace_seconds", 0, 59)],
)
def test_each_range_passes_at_both_ends_and_fails_one_beyond(
    field: str, low: int, high: int
) -> None:
    base = {"outstanding": 1, "running": 1}
    assert getattr(parse_limits({**base, field: low}), field) == low
    assert getattr(parse_limits({**base, field: high}), field) == high
    for beyond in (low - 1, high + 1):
        assert problems_of({**base, field: beyond}) == [
            (field, f"must be an integer from {low} to {high}, got {beyond}")
        ]


def test_outstanding_may_equal_records_but_not_exceed_it() -> None:
    assert parse_limits({"records": 200, "outstanding": 200}).outstanding == 200
    assert problems_of({"records": 200, "outstanding": 201}) == [
        ("outstanding", "must not exceed records (200), got 201")
    ]


def test_running_may_equal_outstanding_but_not_exceed_it() -> None:
    assert parse_limits({"outstanding": 20, "running": 20}).running == 20
    assert problems_of({"outstanding": 20, "running": 21}) == [
        ("running", "must not exceed outstanding (20), got 21")
    ]


def test_outstanding_and_running_must_be_positive() -> None:
    assert problems_of({"outstanding": 0, "running": 0}) == [
        ("outstanding", "must be an integer from 1 to 65536, got 0"),
        ("running", "must be an integer from 1 to 65536, got 0"),
    ]


def test_defaults_take_part_in_the_cross_checks() -> None:
    # records 100 with the default outstanding 128 is inconsistent: reported, not silently fixed.
    assert problems_of({"records": 100}) == [
        ("outstanding", "must not exceed records (100), got 128")
    ]


def test_the_largest_consistent_limits_pass() -> None:
    top = {
        "schedules": 1024,
        "records": 65536,
        "outstanding": 65536,
        "running": 65536,
        "grace_seconds": 59,
    }
    assert limits_to_json(parse_limits(top)) == top


@pytest.mark.parametrize("value", [True, 5.0, "5", None])
def test_limits_refuse_booleans_floats_strings_and_null(value: object) -> None:
    assert [p for p, _ in problems_of({"grace_seconds": value})] == ["grace_seconds"]


def test_unknown_limit_fields_are_rejected() -> None:
    assert problems_of({"max_running": 3}) == [("max_running", "unknown field")]


def test_every_limit_problem_is_reported_at_once() -> None:
    problems = problems_of({"schedules": 0, "records": 70000, "grace_seconds": 60, "x": 1})
    assert [p for p, _ in problems] == ["x", "schedules", "records", "grace_seconds"]


def test_limits_must_be_an_object() -> None:
    assert problems_of([]) == [("$", "must be an object, got a list")]


def test_a_path_prefix_places_problems_inside_a_larger_document() -> None:
    with pytest.raises(InvalidConfig) as err:
        parse_limits({"running": 0}, path="limits")
    assert err.value.problems == [("limits.running", "must be an integer from 1 to 65536, got 0")]
