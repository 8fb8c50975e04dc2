"""RunnerStore compaction, snapshot install and the store-format rule (docs/store.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.raft.snapshot import Snapshot
from appliance.store import runner_store
from appliance.store.errors import StoreRefused
from appliance.store.snapshot_format import decode_parts, encode_parts
from appliance.store.versions import (
    READER_VERSION_BASELINE,
    READER_VERSION_CANCELLING,
    READER_VERSION_COMPACTED,
    RUNNER_FILE_NAME,
)
from migrations_guard import decide, inspect_store
from tests.store.helpers import DIGEST, open_runner, raw_execute, raw_query

VOTERS = ("n1", "n2", "n3")
PAYLOAD = b"\x01" + b"x" * 1500  # about one occurrence's worth


def filled(data_dir: Path, entries: int = 2000) -> None:
    with open_runner(data_dir) as store:
        for start in range(1, entries + 1, 100):
            store.persist(
                term=1,
                voted_for="n1",
                entries=[(i, 1, PAYLOAD) for i in range(start, min(start + 100, entries + 1))],
            )
        store.save_transition(entries, {"meta": b'{"epoch":1}', "schedule/1": b'{"n":1}'})


def test_compaction_moves_the_first_index_and_raises_the_reader_version(data_dir: Path) -> None:
    filled(data_dir)
    with open_runner(data_dir) as store:
        assert store.min_reader_version() == READER_VERSION_BASELINE
        store.compact(1500, 1, VOTERS)
        assert store.snapshot_meta() == (1500, 1)
        assert (store.first_index(), store.last_index()) == (1501, 2000)
        assert store.term_at(1500) == 1 and store.term_at(1499) is None
        assert store.entries(1, 1503) == [(1501, 1, PAYLOAD), (1502, 1, PAYLOAD)]
        assert store.log_bytes() == 500 * len(PAYLOAD)
        assert store.min_reader_version() == READER_VERSION_COMPACTED
        # The rows are still there until reclaimed: deleting them is the reclaimer's job.
        assert raw_query(data_dir / RUNNER_FILE_NAME, "SELECT count(*) FROM log") == [(2000,)]
    with open_runner(data_dir) as store:  # and all of it survives a reopen
        assert (store.first_index(), store.last_index()) == (1501, 2000)
        assert store.term_at(1500) == 1 and store.snapshot_voters() == VOTERS


def test_reclaim_deletes_in_chunks_and_a_new_store_shrinks(data_dir: Path) -> None:
    filled(data_dir)
    db = data_dir / RUNNER_FILE_NAME
    with open_runner(data_dir) as store:
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before_bytes = db.stat().st_size
        store.compact(1900, 1, VOTERS)
        chunks = 0
        while store.reclaim(256):
            chunks += 1
        # 8 chunks of deletion, then incremental-vacuum steps while over half the file is free
        assert chunks >= 1900 // 256
        assert not store.reclaim(256)
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        after_bytes = db.stat().st_size
    assert raw_query(db, "SELECT min(idx), count(*) FROM log") == [(1901, 100)]
    assert raw_query(db, "PRAGMA auto_vacuum") == [(2,)]  # INCREMENTAL, for new stores
    # Down to the used pages plus at most 1 MiB (VACUUM_FREE_PAGES_MIN) or half the file free.
    assert after_bytes < before_bytes * 0.3, (before_bytes, after_bytes)


def test_compaction_is_refused_beyond_the_checkpoint_and_with_a_wrong_term(data_dir: Path) -> None:
    filled(data_dir, 200)
    with open_runner(data_dir) as store:
        store.save_transition(200, {})
        with pytest.raises(ValueError, match="beyond the checkpoint"):
            store.compact(201, 1, VOTERS)
        with pytest.raises(ValueError, match="not the term"):
            store.compact(100, 2, VOTERS)
        store.compact(100, 1, VOTERS)
        store.compact(50, 1, VOTERS)  # below the point: nothing to do
        assert store.snapshot_meta() == (100, 1)
        with pytest.raises(ValueError, match="at or below the compacted index"):
            store.persist(term=1, voted_for="n1", truncate_from=100)


def test_a_compacted_store_never_lowers_its_reader_version(data_dir: Path) -> None:
    filled(data_dir, 10)
    with open_runner(data_dir) as store:
        store.compact(5, 1, VOTERS)
        store.save_transition(10, {}, min_reader_version=READER_VERSION_CANCELLING)
        assert store.min_reader_version() == READER_VERSION_COMPACTED
        store.set_min_reader_version(READER_VERSION_BASELINE)
        assert store.min_reader_version() == READER_VERSION_COMPACTED


def test_an_older_binary_refuses_a_compacted_store_and_this_one_opens_it(data_dir: Path) -> None:
    filled(data_dir, 10)
    with open_runner(data_dir) as store:
        store.compact(5, 1, VOTERS)
    facts = inspect_store(data_dir)
    assert facts.problems == ()
    assert facts.summary["snapshot_index"] == 5 and facts.summary["log_first_index"] == 6
    assert facts.summary["log_reclaimable_entries"] == 5
    # An older binary reads up to 2 (cancellation states): the same guard refuses it.
    old = decide(facts, DIGEST, READER_VERSION_CANCELLING, expected_kind="runner")
    assert not old.allowed
    assert "needs reader version 3 but this binary reads up to 2" in old.message
    assert "compacted log" in old.message
    assert decide(facts, DIGEST, READER_VERSION_COMPACTED, expected_kind="runner").allowed


def test_an_existing_store_opens_unchanged_until_its_first_compaction(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store as the previous binary made it: no auto_vacuum, reader version 1, no snapshot row.
    monkeypatch.setattr(runner_store, "RUNNER_CREATE_PRAGMAS", ())
    filled(data_dir, 300)
    monkeypatch.undo()
    db = data_dir / RUNNER_FILE_NAME
    # Every open numbers its session in meta (store/session.py: lost-commit detection); apart
    # from that one row, opening adds nothing: no table, no snapshot row, no pragma change.
    outside_sessions = (
        "SELECT key, value FROM meta WHERE key != 'open_session' ORDER BY key",
        "SELECT name, sql FROM sqlite_master ORDER BY name",
        "SELECT count(*), min(idx), max(idx), sum(length(payload)) FROM log",
        "SELECT name, length(data) FROM checkpoint_part ORDER BY name",
        "PRAGMA auto_vacuum",
    )
    before = [raw_query(db, q) for q in outside_sessions]
    with open_runner(data_dir) as store:
        assert store.snapshot_meta() == (0, 0)
        assert store.min_reader_version() == READER_VERSION_BASELINE
    assert [raw_query(db, q) for q in outside_sessions] == before
    assert raw_query(db, "SELECT key FROM meta WHERE key = 'snapshot'") == []
    assert raw_query(db, "PRAGMA auto_vacuum") == [(0,)]  # its format is left as it was
    with open_runner(data_dir) as store:
        store.compact(200, 1, VOTERS)
        while store.reclaim(256):
            pass
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = db.stat().st_size
        # Freed pages are reused by later appends: the file does not grow for them.
        store.persist(term=1, voted_for="n1", entries=[(i, 1, PAYLOAD) for i in range(301, 451)])
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert db.stat().st_size <= size
    assert raw_query(db, "PRAGMA auto_vacuum") == [(0,)]


def test_snapshot_is_the_checkpoint_and_install_replaces_checkpoint_and_log(
    tmp_path: Path,
) -> None:
    leader_dir, follower_dir = tmp_path / "leader", tmp_path / "follower"
    filled(leader_dir, 50)
    with open_runner(leader_dir) as leader:
        index, term, data = leader.snapshot()
        assert (index, term) == (50, 1)
        assert decode_parts(data) == leader.load_checkpoint()[1]
    filled(follower_dir, 20)
    with open_runner(follower_dir) as follower:
        follower.install_snapshot(Snapshot(index, term, VOTERS, data))
        assert follower.load_checkpoint() == (50, decode_parts(data))
        assert (follower.first_index(), follower.last_index()) == (51, 50)
        assert follower.term_at(50) == 1 and follower.entries(1, 100) == []
        assert follower.min_reader_version() == READER_VERSION_COMPACTED
        follower.persist(term=2, voted_for="n1", entries=[(51, 2, PAYLOAD)])
        with pytest.raises(ValueError, match="not newer"):
            follower.install_snapshot(Snapshot(40, 1, VOTERS, data))
        with pytest.raises(ValueError, match="malformed"):
            follower.install_snapshot(Snapshot(60, 2, VOTERS, data[:-1]))
    with open_runner(follower_dir) as follower:
        assert (follower.first_index(), follower.last_index()) == (51, 51)
        assert follower.snapshot_meta() == (50, 1)
    assert inspect_store(follower_dir).problems == ()


def test_the_snapshot_format_refuses_what_it_did_not_write() -> None:
    parts = {"a": b"1", "b/2": b"", "z": b"\x00" * 3}
    data = encode_parts(parts)
    assert decode_parts(data) == parts
    for bad, why in (
        (b"NOTSNAP" + data[7:], "magic"),
        (data + b"x", "trailing"),
        (data[:-1], "truncated"),
    ):
        with pytest.raises(ValueError, match=why):
            decode_parts(bad)


def test_the_guard_flags_a_gap_after_the_snapshot_and_a_checkpoint_below_it(
    data_dir: Path,
) -> None:
    filled(data_dir, 20)
    with open_runner(data_dir) as store:
        store.compact(10, 1, VOTERS)
    db = data_dir / RUNNER_FILE_NAME
    raw_execute(db, "DELETE FROM log WHERE idx = 11")
    problems = " ".join(inspect_store(data_dir).problems)
    assert "resumes at entry 12, not right after its snapshot at 10" in problems
    with pytest.raises(StoreRefused, match="resumes at entry 12"):
        open_runner(data_dir)
