"""Opening a store preallocates its -wal file (blocks written once, so a commit's fsync does not
also commit new-block metadata), and that changes nothing SQLite reads: commits land in it,
survive a reopen, and an existing -wal is never touched. Recovery from a SIGKILL with a
preallocated -wal is covered by test_crash_safety.py (every open there preallocates)."""

from __future__ import annotations

import shutil
from pathlib import Path

from appliance.store.sqlite import WAL_PREALLOCATE_BYTES, preallocate_wal
from appliance.store.versions import RUNNER_FILE_NAME
from migrations_guard import inspect_store
from tests.store.helpers import open_runner


def wal_of(data_dir: Path) -> Path:
    return data_dir / (RUNNER_FILE_NAME + "-wal")


def test_an_opened_store_has_a_preallocated_wal_that_commits_overwrite_without_growing_it(
    data_dir: Path,
) -> None:
    with open_runner(data_dir) as store:
        assert wal_of(data_dir).stat().st_size == WAL_PREALLOCATE_BYTES
        for index in range(1, 201):
            store.persist(term=1, voted_for=None, entries=[(index, 1, b"x" * 100)])
        assert wal_of(data_dir).stat().st_size == WAL_PREALLOCATE_BYTES
        assert wal_of(data_dir).read_bytes()[:4] != bytes(4)  # SQLite wrote its header over it
    with open_runner(data_dir) as again:
        assert again.last_index() == 200
        assert again.entries(200, 201)[0][2] == b"x" * 100


def test_a_store_killed_before_its_first_commit_after_an_open_inspects_and_opens_cleanly(
    tmp_path: Path,
) -> None:
    """Killed in an open right after the -wal was preallocated (before the open's own first
    commit, its session number): beside the store lies a -wal of zeros."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    with open_runner(live) as store:
        store.persist(term=3, voted_for="n2", entries=[(1, 3, b"kept")])
    crashed.mkdir()
    for path in live.iterdir():  # the files of the closed store
        if path.is_file():
            shutil.copy2(path, crashed / path.name)
    assert preallocate_wal(crashed / RUNNER_FILE_NAME) is True  # then the "kill"
    assert (crashed / (RUNNER_FILE_NAME + "-wal")).read_bytes() == bytes(WAL_PREALLOCATE_BYTES)
    facts = inspect_store(crashed)
    assert facts.problems == ()
    with open_runner(crashed) as store:
        assert store.hard_state() == (3, "n2")
        assert store.entries(1, 2) == [(1, 3, b"kept")]
        store.persist(term=3, voted_for="n2", entries=[(2, 3, b"after")])
    with open_runner(crashed) as store:
        assert store.last_index() == 2


def test_a_wal_that_already_exists_is_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    wal = tmp_path / "store.db-wal"
    wal.write_bytes(b"frames of a live or crashed writer")
    assert preallocate_wal(db, size=4096) is False
    assert wal.read_bytes() == b"frames of a live or crashed writer"


def test_a_preallocation_cut_short_by_a_crash_is_discarded_and_redone(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    (tmp_path / "store.db-wal.preallocating").write_bytes(b"half")
    assert preallocate_wal(db, size=10_000) is True
    assert (tmp_path / "store.db-wal").read_bytes() == bytes(10_000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.db-wal"]
