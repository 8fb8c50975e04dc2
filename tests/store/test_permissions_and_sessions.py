"""Owner-only data_dirs and store files whatever the umask, and the open-session marker that
catches a store which lost committed transactions (its -wal deleted after a crash, an older copy
put back)."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.store.errors import StoreRefused
from appliance.store.versions import RUNNER_FILE_NAME, WORKER_FILE_NAME
from tests.store.helpers import open_runner, open_worker, populated_runner, raw_execute


@pytest.fixture
def loose_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def crash_image(live: Path, crashed: Path) -> None:
    """The data_dir's files as a SIGKILL would leave them (copied while the store is open)."""
    crashed.mkdir()
    for path in live.iterdir():
        if path.is_file():
            shutil.copy2(path, crashed / path.name)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
@pytest.mark.parametrize(
    "opener, name", [(open_runner, RUNNER_FILE_NAME), (open_worker, WORKER_FILE_NAME)]
)
def test_a_new_store_is_owner_only_whatever_the_umask(tmp_path, umask, opener, name):
    data_dir = tmp_path / "data"
    old = os.umask(umask)
    try:
        with opener(data_dir):
            assert mode(data_dir) == 0o700
            for suffix in ("", "-wal", "-shm", "-session"):
                assert mode(data_dir / (name + suffix)) == 0o600, suffix
            assert mode(data_dir / "LOCK") == 0o600
    finally:
        os.umask(old)
    assert mode(data_dir / name) == 0o600


def test_an_existing_loose_store_is_tightened_when_it_is_opened(tmp_path, loose_umask):
    data_dir = tmp_path / "data"
    with open_runner(data_dir) as store:
        store.persist(term=1, voted_for=None, entries=[(1, 1, b"x")])
    os.chmod(data_dir, 0o755)
    for path in data_dir.iterdir():
        os.chmod(path, 0o644)
    with open_runner(data_dir) as store:
        assert store.last_index() == 1
        assert mode(data_dir) == 0o700
        assert {p.name: mode(p) for p in data_dir.iterdir()} == {
            p.name: 0o600 for p in data_dir.iterdir()
        }


def test_a_crash_with_its_wal_intact_reopens_with_every_commit(tmp_path):
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    with open_runner(live) as store:
        store.persist(term=5, voted_for="n2", entries=[(1, 5, b"a"), (2, 5, b"b")])
        crash_image(live, crashed)
    with open_runner(crashed) as store:
        assert store.hard_state() == (5, "n2")
        assert store.last_index() == 2


def test_a_crashed_store_whose_wal_was_deleted_is_refused_and_points_to_recover(tmp_path):
    """Without the marker this store would open at term 0 and vote again in terms it voted in."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    with open_runner(live):
        pass  # a first, clean session: the store file holds its metadata
    with open_runner(live) as store:
        store.persist(term=5, voted_for="n2", entries=[(1, 5, b"a")])
        crash_image(live, crashed)
    (crashed / (RUNNER_FILE_NAME + "-wal")).unlink()
    (crashed / (RUNNER_FILE_NAME + "-shm")).unlink(missing_ok=True)
    with pytest.raises(StoreRefused) as refused:
        open_runner(crashed)
    message = str(refused.value)
    assert "lost committed transactions" in message
    assert "appliance admin store recover" in message
    assert "-wal" in message
    with pytest.raises(StoreRefused):  # refused again: the refusal changed nothing
        open_runner(crashed)


def test_an_older_copy_of_the_store_put_back_is_refused(tmp_path):
    data_dir, saved = tmp_path / "data", tmp_path / "saved.sqlite3"
    with open_runner(data_dir) as store:
        store.persist(term=1, voted_for=None, entries=[(1, 1, b"x")])
    shutil.copy2(data_dir / RUNNER_FILE_NAME, saved)  # session 1, cleanly closed
    with open_runner(data_dir) as store:
        store.persist(term=2, voted_for="n1", entries=[(2, 2, b"y")])
    shutil.copy2(saved, data_dir / RUNNER_FILE_NAME)
    with pytest.raises(StoreRefused, match="older than its last use"):
        open_runner(data_dir)


def test_clean_closes_and_reopens_count_sessions_and_stay_accepted(tmp_path):
    data_dir = tmp_path / "data"
    for expected in (1, 2, 3):
        with open_runner(data_dir):
            marker = (data_dir / (RUNNER_FILE_NAME + "-session")).read_text()
            assert marker == f"open {expected}\n"
        marker = (data_dir / (RUNNER_FILE_NAME + "-session")).read_text()
        assert marker == f"closed {expected}\n"
        assert not (data_dir / (RUNNER_FILE_NAME + "-wal")).exists()


def test_a_store_from_before_the_marker_opens_and_gets_one(tmp_path):
    data_dir = tmp_path / "data"
    with open_runner(data_dir):
        pass
    (data_dir / (RUNNER_FILE_NAME + "-session")).unlink()
    with open_runner(data_dir):
        pass
    assert (data_dir / (RUNNER_FILE_NAME + "-session")).read_text() == "closed 2\n"


def test_a_damaged_marker_is_refused(tmp_path):
    data_dir = tmp_path / "data"
    with open_runner(data_dir):
        pass
    (data_dir / (RUNNER_FILE_NAME + "-session")).write_text("opened twelve\n")
    with pytest.raises(StoreRefused, match="session marker"):
        open_runner(data_dir)


def test_a_worker_store_whose_wal_was_deleted_after_a_crash_is_refused(tmp_path):
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    with open_worker(live):
        crash_image(live, crashed)
    (crashed / (WORKER_FILE_NAME + "-wal")).unlink()
    with pytest.raises(StoreRefused, match="lost committed transactions"):
        open_worker(crashed)


def test_a_damaged_voter_store_points_to_recover_never_to_an_empty_data_dir(tmp_path):
    data_dir = tmp_path / "data"
    populated_runner(data_dir)
    raw_execute(data_dir / RUNNER_FILE_NAME, "UPDATE log SET checksum = zeroblob(16)")
    with pytest.raises(StoreRefused) as refused:
        open_runner(data_dir)
    message = str(refused.value)
    assert "is damaged" in message
    assert "appliance admin store recover" in message
    assert "start with an empty data_dir" not in message


def test_a_damaged_worker_store_may_start_afresh_after_a_check(tmp_path):
    data_dir = tmp_path / "data"
    with open_worker(data_dir):
        pass
    raw_execute(data_dir / WORKER_FILE_NAME, "UPDATE meta SET checksum = zeroblob(16)")
    with pytest.raises(StoreRefused) as refused:
        open_worker(data_dir)
    message = str(refused.value)
    assert "start with an empty data_dir" in message
    assert "no accepted work is still running" in message
