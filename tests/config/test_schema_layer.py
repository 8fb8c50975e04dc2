"""The declarative validation layer: strict types, closed objects, every problem with its path."""

from __future__ import annotations

import re

import pytest

from appliance.core.schema import (
    INVALID,
    Choice,
    CrossCheck,
    Field,
    Integer,
    ListOf,
    Obj,
    Text,
    field_paths,
    show,
    validate,
)

RANGE = Integer(0, 100)


@pytest.mark.parametrize("value", [True, False, 5.0, "5", None, [], {}])
def test_an_integer_rule_refuses_booleans_floats_and_other_types(value: object) -> None:
    parsed, problems = validate(RANGE, value, "n")
    assert parsed is INVALID
    assert problems == [("n", f"must be an integer from 0 to 100, got {show(value)}")]


@pytest.mark.parametrize(("value", "ok"), [(-1, False), (0, True), (100, True), (101, False)])
def test_an_integer_rule_is_inclusive_at_both_bounds(value: int, ok: bool) -> None:
    parsed, problems = validate(RANGE, value, "n")
    assert (parsed == value and problems == []) if ok else problems


def test_an_integer_message_states_range_and_value() -> None:
    _, problems = validate(RANGE, 101, "policy.retry.max_retries")
    assert problems == [("policy.retry.max_retries", "must be an integer from 0 to 100, got 101")]


def test_text_is_measured_in_utf8_bytes_not_characters() -> None:
    rule = Text(4)
    assert validate(rule, "éé", "s") == ("éé", [])  # 4 bytes
    assert validate(rule, "ééa", "s")[1] == [("s", "must be at most 4 UTF-8 bytes, got 5 bytes")]


def test_text_with_a_lone_surrogate_is_refused() -> None:
    parsed, problems = validate(Text(100), "a\ud800", "s")
    assert parsed is INVALID
    assert "lone surrogate" in problems[0][1]


def test_secret_text_never_echoes_its_value() -> None:
    rule = Text(10, pattern=re.compile("x+"), pattern_says="only x", secret=True)
    _, problems = validate(rule, "hunter2", "code")
    assert "hunter2" not in str(problems)


def test_long_values_are_clipped_in_messages() -> None:
    _, problems = validate(Choice({"A": 1}), "z" * 500, "c")
    assert len(problems[0][1]) < 120


def test_an_object_rejects_unknown_fields_and_reports_missing_ones_together() -> None:
    rule = Obj({"a": Field(RANGE), "b": Field(RANGE, required=False, default=7)})
    parsed, problems = validate(rule, {"x": 1, "weird key": 2}, "")
    assert parsed is INVALID
    assert problems == [
        ("x", "unknown field"),
        ('["weird key"]', "unknown field"),
        ("a", "is required"),
    ]


def test_an_object_fills_defaults_for_missing_optional_fields() -> None:
    rule = Obj({"a": Field(RANGE), "b": Field(RANGE, required=False, default=7)})
    assert validate(rule, {"a": 1}) == ({"a": 1, "b": 7}, [])


def test_a_non_object_is_reported_at_the_root() -> None:
    assert validate(Obj({}), [1]) == (INVALID, [("$", "must be an object, got a list")])


def test_every_problem_in_a_nested_document_is_reported_with_its_path() -> None:
    inner = Obj({"n": Field(RANGE)})
    rule = Obj({"a": Field(inner), "b": Field(ListOf(inner)), "c": Field(RANGE)})
    _, problems = validate(rule, {"a": {"n": -1}, "b": [{"n": 1}, {"n": 200, "z": 0}], "c": 1.5})
    assert [path for path, _ in problems] == ["a.n", "b[1].z", "b[1].n", "c"]


def test_a_cross_check_runs_when_its_fields_parsed_even_if_others_failed() -> None:
    def less(values, path, problems):  # type: ignore[no-untyped-def]
        if values["lo"] > values["hi"]:
            problems.add("lo", "must not exceed hi")

    rule = Obj(
        {"lo": Field(RANGE), "hi": Field(RANGE), "other": Field(RANGE)},
        checks=(CrossCheck(("lo", "hi"), less),),
    )
    _, problems = validate(rule, {"lo": 9, "hi": 3, "other": "x"})
    assert [p for p, _ in problems] == ["other", "lo"]


def test_a_list_reports_its_count_and_its_items_together() -> None:
    rule = ListOf(RANGE, min_items=1, max_items=2, bound_note="(limit)")
    assert validate(rule, [1, 2], "l") == ((1, 2), [])
    _, problems = validate(rule, [1, 2, -3], "l")
    assert problems == [
        ("l", "must hold from 1 to 2 items (limit), got 3"),
        ("l[2]", "must be an integer from 0 to 100, got -3"),
    ]
    assert validate(rule, [], "l")[1] == [("l", "must hold from 1 to 2 items (limit), got 0")]


def test_a_list_with_a_uniqueness_key_names_both_items() -> None:
    rule = ListOf(RANGE, unique=lambda v: v, unique_says="the same number as")
    assert validate(rule, [1, 2, 1], "l")[1] == [("l[2]", "is the same number as item 0")]


def test_field_paths_lists_every_declared_field() -> None:
    rule = Obj({"a": Field(Obj({"b": Field(RANGE)})), "c": Field(ListOf(Obj({"d": Field(RANGE)})))})
    assert list(field_paths(rule)) == ["a", "a.b", "c", "c[].d"]
