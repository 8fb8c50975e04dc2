"""``appliance admin store backup`` and ``restore`` (docs/store.md, docs/voter-recovery.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.cli.main import main
from appliance.store.versions import RUNNER_FILE_NAME
from migrations_guard import inspect_store
from tests.store.helpers import raw_query
from tests.store.test_recover import open_store, write_config


def filled_store(config: Path) -> None:
    with open_store(config) as store:
        store.persist(
            term=3, voted_for="v2", entries=[(i, 3, b"\x01e%d" % i) for i in range(1, 31)]
        )
        store.save_transition(30, {"meta": b'{"epoch":1}'})
        store.compact(20, 3, ("v1", "v2", "v3"))


def test_a_backup_is_one_verified_file_and_restores_marked_recovering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    filled_store(config)
    backup = tmp_path / "backup.sqlite3"
    with open_store(config):  # a live voter holds its store open (and its lock) meanwhile
        assert main(["admin", "store", "backup", str(tmp_path / "v1"), "--out", str(backup)]) == 0
    assert "every checksum verified" in capsys.readouterr().out
    assert not backup.with_name(backup.name + "-wal").exists()  # one self-contained file
    facts = inspect_store(backup)
    assert facts.problems == () and facts.summary["snapshot_index"] == 20
    assert facts.summary["log_first_index"] == 21 and facts.summary["applied_index"] == 30

    (tmp_path / "v1").rename(tmp_path / "v1.lost")
    assert main(["admin", "store", "restore", "--config", str(config), "--from", str(backup)]) == 0
    assert "RECOVERING since" in capsys.readouterr().out
    with open_store(config) as store:
        assert store.recovering()
        assert store.snapshot_meta() == (20, 3) and store.load_checkpoint()[0] == 30
        assert (store.first_index(), store.last_index()) == (21, 30)
    db = tmp_path / "v1" / RUNNER_FILE_NAME
    assert raw_query(db, "SELECT count(*) FROM meta WHERE key = 'recovering_since'") == [(1,)]


def test_restore_refuses_an_occupied_data_dir_and_another_contract(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    filled_store(config)
    backup = tmp_path / "backup.sqlite3"
    assert main(["admin", "store", "backup", str(tmp_path / "v1"), "--out", str(backup)]) == 0
    assert main(["admin", "store", "backup", str(tmp_path / "v1"), "--out", str(backup)]) == 1
    assert "never overwrites" in capsys.readouterr().err
    assert main(["admin", "store", "restore", "--config", str(config), "--from", str(backup)]) == 1
    assert "move it aside first" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    doc = json.loads(write_config(other, data_dir=other / "v1").read_text())
    doc["remote"]["worker_id"] = "worker-2"  # another contract
    (other / "v1.json").write_text(json.dumps(doc))
    assert (
        main(
            ["admin", "store", "restore", "--config", str(other / "v1.json"), "--from", str(backup)]
        )
        == 1
    )
    assert "sealed with contract digest" in capsys.readouterr().err
    assert not (other / "v1").exists()


def test_a_single_voter_restore_is_its_whole_state_not_recovering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, peers=0)
    with open_store(config) as store:
        store.persist(term=1, voted_for="v1", entries=[(1, 1, b"\x01a")])
        store.save_transition(1, {"meta": b"{}"})
    backup = tmp_path / "one.sqlite3"
    assert main(["admin", "store", "backup", str(tmp_path / "v1"), "--out", str(backup)]) == 0
    (tmp_path / "v1").rename(tmp_path / "v1.lost")
    assert main(["admin", "store", "restore", "--config", str(config), "--from", str(backup)]) == 0
    assert "is lost" in capsys.readouterr().out
    with open_store(config) as store:
        assert not store.recovering() and store.load_checkpoint()[0] == 1
