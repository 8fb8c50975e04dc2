"""decide(): a pure function from facts to accept/refuse, one test per rule."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from appliance.store.versions import BINARY_READER_VERSION, KIND_RUNNER, KIND_WORKER
from migrations_guard import Decision, StoreFacts, decide, differing_keys

STORED = {"voters": {"n1": "a:1"}, "limits": {"running": 16}, "schedules": [], "remote": {}}
DIGEST = "d" * 64


def facts(**changes: Any) -> StoreFacts:
    base = StoreFacts(
        path="/data/runner.sqlite3",
        kind=KIND_RUNNER,
        schema_version=2,
        min_reader_version=1,
        created_by_version="0.1.0",
        contract_digest=DIGEST,
        contract=STORED,
        problems=(),
        wal_present=False,
    )
    return dataclasses.replace(base, **changes)


def test_a_healthy_store_with_the_configured_contract_is_accepted() -> None:
    decision = decide(facts(), DIGEST, BINARY_READER_VERSION, expected_kind=KIND_RUNNER)
    assert decision == Decision(allowed=True)
    assert decision.message == "store accepted"


def test_an_offline_check_without_a_configured_digest_only_judges_the_store() -> None:
    assert decide(facts(contract_digest="e" * 64), None, BINARY_READER_VERSION).allowed


def test_any_checksum_failure_refuses_and_lists_what_failed() -> None:
    decision = decide(
        facts(problems=("log entry 7 fails its checksum", "checkpoint part 'meta' fails")),
        DIGEST,
        BINARY_READER_VERSION,
    )
    assert not decision.allowed
    assert "log entry 7 fails its checksum; checkpoint part 'meta' fails" in decision.message
    assert "restore this data_dir from a backup" in decision.message


def test_a_long_problem_list_is_shortened_but_counted() -> None:
    problems = tuple(f"log entry {i} fails its checksum" for i in range(1, 26))
    decision = decide(facts(problems=problems), DIGEST, BINARY_READER_VERSION)
    assert "log entry 10 fails" in decision.message
    assert "log entry 11 fails" not in decision.message
    assert "and 15 more" in decision.message


@pytest.mark.parametrize("version", [1, 3, None])
def test_an_unknown_schema_version_is_refused(version: int | None) -> None:
    decision = decide(facts(schema_version=version), DIGEST, BINARY_READER_VERSION)
    assert not decision.allowed
    assert f"runner schema version {version}, which this binary does not know" in decision.message
    assert "it reads 2" in decision.message


def test_the_worker_schema_version_is_judged_by_the_worker_table() -> None:
    worker = facts(kind=KIND_WORKER, schema_version=1)
    assert decide(worker, DIGEST, BINARY_READER_VERSION).allowed
    assert not decide(dataclasses.replace(worker, schema_version=2), DIGEST, 2).allowed


def test_a_minimum_reader_exactly_at_the_binarys_reader_version_is_accepted() -> None:
    assert decide(facts(min_reader_version=2), DIGEST, binary_reader_version=2).allowed


def test_a_minimum_reader_one_above_the_binarys_reader_version_is_refused() -> None:
    decision = decide(facts(min_reader_version=2), DIGEST, binary_reader_version=1)
    assert not decision.allowed
    assert "needs reader version 2 but this binary reads up to 1" in decision.message
    assert "appliance 0.1.0 or later" in decision.message


def test_a_different_contract_digest_is_refused_naming_the_differing_keys() -> None:
    configured = {**STORED, "voters": {"n1": "a:2"}, "remote": {"url": "x"}}
    decision = decide(facts(), "e" * 64, BINARY_READER_VERSION, expected_contract=configured)
    assert not decision.allowed
    assert f"sealed with contract digest {DIGEST}" in decision.message
    assert "the configuration gives " + "e" * 64 in decision.message
    assert "(differing top-level keys: remote, voters)" in decision.message
    assert "restore the configuration it was sealed with" in decision.message


def test_a_different_digest_without_the_configured_contract_still_refuses() -> None:
    decision = decide(facts(), "e" * 64, BINARY_READER_VERSION)
    assert not decision.allowed
    assert "differing top-level keys" not in decision.message


def test_a_store_of_the_other_kind_is_refused() -> None:
    decision = decide(
        facts(kind=KIND_WORKER, schema_version=1), DIGEST, 2, expected_kind=KIND_RUNNER
    )
    assert not decision.allowed
    assert "is a worker store, not a runner store" in decision.message


def test_every_reason_is_reported_not_only_the_first() -> None:
    decision = decide(
        facts(
            schema_version=9,
            min_reader_version=BINARY_READER_VERSION + 1,
            problems=("x fails its checksum",),
        ),
        "e" * 64,
        BINARY_READER_VERSION,
    )
    assert len(decision.reasons) == 4


def test_differing_keys_includes_keys_only_one_side_has() -> None:
    assert differing_keys({"a": 1, "b": 2}, {"a": 1, "c": None}) == ["b", "c"]
    assert differing_keys({"a": 1}, {"a": 1}) == []
