"""`appliance admin config check FILE [--worker] [--check-env]`: offline validation, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from appliance.cli.admin_config import _expiry_note
from appliance.cli.main import main
from tests.config.conftest import runner_dict, worker_dict

RUNNER_ENV = {
    "ADMISSION_TOKEN": "a-value-1",
    "CLUSTER_TOKEN": "c-value-2",
    "WORKER_TOKEN": "w-value-3",
    "OPERATOR_TOKEN": "o-value-4",
    "RECOVERY_TOKEN": "r-value-5",
}


def write(tmp_path: Path, doc: Any, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def test_a_valid_runner_config_prints_ok_and_a_summary_with_the_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in RUNNER_ENV:
        monkeypatch.delenv(name, raising=False)  # offline check needs no credential
    assert main(["admin", "config", "check", write(tmp_path, runner_dict())]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok\n")
    assert "voters (3)" in out and "contract digest: " in out
    assert "2027-01-31T12:00:00Z" in out


def test_the_summary_warns_when_the_grant_expiry_has_passed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = runner_dict()
    doc["remote"]["expires_at"] = "2020-01-01T00:00:00Z"
    assert main(["admin", "config", "check", write(tmp_path, doc)]) == 0  # valid, but useless
    assert "ALREADY PASSED: no permit will be granted" in capsys.readouterr().out


def test_the_expiry_note_at_its_boundaries() -> None:
    expiry = datetime(2027, 1, 31, 12, tzinfo=UTC)
    assert _expiry_note(expiry, expiry).startswith("ALREADY PASSED")
    assert _expiry_note(expiry, expiry - timedelta(seconds=1)) == "in 0 h 0 min: renew soon"
    assert _expiry_note(expiry, expiry - timedelta(hours=23, minutes=59, seconds=59)) == (
        "in 23 h 59 min: renew soon"
    )
    assert _expiry_note(expiry, expiry - timedelta(days=1)) == "in 1 days"


def test_an_invalid_runner_config_lists_every_problem_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = runner_dict()
    doc["remote"]["heap_mb"] = 4097
    doc["management"]["addr"] = "0.0.0.0:4601"
    doc["schedules"][0]["policy"]["retry"]["max_retries"] = 101
    assert main(["admin", "config", "check", write(tmp_path, doc)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "(3 problems)" in captured.err
    assert "schedules[0].policy.retry.max_retries: must be an integer from 0 to 100, got 101" in (
        captured.err
    )
    assert "remote.heap_mb: must be an integer from 16 to 4096, got 4097" in captured.err
    assert "management.addr: must be a loopback address" in captured.err


def test_seeded_code_that_v8_does_not_parse_is_refused_with_its_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = runner_dict()
    second = {**doc["schedules"][0], "name": "second", "code": "let a = 1;\nconsole.log(1"}
    doc["schedules"].append(second)
    assert main(["admin", "config", "check", write(tmp_path, doc)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "(1 problems)" in captured.err
    assert (
        "schedules[1].code: SyntaxError: missing ) after argument list (line 2, column 13)"
        in captured.err
    )
    # Reported together with the config's other problems, in one run.
    doc["remote"]["heap_mb"] = 4097
    assert main(["admin", "config", "check", write(tmp_path, doc)]) == 2
    err = capsys.readouterr().err
    assert "(2 problems)" in err and "remote.heap_mb" in err and "schedules[1].code" in err


def test_a_worker_config_is_checked_with_the_worker_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, worker_dict())
    assert main(["admin", "config", "check", "--worker", path]) == 0
    assert "admission urls: http://127.0.0.1:4501" in capsys.readouterr().out
    # The same file is not a runner config: every missing runner field is named.
    assert main(["admin", "config", "check", path]) == 2
    assert "node_id: is required" in capsys.readouterr().err


def test_check_env_resolves_credentials_without_printing_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, runner_dict())
    for name, value in RUNNER_ENV.items():
        monkeypatch.setenv(name, value)
    assert main(["admin", "config", "check", "--check-env", path]) == 0
    out = capsys.readouterr().out
    assert "credentials: all set and distinct" in out
    monkeypatch.setenv("RECOVERY_TOKEN", RUNNER_ENV["CLUSTER_TOKEN"])
    monkeypatch.delenv("WORKER_TOKEN")
    assert main(["admin", "config", "check", "--check-env", path]) == 2
    err = capsys.readouterr().err
    assert "remote.bearer_env: environment variable WORKER_TOKEN is not set" in err
    assert "management.recovery_bearer_env: the recovery credential" in err
    assert all(value not in err for value in RUNNER_ENV.values())


def test_an_unreadable_or_malformed_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["admin", "config", "check", str(tmp_path / "nope.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    assert main(["admin", "config", "check", "--worker", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_the_installed_command_uses_the_same_exit_codes(tmp_path: Path) -> None:
    good = write(tmp_path, runner_dict(), "good.json")
    doc = runner_dict()
    doc["surprise"] = 1
    bad = write(tmp_path, doc, "bad.json")
    run = [sys.executable, "-m", "appliance", "admin", "config", "check"]
    ok = subprocess.run([*run, good], capture_output=True, text=True, timeout=60)
    assert (ok.returncode, ok.stdout.splitlines()[0]) == (0, "ok")
    refused = subprocess.run([*run, bad], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "surprise: unknown field" in refused.stderr
