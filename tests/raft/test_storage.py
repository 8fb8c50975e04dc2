"""The LogStorage contract, run against the in-memory store (and any store passed in later)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.canonical import canonical_digest
from appliance.raft import LogStorage, MemoryLogStorage, RaftInvariantError

CONTRACT = {"voters": {"n1": "127.0.0.1:7001"}, "limits": {}, "schedules": [], "remote": {}}
REFUSED = (RaftInvariantError, ValueError)


@pytest.fixture(params=["memory", "runner_store"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LogStorage]:
    if request.param == "memory":
        yield MemoryLogStorage()
        return
    from appliance.store.runner_store import RunnerStore

    store = RunnerStore.create_or_open(
        tmp_path, contract=CONTRACT, contract_digest=canonical_digest(CONTRACT)
    )
    yield store
    store.close()


def test_an_empty_store_has_no_entries_and_zero_hard_state(storage) -> None:  # type: ignore[no-untyped-def]
    assert storage.hard_state() == (0, None)
    assert (storage.first_index(), storage.last_index()) == (0, 0)
    assert storage.term_at(1) is None
    assert storage.entries(1, 10) == []


def test_persist_stores_hard_state_and_appends(storage) -> None:  # type: ignore[no-untyped-def]
    storage.persist(term=2, voted_for="n1", entries=[(1, 1, b"a"), (2, 2, b"b")])
    assert storage.hard_state() == (2, "n1")
    assert (storage.first_index(), storage.last_index()) == (1, 2)
    assert storage.term_at(2) == 2
    assert storage.entries(1, 3) == [(1, 1, b"a"), (2, 2, b"b")]


def test_truncation_drops_the_suffix_before_appending(storage) -> None:  # type: ignore[no-untyped-def]
    storage.persist(term=1, voted_for=None, entries=[(i, 1, b"x") for i in range(1, 6)])
    storage.persist(term=2, voted_for=None, truncate_from=3, entries=[(3, 2, b"y")])
    assert storage.last_index() == 3
    assert storage.entries(1, 10) == [(1, 1, b"x"), (2, 1, b"x"), (3, 2, b"y")]


def test_entries_stop_at_max_bytes_but_always_return_one(storage) -> None:  # type: ignore[no-untyped-def]
    storage.persist(term=1, voted_for=None, entries=[(i, 1, b"12345") for i in range(1, 5)])
    assert len(storage.entries(1, 5, max_bytes=10)) == 2  # exactly at the limit
    assert len(storage.entries(1, 5, max_bytes=9)) == 1  # one byte short of the second
    assert len(storage.entries(1, 5, max_bytes=1)) == 1  # the first always goes


def test_a_gap_or_a_term_going_back_is_refused_and_changes_nothing(storage) -> None:  # type: ignore[no-untyped-def]
    storage.persist(term=3, voted_for=None, entries=[(1, 1, b"a")])
    with pytest.raises(REFUSED):
        storage.persist(term=3, voted_for=None, entries=[(3, 1, b"c")])
    with pytest.raises(REFUSED):
        storage.persist(term=2, voted_for=None)
    assert storage.hard_state() == (3, None)
    assert storage.last_index() == 1
