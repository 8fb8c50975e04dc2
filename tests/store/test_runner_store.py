"""RunnerStore: sealed contract, Raft hard state and log, incremental checkpoint, lock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from appliance.core.canonical import canonical_json
from appliance.store.errors import StoreCorrupt, StoreRefused
from appliance.store.runner_store import RunnerStore
from appliance.store.sqlite import transaction
from appliance.store.versions import (
    BINARY_READER_VERSION,
    READER_VERSION_BASELINE,
    READER_VERSION_CANCELLING,
    RUNNER_FILE_NAME,
)
from tests.store.helpers import (
    CONTRACT,
    DIGEST,
    flip_first_byte,
    open_runner,
    populated_runner,
    raw_execute,
    raw_query,
)


def test_first_start_creates_the_store_and_seals_the_canonical_contract(data_dir: Path) -> None:
    with open_runner(data_dir) as store:
        assert store.created
        assert store.hard_state() == (0, None)
        assert (store.first_index(), store.last_index()) == (0, 0)
        assert store.load_checkpoint() == (0, {})
        assert store.min_reader_version() == READER_VERSION_BASELINE
    rows = raw_query(data_dir / RUNNER_FILE_NAME, "SELECT canonical, digest FROM contract")
    assert rows == [(canonical_json(CONTRACT), DIGEST)]


def test_reopening_with_the_same_contract_keeps_every_write(data_dir: Path) -> None:
    populated_runner(data_dir)
    with open_runner(data_dir) as store:
        assert not store.created
        assert store.hard_state() == (2, "n1")
        assert (store.first_index(), store.last_index()) == (1, 3)
        assert store.term_at(3) == 2
        assert store.load_checkpoint() == (
            2,
            {"meta": b'{"epoch":1}', "schedule/1": b'{"name":"s"}'},
        )


def test_a_digest_that_is_not_the_contracts_digest_is_a_caller_error(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="contract_digest"):
        RunnerStore.create_or_open(data_dir, contract=CONTRACT, contract_digest="0" * 64)
    assert not (data_dir / RUNNER_FILE_NAME).exists()


def test_persist_truncates_the_suffix_and_appends_in_one_call(data_dir: Path) -> None:
    with open_runner(data_dir) as store:
        store.persist(term=1, voted_for="n2", entries=[(1, 1, b"a"), (2, 1, b"b"), (3, 1, b"c")])
        store.persist(term=3, voted_for=None, truncate_from=2, entries=[(2, 3, b"B")])
        assert store.hard_state() == (3, None)
        assert store.entries(1, 100) == [(1, 1, b"a"), (2, 3, b"B")]
        assert store.term_at(3) is None
        assert store.last_index() == 2


def test_truncating_the_whole_log_empties_it(data_dir: Path) -> None:
    with open_runner(data_dir) as store:
        store.persist(term=1, voted_for=None, entries=[(1, 1, b"a"), (2, 1, b"b")])
        store.persist(term=1, voted_for=None, truncate_from=1)
        assert (store.first_index(), store.last_index()) == (0, 0)
        assert store.entries(1, 10) == []
        store.persist(term=1, voted_for=None, entries=[(1, 1, b"again")])
        assert (store.first_index(), store.last_index()) == (1, 1)


def test_entries_that_do_not_continue_the_log_are_refused_and_nothing_is_written(
    data_dir: Path,
) -> None:
    with open_runner(data_dir) as store:
        store.persist(term=1, voted_for=None, entries=[(1, 1, b"a")])
        with pytest.raises(ValueError, match="does not continue"):
            store.persist(term=2, voted_for="n1", entries=[(3, 2, b"gap")])
        with pytest.raises(ValueError, match="does not continue"):
            store.persist(term=2, voted_for="n1", entries=[(2, 2, b"x"), (4, 2, b"y")])
        assert store.hard_state() == (1, None)
        assert store.last_index() == 1


def test_the_persisted_term_never_decreases(data_dir: Path) -> None:
    with open_runner(data_dir) as store:
        store.persist(term=5, voted_for="n1")
        with pytest.raises(ValueError, match="below the persisted term"):
            store.persist(term=4, voted_for="n2")
        assert store.hard_state() == (5, "n1")


def test_entries_stop_at_max_bytes_exactly_at_the_limit_and_return_at_least_one(
    data_dir: Path,
) -> None:
    with open_runner(data_dir) as store:
        store.persist(term=1, voted_for=None, entries=[(i, 1, b"x" * 10) for i in range(1, 6)])
        assert [e[0] for e in store.entries(1, 6, max_bytes=30)] == [1, 2, 3]  # exactly 30 fits
        assert [e[0] for e in store.entries(1, 6, max_bytes=29)] == [1, 2]  # one over does not
        assert [e[0] for e in store.entries(2, 6, max_bytes=1)] == [2]  # always one entry
        assert [e[0] for e in store.entries(2, 4)] == [2, 3]  # hi is exclusive
        assert store.entries(6, 10) == []


def test_log_range_reads_and_suffix_truncation_use_the_primary_key(data_dir: Path) -> None:
    populated_runner(data_dir)
    path = data_dir / RUNNER_FILE_NAME
    for sql in (
        "EXPLAIN QUERY PLAN SELECT idx, term, payload, checksum FROM log "
        "WHERE idx >= 1 AND idx < 3 ORDER BY idx",
        "EXPLAIN QUERY PLAN DELETE FROM log WHERE idx >= 2",
    ):
        plan = " ".join(str(row[-1]) for row in raw_query(path, sql))
        assert "INTEGER PRIMARY KEY" in plan, plan
        assert "SCAN log" not in plan.replace("USING INTEGER PRIMARY KEY", ""), plan


def test_a_transition_writes_only_the_parts_it_touched(data_dir: Path) -> None:
    with open_runner(data_dir) as store:
        store.save_transition(1, {"meta": b"{}", "occurrence/1": b"1", "occurrence/2": b"2"})
        store.save_transition(2, {"occurrence/2": b"22"}, deletes=["occurrence/1"])
        assert store.load_checkpoint() == (2, {"meta": b"{}", "occurrence/2": b"22"})
        assert store.checkpoint_summary() == (2, 4)


def test_a_part_both_upserted_and_deleted_is_refused(data_dir: Path) -> None:
    with open_runner(data_dir) as store, pytest.raises(ValueError, match="both"):
        store.save_transition(1, {"a": b"1"}, deletes=["a"])


def test_the_applied_index_never_decreases(data_dir: Path) -> None:
    with open_runner(data_dir) as store:
        store.save_transition(5, {"meta": b"{}"})
        store.save_transition(5, {"meta": b"{}"})  # equal is allowed
        with pytest.raises(ValueError, match="below the stored"):
            store.save_transition(4, {"meta": b"{}"})
        assert store.applied_index() == 5


def test_min_reader_version_accepts_exactly_the_versions_this_binary_reads(
    data_dir: Path,
) -> None:
    with open_runner(data_dir) as store:
        store.set_min_reader_version(READER_VERSION_CANCELLING)
        assert store.min_reader_version() == READER_VERSION_CANCELLING
        store.set_min_reader_version(READER_VERSION_BASELINE)
        assert store.min_reader_version() == READER_VERSION_BASELINE
        for bad in (READER_VERSION_BASELINE - 1, BINARY_READER_VERSION + 1):
            with pytest.raises(ValueError, match="min reader version"):
                store.set_min_reader_version(bad)
        store.save_transition(1, {"occurrence/9": b'{"state":"Cancelling"}'}, min_reader_version=2)
        assert store.min_reader_version() == 2


def test_store_uses_wal_with_synchronous_full(data_dir: Path) -> None:
    with open_runner(data_dir) as store:
        db = store._db
        assert db.execute("PRAGMA journal_mode").fetchall() == [("wal",)]
        assert db.execute("PRAGMA synchronous").fetchall() == [(2,)]  # 2 = FULL


def test_an_exception_inside_a_transaction_rolls_everything_back(data_dir: Path) -> None:
    with open_runner(data_dir) as store:
        db = store._db
        with pytest.raises(RuntimeError), transaction(db):
            db.execute("DELETE FROM checkpoint_part")
            db.execute("UPDATE checkpoint SET applied_index = 99")
            raise RuntimeError("half-way")
        assert store.applied_index() == 0


def test_damage_found_while_open_raises_store_corrupt(data_dir: Path) -> None:
    populated_runner(data_dir)
    path = data_dir / RUNNER_FILE_NAME
    # No in-memory log tail: every log read goes to disk (the tail's own rule is in
    # test_runner_log_tail.py: rows below it are still read, and verified, from disk).
    with RunnerStore.create_or_open(
        data_dir, contract=CONTRACT, contract_digest=DIGEST, log_tail_entries_max=0
    ) as store:
        payload = raw_query(path, "SELECT payload FROM log WHERE idx = 2")[0][0]
        raw_execute(path, "UPDATE log SET payload = ? WHERE idx = 2", (flip_first_byte(payload),))
        part = raw_query(path, "SELECT data FROM checkpoint_part WHERE name = 'meta'")[0][0]
        raw_execute(
            path,
            "UPDATE checkpoint_part SET data = ? WHERE name = 'meta'",
            (flip_first_byte(part),),
        )
        with pytest.raises(StoreCorrupt, match="log entry 2"):
            store.entries(1, 4)
        with pytest.raises(StoreCorrupt, match="log entry 2"):
            store.term_at(2)
        assert store.term_at(1) == 1
        with pytest.raises(StoreCorrupt, match="'meta'"):
            store.load_checkpoint()


def test_a_second_opener_in_the_same_process_is_refused_until_close(data_dir: Path) -> None:
    first = open_runner(data_dir)
    with pytest.raises(StoreRefused, match="in use by another live process"):
        open_runner(data_dir)
    first.close()
    open_runner(data_dir).close()


HOLDER = """
import sys
from tests.store.helpers import open_runner
from pathlib import Path
store = open_runner(Path(sys.argv[1]))
print("open", flush=True)
sys.stdin.read()
store.close()
"""


def test_a_store_held_by_another_live_process_is_refused_not_shared(data_dir: Path) -> None:
    populated_runner(data_dir)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with pytest.raises(StoreRefused, match="in use by another live process"):
            open_runner(data_dir)
    finally:
        holder.communicate("", timeout=30)
    with open_runner(data_dir) as store:
        assert store.last_index() == 3


def test_calls_from_several_threads_are_serialised_on_the_one_connection(data_dir: Path) -> None:
    import threading

    errors: list[BaseException] = []

    with open_runner(data_dir) as store:

        def writer(offset: int) -> None:
            try:
                for i in range(25):
                    store.save_transition(0, {f"t{offset}/{i}": b"{}"})
                    store.load_checkpoint()
                    store.checkpoint_summary()
            except BaseException as exc:  # collected and asserted on below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        assert store.checkpoint_summary() == (100, 200)


def test_a_failed_commit_raises_store_write_failed_and_keeps_nothing(tmp_path: Path) -> None:
    from appliance.store.errors import StoreWriteFailed
    from appliance.store.sqlite import open_writable

    conn = open_writable(tmp_path / "scratch.sqlite3", create=True)
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER "
        "REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    with pytest.raises(StoreWriteFailed, match="commit failed"), transaction(conn):
        conn.execute("INSERT INTO child VALUES (1, 42)")  # violation only seen at COMMIT
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM child").fetchall() == [(0,)]
    conn.close()


def test_log_terms_never_decrease_and_never_exceed_the_current_term(data_dir: Path) -> None:
    with open_runner(data_dir) as store:
        store.persist(term=3, voted_for=None, entries=[(1, 2, b"a"), (2, 3, b"b")])  # at term: ok
        with pytest.raises(ValueError, match="never exceed"):
            store.persist(term=3, voted_for=None, entries=[(3, 4, b"c")])
        with pytest.raises(ValueError, match="never decrease"):
            store.persist(term=3, voted_for=None, entries=[(3, 2, b"c")])
        store.persist(term=3, voted_for=None, truncate_from=2, entries=[(2, 2, b"B")])
        assert store.entries(1, 10) == [(1, 2, b"a"), (2, 2, b"B")]


def test_a_part_name_is_at_most_256_bytes(data_dir: Path) -> None:
    from appliance.store.runner_store import PART_NAME_BYTES_MAX

    with open_runner(data_dir) as store:
        store.save_transition(1, {"p" * PART_NAME_BYTES_MAX: b"{}"})
        with pytest.raises(ValueError, match="over 256 bytes"):
            store.save_transition(2, {"p" * (PART_NAME_BYTES_MAX + 1): b"{}"})
        with pytest.raises(ValueError, match="non-empty"):
            store.save_transition(2, {"": b"{}"})
        assert store.checkpoint_summary() == (1, 2)


def test_a_creation_interrupted_before_sealing_is_redone_from_scratch(data_dir: Path) -> None:
    data_dir.mkdir()
    staging = data_dir / (RUNNER_FILE_NAME + ".creating")
    staging.write_bytes(b"half-written by a creation that crashed")
    (data_dir / (RUNNER_FILE_NAME + ".creating-wal")).write_bytes(b"stale")
    with open_runner(data_dir) as store:
        assert store.created
    assert sorted(p.name for p in data_dir.iterdir()) == [
        "LOCK",
        RUNNER_FILE_NAME,
        RUNNER_FILE_NAME + "-session",
    ]
