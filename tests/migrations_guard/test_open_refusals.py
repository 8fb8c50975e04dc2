"""Opening a damaged or incompatible store is refused clearly, and not one byte changes.

Every test damages or alters a closed store (through SQLite itself, or in the raw file), takes a
fingerprint of the whole data_dir (SHA-256 of every file, so new files show too), tries to open,
and compares.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from appliance.core.canonical import canonical_json
from appliance.store import schema
from appliance.store.errors import StoreRefused
from appliance.store.versions import BINARY_READER_VERSION, RUNNER_FILE_NAME, WORKER_FILE_NAME
from tests.store.helpers import (
    CONTRACT,
    fingerprint,
    flip_first_byte,
    open_runner,
    open_worker,
    populated_runner,
    raw_execute,
    raw_query,
)


def refused(data_dir: Path, contract: dict | None = None) -> str:
    before = fingerprint(data_dir)
    with pytest.raises(StoreRefused) as caught:
        open_runner(data_dir, contract)
    assert fingerprint(data_dir) == before, "a refused store must stay byte-for-byte unchanged"
    return caught.value.message


def flip_column(path: Path, table: str, column: str, where: str) -> None:
    value = raw_query(path, f"SELECT {column} FROM {table} WHERE {where}")[0][0]
    if isinstance(value, str):
        value = flip_first_byte(value.encode()).decode()
    else:
        value = flip_first_byte(value)
    raw_execute(path, f"UPDATE {table} SET {column} = ? WHERE {where}", (value,))


@pytest.fixture
def store(data_dir: Path) -> Path:
    populated_runner(data_dir)
    return data_dir / RUNNER_FILE_NAME


def test_a_flipped_byte_in_a_log_entry_refuses_opening(data_dir: Path, store: Path) -> None:
    flip_column(store, "log", "payload", "idx = 2")
    message = refused(data_dir)
    assert "log entry 2 fails its checksum" in message
    assert "restore this data_dir from a backup" in message


def test_a_flipped_byte_in_a_log_entrys_term_refuses_opening(data_dir: Path, store: Path) -> None:
    raw_execute(store, "UPDATE log SET term = 3 WHERE idx = 1")
    assert "log entry 1 fails its checksum" in refused(data_dir)


def test_a_flipped_byte_in_a_checkpoint_part_refuses_opening(data_dir: Path, store: Path) -> None:
    flip_column(store, "checkpoint_part", "data", "name = 'schedule/1'")
    assert "checkpoint part 'schedule/1' fails its checksum" in refused(data_dir)


def test_a_changed_applied_index_refuses_opening(data_dir: Path, store: Path) -> None:
    raw_execute(store, "UPDATE checkpoint SET applied_index = 3")
    assert "checkpoint applied index fails its checksum" in refused(data_dir)


def test_a_flipped_byte_in_the_contract_refuses_opening(data_dir: Path, store: Path) -> None:
    flip_column(store, "contract", "canonical", "id = 1")
    message = refused(data_dir)
    assert "sealed contract fails its checksum" in message


def test_a_changed_contract_digest_refuses_opening(data_dir: Path, store: Path) -> None:
    flip_column(store, "contract", "digest", "id = 1")
    assert "sealed contract fails its checksum" in refused(data_dir)


def test_a_flipped_byte_in_the_metadata_refuses_opening(data_dir: Path, store: Path) -> None:
    flip_column(store, "meta", "value", "key = 'created_by_version'")
    assert "metadata 'created_by_version' fails its checksum" in refused(data_dir)


def test_a_changed_hard_state_refuses_opening(data_dir: Path, store: Path) -> None:
    raw_execute(store, "UPDATE hard_state SET voted_for = 'n3'")
    assert "Raft hard state fails its checksum" in refused(data_dir)


def test_a_swapped_log_row_does_not_verify(data_dir: Path, store: Path) -> None:
    # Copying entry 3 (same term as 2) over entry 2 keeps a self-consistent payload and checksum,
    # but the index is part of the checksum.
    raw_execute(
        store,
        "UPDATE log SET payload = (SELECT payload FROM log WHERE idx = 3), "
        "checksum = (SELECT checksum FROM log WHERE idx = 3) WHERE idx = 2",
    )
    assert "log entry 2 fails its checksum" in refused(data_dir)


def test_a_flipped_byte_in_the_raw_file_refuses_opening(data_dir: Path, store: Path) -> None:
    raw = bytearray(store.read_bytes())
    at = raw.find(b'{"cmd":"b"}')
    assert at > 0, "the payload must be in the main file after a clean close"
    raw[at + 2] ^= 0x01
    store.write_bytes(bytes(raw))
    message = refused(data_dir)
    assert "log entry 2 fails its checksum" in message or "SQLite" in message


def test_another_contract_is_refused_naming_the_differing_keys(data_dir: Path, store: Path) -> None:
    other = {**CONTRACT, "limits": {**CONTRACT["limits"], "running": 8}}
    message = refused(data_dir, other)
    assert "(differing top-level keys: limits)" in message
    assert "restore the configuration it was sealed with" in message


def test_a_newer_minimum_reader_is_refused(data_dir: Path, store: Path) -> None:
    # What a newer binary would write: a valid checksum over a reader version we do not have.
    newer = str(BINARY_READER_VERSION + 1)
    raw_execute(
        store,
        "UPDATE meta SET value = ?, checksum = ? WHERE key = 'min_reader_version'",
        (newer, schema.meta_checksum("min_reader_version", newer)),
    )
    message = refused(data_dir)
    assert (
        f"needs reader version {newer} but this binary reads up to {BINARY_READER_VERSION}"
        in message
    )
    assert "unresolved Cancelling" in message


def test_an_unknown_schema_version_is_refused(data_dir: Path, store: Path) -> None:
    raw_execute(
        store,
        "UPDATE meta SET value = '3', checksum = ? WHERE key = 'schema_version'",
        (schema.meta_checksum("schema_version", "3"),),
    )
    message = refused(data_dir)
    assert "runner schema version 3, which this binary does not know" in message
    assert "no automatic migration" in message


def test_a_worker_store_is_refused_as_a_runner_store(data_dir: Path) -> None:
    open_worker(data_dir).close()
    before = fingerprint(data_dir)
    with pytest.raises(StoreRefused, match="worker store"):
        open_runner(data_dir)
    assert fingerprint(data_dir) == before
    assert not (data_dir / RUNNER_FILE_NAME).exists()


def test_a_runner_store_is_refused_as_a_worker_store(data_dir: Path, store: Path) -> None:
    before = fingerprint(data_dir)
    with pytest.raises(StoreRefused, match="runner store"):
        open_worker(data_dir)
    assert fingerprint(data_dir) == before
    assert not (data_dir / WORKER_FILE_NAME).exists()


def test_a_worker_store_with_another_identity_is_refused(data_dir: Path) -> None:
    open_worker(data_dir).close()
    before = fingerprint(data_dir)
    with pytest.raises(StoreRefused, match="differing top-level keys: worker_id"):
        open_worker(data_dir, worker_id="w2")
    assert fingerprint(data_dir) == before


def test_a_damaged_worker_record_refuses_opening(data_dir: Path) -> None:
    from appliance.store.worker_store import Invocation

    with open_worker(data_dir) as worker:
        worker.reserve(Invocation("ns", 1, 1, 1), {"payload_digest": "ab"}, now_ms=5)
    path = data_dir / WORKER_FILE_NAME
    flip_column(path, "invocation", "record", "schedule_id = 1")
    before = fingerprint(data_dir)
    with pytest.raises(StoreRefused, match=r"invocation record \(ns, 1, 1, 1\) fails"):
        open_worker(data_dir)
    assert fingerprint(data_dir) == before


def hot_wal_copy(data_dir: Path, target: Path, *, with_shm: bool) -> None:
    """A copy of ``data_dir`` as a crash would leave it: committed pages still in the -wal."""
    store = open_runner(data_dir)
    try:
        store.persist(term=7, voted_for="n2", entries=[(4, 7, b'{"cmd":"in-wal"}')])
        store.save_transition(4, {"meta": b'{"epoch":7}'})
        target.mkdir()
        for name in (RUNNER_FILE_NAME, RUNNER_FILE_NAME + "-wal", "LOCK"):
            shutil.copyfile(data_dir / name, target / name)
        if with_shm:
            shutil.copyfile(
                data_dir / (RUNNER_FILE_NAME + "-shm"), target / (RUNNER_FILE_NAME + "-shm")
            )
    finally:
        store.close()


@pytest.mark.parametrize("with_shm", [False, True])
def test_a_refused_store_with_a_hot_wal_is_neither_recovered_nor_changed(
    data_dir: Path, store: Path, tmp_path: Path, with_shm: bool
) -> None:
    crashed = tmp_path / "crashed"
    hot_wal_copy(data_dir, crashed, with_shm=with_shm)
    assert (crashed / (RUNNER_FILE_NAME + "-wal")).stat().st_size > 0
    other = {**CONTRACT, "remote": {}}
    message = refused(crashed, other)
    assert "differing top-level keys: remote" in message


def test_an_accepted_store_with_a_hot_wal_opens_with_every_committed_write(
    data_dir: Path, store: Path, tmp_path: Path
) -> None:
    crashed = tmp_path / "crashed"
    hot_wal_copy(data_dir, crashed, with_shm=False)
    with open_runner(crashed) as reopened:
        assert reopened.hard_state() == (7, "n2")
        assert reopened.entries(4, 5) == [(4, 7, b'{"cmd":"in-wal"}')]
        assert reopened.load_checkpoint()[0] == 4


def test_damage_inside_a_hot_wal_rolls_back_to_the_last_intact_commit(
    data_dir: Path, store: Path, tmp_path: Path
) -> None:
    crashed = tmp_path / "crashed"
    hot_wal_copy(data_dir, crashed, with_shm=False)
    wal = crashed / (RUNNER_FILE_NAME + "-wal")
    raw = bytearray(wal.read_bytes())
    at = raw.find(b'{"cmd":"in-wal"}')
    assert at > 0
    raw[at + 3] ^= 0x01  # SQLite's own WAL frame checksum now fails
    wal.write_bytes(bytes(raw))
    # SQLite cannot tell a damaged WAL frame from a torn write: it ends the WAL before that
    # frame, so the store opens at the last intact commit, never with half a transaction
    # (documented in docs/store.md as a limit of what a checksum can detect).
    with open_runner(crashed) as reopened:
        assert reopened.last_index() == 3
        assert reopened.hard_state() == (2, "n1")
        assert reopened.load_checkpoint()[0] == 2


def test_the_stored_contract_is_the_canonical_json(data_dir: Path, store: Path) -> None:
    assert raw_query(store, "SELECT canonical FROM contract")[0][0] == canonical_json(CONTRACT)


def test_a_missing_log_entry_is_a_gap_and_refuses_opening(data_dir: Path, store: Path) -> None:
    raw_execute(store, "DELETE FROM log WHERE idx = 2")
    assert "the log has a gap between entries 1 and 3" in refused(data_dir)


def test_a_sqlite_file_that_is_not_an_appliance_store_is_refused(data_dir: Path) -> None:
    data_dir.mkdir()
    raw_execute(data_dir / RUNNER_FILE_NAME, "CREATE TABLE something_else (x)")
    (data_dir / "LOCK").touch()
    assert "not an appliance store" in refused(data_dir)


def test_a_wal_without_its_store_file_is_refused_not_replaced(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / (RUNNER_FILE_NAME + "-wal")).write_bytes(b"orphaned")
    (data_dir / "LOCK").touch()
    message = refused(data_dir)
    assert f"no {RUNNER_FILE_NAME}" in message
