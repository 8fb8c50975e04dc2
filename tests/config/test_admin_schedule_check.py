"""``appliance admin schedule check FILE``: a definition offline, every problem at once (issue 21,
Build 6); ``admin config check`` on a definition says so instead of listing config problems."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.cli.main import main

GOOD = {"name": "nightly", "code": "console.log(1)", "cron": "30 2 * * *", "timezone": "UTC"}


def write(tmp_path: Path, doc: Any, name: str = "definition.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def test_a_definition_without_policy_is_valid_and_shows_the_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["admin", "schedule", "check", write(tmp_path, GOOD)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok\n")
    assert 'policy: missed "Skip", overlap Skip, retry 0 after 0 s' in out
    assert "next runs: " in out and "T02:30:00Z" in out


def test_every_problem_is_reported_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = {**GOOD, "cron": "61 * * * *", "timezone": "Mars/Base", "policy": {"overlap": "Maybe"}}
    assert main(["admin", "schedule", "check", write(tmp_path, bad)]) == 2
    err = capsys.readouterr().err
    assert "invalid definition (3 problems)" in err
    for path in ("cron:", "timezone:", "policy.overlap:"):
        assert f"  {path}" in err, err


def test_json_lists_every_problem_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = {**GOOD, "cron": "61 * * * *", "timezone": "Mars/Base", "extra": 1}
    assert main(["admin", "schedule", "check", write(tmp_path, bad), "--json"]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is False
    assert sorted(path for path, _ in document["problems"]) == ["cron", "extra", "timezone"]
    assert main(["admin", "schedule", "check", write(tmp_path, GOOD), "--json"]) == 0
    good = json.loads(capsys.readouterr().out)
    assert good["ok"] is True and good["problems"] == []
    assert good["definition"]["policy"] == {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    }
    assert "code" not in good["definition"] and good["definition"]["code_bytes"] == 14


def test_a_create_command_document_and_limits_are_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = {
        "action": "create",
        "definition": {**GOOD, "policy": {"missed": {"CatchUp": {"cap": 200}}}},
    }
    path = write(tmp_path, command)
    assert main(["admin", "schedule", "check", path]) == 2  # default outstanding is 128
    assert "policy.missed.CatchUp.cap" in capsys.readouterr().err
    limits = write(tmp_path, {"outstanding": 256, "records": 4096}, "limits.json")
    assert main(["admin", "schedule", "check", path, "--limits", limits]) == 0


def test_unreadable_or_invalid_json_exits_2(tmp_path: Path, capsys) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{", encoding="utf-8")
    assert main(["admin", "schedule", "check", str(path)]) == 2
    assert main(["admin", "schedule", "check", str(tmp_path / "missing.json")]) == 2


def test_control_characters_in_messages_are_escaped(tmp_path: Path, capsys) -> None:
    bad = {**GOOD, "\u001b[31mkey": 1}
    assert main(["admin", "schedule", "check", write(tmp_path, bad)]) == 2
    err = capsys.readouterr().err
    assert "\u001b" not in err and "[31mkey" in err


def test_config_check_on_a_definition_points_to_schedule_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {**GOOD, "cron": "61 * * * *", "timezone": "Mars/Base"})
    assert main(["admin", "config", "check", path]) == 2
    err = capsys.readouterr().err
    assert "is a schedule definition, not a runner config" in err
    assert f"appliance admin schedule check {path}" in err
    assert "node_id" not in err  # none of the unrelated runner-config problems
    assert main(["admin", "config", "check", "--worker", path]) == 2
    assert "not a worker config" in capsys.readouterr().err
