"""``appliance admin store check|inspect``: offline, read-only, for runner and worker stores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.cli.main import main
from appliance.store.versions import RUNNER_FILE_NAME
from tests.store.helpers import (
    DIGEST,
    fingerprint,
    flip_first_byte,
    open_runner,
    open_worker,
    populated_runner,
    raw_execute,
    raw_query,
)


def test_check_of_a_healthy_runner_store_exits_0(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    populated_runner(data_dir)
    before = fingerprint(data_dir)
    assert main(["admin", "store", "check", str(data_dir)]) == 0
    assert fingerprint(data_dir) == before
    out = capsys.readouterr().out
    assert out.startswith("healthy: runner store") and DIGEST in out


def test_check_of_a_damaged_store_exits_1_with_a_report(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    populated_runner(data_dir)
    path = data_dir / RUNNER_FILE_NAME
    data = raw_query(path, "SELECT data FROM checkpoint_part WHERE name = 'meta'")[0][0]
    raw_execute(
        path, "UPDATE checkpoint_part SET data = ? WHERE name = 'meta'", (flip_first_byte(data),)
    )
    before = fingerprint(data_dir)
    assert main(["admin", "store", "check", str(data_dir)]) == 1
    assert fingerprint(data_dir) == before
    out = capsys.readouterr().out
    assert "NOT healthy" in out and "checkpoint part 'meta' fails its checksum" in out


def test_check_of_a_worker_store_exits_0(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    open_worker(data_dir).close()
    assert main(["admin", "store", "check", str(data_dir)]) == 0
    assert "healthy: worker store" in capsys.readouterr().out


def test_check_refuses_a_store_held_by_a_live_process(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_runner(data_dir):
        assert main(["admin", "store", "check", str(data_dir)]) == 1
    assert "in use by another live process" in capsys.readouterr().err


def test_check_of_a_directory_without_a_store_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["admin", "store", "check", str(tmp_path)]) == 1
    assert "holds no runner or worker store" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_inspect_json_shows_versions_raft_state_and_checkpoint_summary(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    populated_runner(data_dir)
    assert main(["admin", "store", "inspect", str(data_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "runner"
    assert (report["schema_version"], report["min_reader_version"]) == (2, 1)
    assert report["created_by_version"] == "0.1.0"
    assert report["contract_digest"] == DIGEST
    assert (report["term"], report["voted_for"]) == (2, "n1")
    assert (report["log_first_index"], report["log_last_index"]) == (1, 3)
    assert report["applied_index"] == 2
    assert (report["checkpoint_parts"], report["checkpoint_bytes"]) == (2, 23)
    assert report["problems"] == []


def test_inspect_text_lists_every_field(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    populated_runner(data_dir)
    assert main(["admin", "store", "inspect", str(data_dir)]) == 0
    out = capsys.readouterr().out
    for line in ("kind: runner", "schema_version: 2", "term: 2", "applied_index: 2", "problems: 0"):
        assert line in out.splitlines()


def test_inspect_json_of_a_worker_store_shows_its_records(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    open_worker(data_dir, now_ms=1).close()
    with open_worker(data_dir, now_ms=2) as store:
        latest = store.incarnation_id
    assert main(["admin", "store", "inspect", str(data_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["kind"], report["schema_version"]) == ("worker", 1)
    assert (report["incarnations"], report["latest_incarnation_id"]) == (2, latest)
    assert (report["invocations"], report["executions"]) == (0, 0)
