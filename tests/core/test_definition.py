"""Schedule definitions (SPEC §3): every field at its boundary, closed objects, all problems."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core.definition import (
    CODE_BYTES_MAX,
    DEFAULT_POLICY,
    Definition,
    DefinitionProblems,
    MissedCatchUp,
    MissedRunOnce,
    MissedSkip,
    OverlapPolicy,
    Policy,
    RetryPolicy,
    definition_to_json,
    parse_definition,
)
from appliance.core.errors import InvalidDefinition
from appliance.core.limits import Limits

LIMITS = Limits()
SEED_JSON = (
    '{"name":"example","code":"console.log(\'scheduled\')","cron":"* * * * *","timezone":"UTC",'
    '"policy":{"missed":"Skip","overlap":"Skip","retry":{"max_retries":0,"delay_seconds":0}}}'
)


def seed() -> dict[str, Any]:
    return json.loads(SEED_JSON)


def with_(path: str, value: object) -> dict[str, Any]:
    """The seed definition with one field (dotted path) replaced."""
    doc = seed()
    *parents, last = path.split(".")
    target = doc
    for key in parents:
        target = target[key]
    target[last] = value
    return doc


def problems_of(obj: object, limits: Limits = LIMITS) -> list[tuple[str, str]]:
    with pytest.raises(InvalidDefinition) as err:
        parse_definition(obj, limits)
    assert isinstance(err.value, DefinitionProblems)
    return err.value.problems


def paths_of(obj: object, limits: Limits = LIMITS) -> list[str]:
    return [path for path, _ in problems_of(obj, limits)]


def test_the_seed_example_parses_into_the_shared_types() -> None:
    assert parse_definition(seed(), LIMITS) == Definition(
        name="example",
        code="console.log('scheduled')",
        cron="* * * * *",
        timezone="UTC",
        policy=Policy(MissedSkip(), OverlapPolicy.SKIP, RetryPolicy(0, 0)),
    )


def test_the_seed_example_round_trips_to_the_same_json() -> None:
    assert definition_to_json(parse_definition(seed(), LIMITS)) == seed()


def test_name_is_optional_and_omitted_from_json_when_absent() -> None:
    doc = seed()
    del doc["name"]
    parsed = parse_definition(doc, LIMITS)
    assert parsed.name is None
    assert "name" not in definition_to_json(parsed)


def test_name_null_is_not_the_same_as_absent() -> None:
    assert problems_of(with_("name", None)) == [("name", "must be a string, got null")]


@pytest.mark.parametrize(
    ("field", "limit", "unit"),
    [("name", 128, "é"), ("code", CODE_BYTES_MAX, "é"), ("name", 128, "a"), ("code", 65536, "a")],
)
def test_text_fields_pass_at_their_byte_limit_and_fail_one_byte_over(
    field: str, limit: int, unit: str
) -> None:
    unit_bytes = len(unit.encode())
    at_limit = unit * (limit // unit_bytes)
    assert len(at_limit.encode()) == limit
    assert getattr(parse_definition(with_(field, at_limit), LIMITS), field) == at_limit
    assert problems_of(with_(field, at_limit + "a")) == [
        (field, f"must be at most {limit} UTF-8 bytes, got {limit + 1} bytes")
    ]


def test_code_of_exactly_64_kib_passes_and_65537_bytes_fails() -> None:
    assert len(parse_definition(with_("code", "x" * 65536), LIMITS).code) == 65536
    assert paths_of(with_("code", "x" * 65537)) == ["code"]


def test_code_is_never_echoed_in_an_error() -> None:
    secret_looking = "const token = 'do-not-print-me';" + "x" * 70000
    message = str(problems_of(with_("code", secret_looking)))
    assert "do-not-print-me" not in message


def test_code_is_required_but_may_be_empty() -> None:
    doc = seed()
    del doc["code"]
    assert problems_of(doc) == [("code", "is required")]
    assert parse_definition(with_("code", ""), LIMITS).code == ""


def _cron_of_exactly_256_bytes() -> str:
    minutes = ",".join(str(m) for m in range(60))  # 169 bytes
    hours = ",".join(str(h) for h in range(24))  # 61 bytes
    days = "1,2,3,4,5,6,7,8,9,10"  # 20 bytes
    return f"{minutes} {hours} {days} * *"


def test_cron_of_256_bytes_passes_and_257_fails_on_length() -> None:
    cron = _cron_of_exactly_256_bytes()
    assert len(cron.encode()) == 256
    assert parse_definition(with_("cron", cron), LIMITS).cron == cron
    longer = cron.replace(" 1,2,", " 31,2,", 1)
    assert len(longer.encode()) == 257
    assert problems_of(with_("cron", longer)) == [
        ("cron", "must be at most 256 UTF-8 bytes, got 257 bytes")
    ]


@pytest.mark.parametrize(
    "cron", ["61 * * * *", "* * * JAN *", "@daily", "* * * * * *", "0 0 31 2 *", "*/0 * * * *", ""]
)
def test_an_invalid_cron_is_reported_under_cron_with_the_calendar_reason(cron: str) -> None:
    problems = problems_of(with_("cron", cron))
    assert [path for path, _ in problems] == ["cron"]
    assert not problems[0][1].startswith("cron:")  # the field is the path, not repeated
    assert problems[0][1]


def test_timezone_of_129_bytes_fails_on_length_and_128_bytes_reaches_the_calendar() -> None:
    assert problems_of(with_("timezone", "A/" + "b" * 127)) == [
        ("timezone", "must be at most 128 UTF-8 bytes, got 129 bytes")
    ]
    at_limit = problems_of(with_("timezone", "A/" + "b" * 126))
    assert [path for path, _ in at_limit] == ["timezone"]
    assert "128 UTF-8 bytes" not in at_limit[0][1]


@pytest.mark.parametrize(
    "timezone", ["Europe/Berlin", "America/Santiago", "Pacific/Chatham", "UTC"]
)
def test_iana_timezones_are_accepted(timezone: str) -> None:
    assert parse_definition(with_("timezone", timezone), LIMITS).timezone == timezone


@pytest.mark.parametrize("timezone", ["Not/AZone", "", "local", "../etc/passwd"])
def test_unknown_timezones_are_reported_under_timezone(timezone: str) -> None:
    assert paths_of(with_("timezone", timezone)) == ["timezone"]


def test_an_invalid_cron_and_an_invalid_timezone_are_both_reported() -> None:
    doc = with_("cron", "61 * * * *")
    doc["timezone"] = "Not/AZone"
    assert paths_of(doc) == ["cron", "timezone"]


@pytest.mark.parametrize(
    ("missed", "parsed"),
    [
        ("Skip", MissedSkip()),
        ("RunOnce", MissedRunOnce()),
        ({"CatchUp": {"cap": 1}}, MissedCatchUp(1)),
    ],
)
def test_missed_policies_parse_and_round_trip(missed: object, parsed: object) -> None:
    definition = parse_definition(with_("policy.missed", missed), LIMITS)
    assert definition.policy.missed == parsed
    assert definition_to_json(definition)["policy"]["missed"] == missed


def test_catch_up_cap_runs_from_one_to_limits_outstanding() -> None:
    limits = Limits(outstanding=40, running=4)
    at_max = with_("policy.missed", {"CatchUp": {"cap": 40}})
    assert parse_definition(at_max, limits).policy.missed == MissedCatchUp(40)
    for cap in (0, 41):
        assert problems_of(with_("policy.missed", {"CatchUp": {"cap": cap}}), limits) == [
            (
                "policy.missed.CatchUp.cap",
                f"must be an integer from 1 to 40 (limits.outstanding), got {cap}",
            )
        ]


@pytest.mark.parametrize(
    ("missed", "paths"),
    [
        ("skip", ["policy.missed"]),
        ("CatchUp", ["policy.missed"]),
        ({}, ["policy.missed"]),
        ({"RunOnce": {}}, ["policy.missed"]),
        ({"CatchUp": {}}, ["policy.missed.CatchUp.cap"]),
        ({"CatchUp": {"cap": True}}, ["policy.missed.CatchUp.cap"]),
        ({"CatchUp": {"cap": 2, "max": 3}}, ["policy.missed.CatchUp.max"]),
        ({"CatchUp": {"cap": 2}, "Skip": {}}, ["policy.missed.Skip"]),
        ({"CatchUp": 2}, ["policy.missed.CatchUp"]),
        (None, ["policy.missed"]),
    ],
)
def test_malformed_missed_policies_are_rejected_at_the_right_path(
    missed: object, paths: list[str]
) -> None:
    assert paths_of(with_("policy.missed", missed)) == paths


@pytest.mark.parametrize("overlap", ["Skip", "Queue", "Concurrent"])
def test_each_overlap_policy_round_trips(overlap: str) -> None:
    definition = parse_definition(with_("policy.overlap", overlap), LIMITS)
    assert definition.policy.overlap.value == overlap
    assert definition_to_json(definition)["policy"]["overlap"] == overlap


@pytest.mark.parametrize("overlap", ["queue", "Parallel", 1, None])
def test_unknown_overlap_policies_are_rejected(overlap: object) -> None:
    problems = problems_of(with_("policy.overlap", overlap))
    assert problems[0][0] == "policy.overlap"
    assert '"Skip", "Queue", "Concurrent"' in problems[0][1]


@pytest.mark.parametrize(("field", "high"), [("max_retries", 100), ("delay_seconds", 86400)])
def test_retry_fields_pass_at_zero_and_max_and_fail_one_beyond(field: str, high: int) -> None:
    for ok in (0, high):
        retry = parse_definition(with_(f"policy.retry.{field}", ok), LIMITS).policy.retry
        assert getattr(retry, field) == ok
    for bad in (-1, high + 1):
        assert problems_of(with_(f"policy.retry.{field}", bad)) == [
            (f"policy.retry.{field}", f"must be an integer from 0 to {high}, got {bad}")
        ]


@pytest.mark.parametrize("value", [True, False, 1.0, "1"])
def test_retry_counts_refuse_booleans_floats_and_strings(value: object) -> None:
    assert paths_of(with_("policy.retry.max_retries", value)) == ["policy.retry.max_retries"]


@pytest.mark.parametrize(
    ("where", "path"),
    [("", "extra"), ("policy", "policy.extra"), ("policy.retry", "policy.retry.extra")],
)
def test_unknown_fields_are_rejected_at_every_level(where: str, path: str) -> None:
    doc = seed()
    target = doc
    for key in filter(None, where.split(".")):
        target = target[key]
    target["extra"] = 1
    assert problems_of(doc) == [(path, "unknown field")]


@pytest.mark.parametrize("missing", ["cron", "timezone"])
def test_every_field_but_name_and_policy_is_required(missing: str) -> None:
    doc = seed()
    del doc[missing]
    assert problems_of(doc) == [(missing, "is required")]


def test_an_omitted_policy_means_skip_skip_and_no_retries() -> None:
    doc = seed()
    del doc["policy"]
    parsed = parse_definition(doc, LIMITS)
    assert parsed.policy == DEFAULT_POLICY
    assert parsed.policy == Policy(MissedSkip(), OverlapPolicy.SKIP, RetryPolicy(0, 0))
    # normalized: the JSON form always carries the full policy, equal to the written-out one
    assert definition_to_json(parsed) == definition_to_json(parse_definition(seed(), LIMITS))


@pytest.mark.parametrize(
    ("missing", "default"),
    [
        ("missed", MissedSkip()),
        ("overlap", OverlapPolicy.SKIP),
        ("retry", RetryPolicy(0, 0)),
    ],
)
def test_every_policy_member_has_a_default(missing: str, default: object) -> None:
    doc = seed()
    doc["policy"] = {"missed": "RunOnce", "overlap": "Queue", "retry": {"max_retries": 3}}
    del doc["policy"][missing]
    parsed = parse_definition(doc, LIMITS).policy
    assert getattr(parsed, missing) == default


def test_retry_members_default_to_zero() -> None:
    doc = seed()
    doc["policy"]["retry"] = {"delay_seconds": 30}
    assert parse_definition(doc, LIMITS).policy.retry == RetryPolicy(0, 30)
    doc["policy"]["retry"] = {}
    assert parse_definition(doc, LIMITS).policy.retry == RetryPolicy(0, 0)


def test_a_null_policy_is_still_refused() -> None:
    doc = seed()
    doc["policy"] = None
    assert [path for path, _ in problems_of(doc)] == ["policy"]


def test_all_problems_are_reported_together_with_their_paths() -> None:
    doc = {
        "name": 7,
        "code": "x" * 65537,
        "cron": "* * * * *",
        "timezone": "UTC",
        "policy": {
            "missed": {"CatchUp": {"cap": 0}},
            "overlap": "Sometimes",
            "retry": {"max_retries": 101, "delay_seconds": -1, "jitter": 1},
        },
        "owner": "me",
    }
    assert paths_of(doc) == [
        "owner",
        "name",
        "code",
        "policy.missed.CatchUp.cap",
        "policy.overlap",
        "policy.retry.jitter",
        "policy.retry.max_retries",
        "policy.retry.delay_seconds",
    ]
    with pytest.raises(InvalidDefinition) as err:
        parse_definition(doc, LIMITS)
    assert "policy.retry.max_retries: must be an integer from 0 to 100, got 101" in str(err.value)


def test_a_definition_must_be_an_object() -> None:
    assert problems_of("not a definition") == [("$", 'must be an object, got "not a definition"')]


def test_a_path_prefix_places_problems_inside_a_larger_document() -> None:
    with pytest.raises(DefinitionProblems) as err:
        parse_definition(with_("policy.retry.max_retries", 101), LIMITS, path="schedules[3]")
    assert err.value.problems[0][0] == "schedules[3].policy.retry.max_retries"


def test_parsing_does_not_modify_its_input() -> None:
    doc = seed()
    before = copy.deepcopy(doc)
    parse_definition(doc, LIMITS)
    assert doc == before


_texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_missed = st.one_of(
    st.just("Skip"), st.just("RunOnce"), st.integers(1, 128).map(lambda n: {"CatchUp": {"cap": n}})
)
_definitions = st.fixed_dictionaries(
    {
        "code": _texts,
        "cron": st.sampled_from(["* * * * *", "*/5 1-3 * * 1,3", "0 0 1 1 *", "30 2 * * 0"]),
        "timezone": st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe"]),
        "policy": st.fixed_dictionaries(
            {
                "missed": _missed,
                "overlap": st.sampled_from(["Skip", "Queue", "Concurrent"]),
                "retry": st.fixed_dictionaries(
                    {"max_retries": st.integers(0, 100), "delay_seconds": st.integers(0, 86400)}
                ),
            }
        ),
    },
    optional={"name": _texts},
)


@settings(max_examples=150, deadline=None)
@given(_definitions)
def test_any_valid_definition_round_trips_exactly(doc: dict[str, Any]) -> None:
    parsed = parse_definition(doc, LIMITS)
    assert definition_to_json(parsed) == doc
    assert parse_definition(definition_to_json(parsed), LIMITS) == parsed
