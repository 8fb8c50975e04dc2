"""RunnerStore's in-memory log tail: always equal to the newest rows on disk, and bounded.

Whether a read was served by the tail or by disk is observed from outside: a row damaged on disk
behind the store's back raises ``StoreCorrupt`` when it is read from disk (checksums are still
verified there) and does not when the tail serves it.
"""

from __future__ import annotations

import random
from pathlib import Path

import apsw
import pytest

from appliance.store.errors import StoreCorrupt, StoreRefused
from appliance.store.runner_store import LOG_TAIL_BYTES_MAX, LOG_TAIL_ENTRIES_MAX, RunnerStore
from appliance.store.versions import RUNNER_FILE_NAME
from tests.store.helpers import CONTRACT, DIGEST, flip_first_byte, raw_execute, raw_query


def open_with_tail(data_dir: Path, *, entries_max: int, bytes_max: int) -> RunnerStore:
    return RunnerStore.create_or_open(
        data_dir,
        contract=CONTRACT,
        contract_digest=DIGEST,
        log_tail_entries_max=entries_max,
        log_tail_bytes_max=bytes_max,
    )


def damage_payload(data_dir: Path, index: int) -> None:
    path = data_dir / RUNNER_FILE_NAME
    payload = raw_query(path, "SELECT payload FROM log WHERE idx = ?", (index,))[0][0]
    raw_execute(path, "UPDATE log SET payload = ? WHERE idx = ?", (flip_first_byte(payload), index))


def served_from_tail(store: RunnerStore, index: int) -> bool:
    """Call only after damaging ``index`` on disk: True when the read did not touch the row."""
    try:
        store.term_at(index)
    except StoreCorrupt:
        return False
    return True


def assert_agrees_with_disk(store: RunnerStore, data_dir: Path) -> None:
    rows = raw_query(data_dir / RUNNER_FILE_NAME, "SELECT idx, term, payload FROM log ORDER BY idx")
    last = rows[-1][0] if rows else 0
    assert store.last_index() == last
    assert store.entries(0, last + 2) == [tuple(r) for r in rows]
    for lo in range(1, last + 2):
        assert store.entries(lo, last + 2) == [tuple(r) for r in rows if r[0] >= lo]
        assert store.entries(lo, lo + 2, max_bytes=1) == [tuple(r) for r in rows if r[0] == lo]
    for index, term, _payload in rows:
        assert store.term_at(index) == term
    assert store.term_at(last + 1) is None
    assert store.term_at(0) is None


def test_the_tail_agrees_with_the_database_after_appends_truncations_and_reopen(
    data_dir: Path,
) -> None:
    rng = random.Random(4)
    store = open_with_tail(data_dir, entries_max=6, bytes_max=60)
    term = 1
    try:
        for _ in range(60):
            last = store.last_index()
            truncate_from = rng.randint(1, last + 1) if last and rng.random() < 0.3 else None
            base = last if truncate_from is None else min(last, truncate_from - 1)
            previous = store.term_at(base) if base else 1
            term += rng.random() < 0.2
            entries = [
                (base + 1 + k, max(previous, term), bytes(rng.randrange(256) for _ in range(8)))
                for k in range(rng.randint(0, 4))
            ]
            store.persist(term=term, voted_for=None, truncate_from=truncate_from, entries=entries)
            assert_agrees_with_disk(store, data_dir)
    finally:
        store.close()
    with open_with_tail(data_dir, entries_max=6, bytes_max=60) as reopened:
        assert_agrees_with_disk(reopened, data_dir)


def test_the_tail_holds_exactly_entries_max_entries(data_dir: Path) -> None:
    with open_with_tail(data_dir, entries_max=3, bytes_max=1_000) as store:
        store.persist(term=1, voted_for=None, entries=[(i, 1, b"x" * 10) for i in range(1, 6)])
        for index in (2, 3):
            damage_payload(data_dir, index)
        assert served_from_tail(store, 3)  # 3, 4, 5: exactly three entries
        assert not served_from_tail(store, 2)  # the fourth newest is read (and checked) on disk
        with pytest.raises(StoreCorrupt, match="log entry 2"):
            store.entries(2, 6)
        assert [e[0] for e in store.entries(3, 6)] == [3, 4, 5]


@pytest.mark.parametrize(("bytes_max", "newest_in_memory"), [(30, 3), (29, 2)])
def test_the_tail_holds_at_most_bytes_max_payload_bytes(
    data_dir: Path, bytes_max: int, newest_in_memory: int
) -> None:
    with open_with_tail(data_dir, entries_max=100, bytes_max=bytes_max) as store:
        store.persist(term=1, voted_for=None, entries=[(i, 1, b"x" * 10) for i in range(1, 6)])
        damage_payload(data_dir, 3)
        # 3 + 4 + 5 = exactly 30 bytes stay in memory; with one byte less only 4 and 5 do.
        assert served_from_tail(store, 3) is (newest_in_memory == 3)
        assert store.entries(4, 6) == [(4, 1, b"x" * 10), (5, 1, b"x" * 10)]


