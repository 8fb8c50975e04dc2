"""inspect_store(): a read-only look that creates no file, recovers nothing, writes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import apsw
import pytest

from appliance.store.readonly import open_readonly
from appliance.store.versions import RUNNER_FILE_NAME, WORKER_FILE_NAME
from migrations_guard import inspect_store, locate_store
from tests.migrations_guard.test_open_refusals import hot_wal_copy
from tests.store.helpers import DIGEST, fingerprint, open_runner, open_worker, populated_runner


def test_inspecting_a_clean_store_reports_its_facts_and_changes_nothing(data_dir: Path) -> None:
    populated_runner(data_dir)
    before = fingerprint(data_dir)
    facts = inspect_store(data_dir)
    assert fingerprint(data_dir) == before
    assert (facts.kind, facts.schema_version, facts.min_reader_version) == ("runner", 2, 1)
    assert facts.contract_digest == DIGEST
    assert facts.problems == ()
    assert not facts.wal_present
    assert facts.summary == {
        "term": 2,
        "voted_for": "n1",
        "log_first_index": 1,
        "log_last_index": 3,
        "log_entries": 3,
        "log_bytes": 33,
        "applied_index": 2,
        "checkpoint_parts": 2,
        "checkpoint_bytes": len(b'{"epoch":1}') + len(b'{"name":"s"}'),
        "snapshot_index": 0,
        "snapshot_term": 0,
        "log_reclaimable_entries": 0,
    }


@pytest.mark.parametrize("with_shm", [False, True])
def test_a_hot_wal_is_read_without_creating_shm_or_recovering(
    data_dir: Path, tmp_path: Path, with_shm: bool
) -> None:
    populated_runner(data_dir)
    crashed = tmp_path / "crashed"
    hot_wal_copy(data_dir, crashed, with_shm=with_shm)
    before = fingerprint(crashed)
    facts = inspect_store(crashed / RUNNER_FILE_NAME)
    assert fingerprint(crashed) == before  # same bytes, no new -shm, -wal still there
    assert facts.wal_present
    assert facts.problems == ()
    assert facts.summary["log_last_index"] == 4  # the commits that only live in the -wal
    assert facts.summary["term"] == 7
    assert facts.summary["applied_index"] == 4


def test_the_read_only_connection_refuses_to_write(data_dir: Path, tmp_path: Path) -> None:
    populated_runner(data_dir)
    crashed = tmp_path / "crashed"
    hot_wal_copy(data_dir, crashed, with_shm=False)
    before = fingerprint(crashed)
    conn = open_readonly(crashed / RUNNER_FILE_NAME)
    try:
        with pytest.raises(apsw.Error):
            conn.execute("DELETE FROM log")
        with pytest.raises(apsw.Error):
            conn.execute("CREATE TABLE intruder (x)")
        with pytest.raises(apsw.Error):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    assert fingerprint(crashed) == before


def test_a_file_that_is_not_sqlite_is_reported_not_opened(tmp_path: Path) -> None:
    path = tmp_path / RUNNER_FILE_NAME
    path.write_bytes(b"not a database at all" * 100)
    before = fingerprint(tmp_path)
    facts = inspect_store(path)
    assert fingerprint(tmp_path) == before
    assert facts.kind is None
    assert any("SQLite" in p for p in facts.problems)


def test_a_sqlite_file_without_the_meta_table_is_not_an_appliance_store(tmp_path: Path) -> None:
    path = tmp_path / RUNNER_FILE_NAME
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    facts = inspect_store(path)
    assert facts.problems == ("not an appliance store (no meta/contract table)",)


def test_a_worker_store_reports_its_records(data_dir: Path) -> None:
    from appliance.store.worker_store import Invocation

    with open_worker(data_dir, now_ms=10) as worker:
        invocation = Invocation("ns", 1, 2, 1)
        worker.reserve(invocation, {"d": 1}, now_ms=11)
        worker.record_permit(invocation, {"permit": "p"}, now_ms=12)
        worker.consume(invocation, execution_id="e1", now_ms=13)
    facts = inspect_store(data_dir / WORKER_FILE_NAME)
    assert (facts.kind, facts.schema_version, facts.problems) == ("worker", 1, ())
    assert facts.summary["incarnations"] == 1
    assert facts.summary["invocations"] == 1
    assert facts.summary["invocation_counts"]["consumed"] == 1
    assert facts.summary["executions_by_status"] == {"submitted": 1}


def test_locate_store_finds_exactly_one_store(data_dir: Path, tmp_path: Path) -> None:
    assert locate_store(tmp_path) is None
    open_runner(data_dir).close()
    assert locate_store(data_dir) == data_dir / RUNNER_FILE_NAME
    shutil.copyfile(data_dir / RUNNER_FILE_NAME, data_dir / WORKER_FILE_NAME)
    with pytest.raises(ValueError, match="both"):
        locate_store(data_dir)