def test_an_entry_larger_than_the_byte_bound_is_read_from_disk(data_dir: Path) -> None:
    with open_with_tail(data_dir, entries_max=100, bytes_max=30) as store:
        store.persist(term=1, voted_for=None, entries=[(1, 1, b"y" * 31)])
        assert store.entries(1, 2) == [(1, 1, b"y" * 31)]
        store.persist(term=1, voted_for=None, entries=[(2, 1, b"z" * 30)])
        assert store.entries(1, 3) == [(1, 1, b"y" * 31), (2, 1, b"z" * 30)]
        for index in (1, 2):
            damage_payload(data_dir, index)
        assert not served_from_tail(store, 1)
        assert served_from_tail(store, 2)


def test_a_tail_of_zero_entries_reads_everything_from_disk(data_dir: Path) -> None:
    with open_with_tail(data_dir, entries_max=0, bytes_max=1_000) as store:
        store.persist(term=1, voted_for=None, entries=[(1, 1, b"a"), (2, 1, b"b")])
        assert store.entries(1, 3) == [(1, 1, b"a"), (2, 1, b"b")]
        damage_payload(data_dir, 2)
        assert not served_from_tail(store, 2)


def test_reopening_loads_the_newest_entries_and_verifies_them(data_dir: Path) -> None:
    with open_with_tail(data_dir, entries_max=2, bytes_max=1_000) as store:
        store.persist(term=2, voted_for=None, entries=[(i, 2, b"p%d" % i) for i in range(1, 5)])
    with open_with_tail(data_dir, entries_max=2, bytes_max=1_000) as store:
        assert store.entries(3, 5) == [(3, 2, b"p3"), (4, 2, b"p4")]
        for index in (2, 3):
            damage_payload(data_dir, index)
        assert served_from_tail(store, 3)
        assert not served_from_tail(store, 2)
    # Damaged rows are refused at the next open (before the tail could load them).
    with pytest.raises(StoreRefused, match="fails its checksum"):
        open_with_tail(data_dir, entries_max=2, bytes_max=1_000)


def test_truncation_removes_the_suffix_from_the_tail_in_the_same_call(data_dir: Path) -> None:
    with open_with_tail(data_dir, entries_max=10, bytes_max=1_000) as store:
        store.persist(term=1, voted_for=None, entries=[(i, 1, b"old") for i in range(1, 6)])
        store.persist(term=2, voted_for=None, truncate_from=3, entries=[(3, 2, b"new")])
        assert store.last_index() == 3
        assert store.term_at(4) is None
        assert store.entries(1, 10) == [(1, 1, b"old"), (2, 1, b"old"), (3, 2, b"new")]
        store.persist(term=2, voted_for=None, truncate_from=1)
        assert (store.last_index(), store.entries(1, 10), store.term_at(1)) == (0, [], None)


def test_a_persist_whose_transaction_fails_leaves_the_tail_unchanged(data_dir: Path) -> None:
    with open_with_tail(data_dir, entries_max=10, bytes_max=1_000) as store:
        store.persist(term=1, voted_for=None, entries=[(1, 1, b"a"), (2, 1, b"b")])
        raw_execute(
            data_dir / RUNNER_FILE_NAME,
            "CREATE TRIGGER refuse BEFORE INSERT ON log BEGIN SELECT RAISE(ABORT, 'no'); END",
        )
        with pytest.raises(apsw.ConstraintError):
            store.persist(term=1, voted_for=None, truncate_from=2, entries=[(2, 1, b"c")])
        with pytest.raises(ValueError, match="does not continue"):
            store.persist(term=1, voted_for=None, entries=[(5, 1, b"gap")])
        assert store.last_index() == 2
        assert store.entries(1, 3) == [(1, 1, b"a"), (2, 1, b"b")]


def test_negative_tail_bounds_are_refused(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="log tail"):
        open_with_tail(data_dir, entries_max=-1, bytes_max=1_000)
    with pytest.raises(ValueError, match="log tail"):
        open_with_tail(data_dir, entries_max=1, bytes_max=-1)


def test_the_default_tail_is_bounded_in_entries_and_bytes() -> None:
    assert 1_000 <= LOG_TAIL_ENTRIES_MAX <= 10_000
    assert LOG_TAIL_BYTES_MAX <= 16 * 1024 * 1024
