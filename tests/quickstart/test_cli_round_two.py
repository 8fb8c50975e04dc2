"""Issue 35 through the real CLI against a real quickstart (voter, worker, engine processes).

Every command runs as a user types it: ``python -m appliance admin ...`` in a child process whose
environment is only what ``. credentials.env`` exports (the credentials and
``APPLIANCE_MANAGEMENT_ADDR``: no ``--addr``, no token flag). The quickstart runs scaled time (one
minute a second), so its demo schedule and the ones created here run every second.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.quickstart.files import read_credentials
from tests.quickstart.session import TIME_SCALE, Quickstart

CLI_TIMEOUT_S = 90


@pytest.fixture(scope="module")
def qs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quickstart]:
    session = Quickstart(tmp_path_factory.mktemp("round2") / "data", "--time-scale", TIME_SCALE)
    session.start()
    try:
        session.expect(lambda line: "Ctrl-C stops both" in line, "the banner")
        yield session
    finally:
        session.kill()


def env_of(qs: Quickstart) -> dict[str, str]:
    """The environment a shell has after ``. credentials.env`` (and nothing of ours)."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MCP_SCHEDULER_") and k != "APPLIANCE_MANAGEMENT_ADDR"
    }
    return {**base, **read_credentials(qs.data_dir / "credentials.env")}


def cli(qs: Quickstart, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "appliance", *argv],
        env=env_of(qs),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def write(tmp_path: Path, name: str, document: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


def test_the_env_file_exports_the_management_address_so_admin_needs_no_flag(qs: Quickstart):
    exported = read_credentials(qs.data_dir / "credentials.env")
    banner = "\n".join(qs.stdout_lines)
    assert f"management:  {exported['APPLIANCE_MANAGEMENT_ADDR']} " in banner
    assert "MCP_SCHEDULER_ADMIN_TOKEN" in exported
    done = cli(qs, "admin", "status")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "no warnings"  # what needs a human comes first


def test_apply_creates_then_changes_only_what_differs_and_is_idempotent(qs, tmp_path):
    definition = {"name": "apply-me", "code": "console.log('v1')", "cron": "0 3 * * *",
                  "timezone": "Europe/Berlin"}  # fmt: skip
    path = write(tmp_path, "apply.json", definition)
    dry = cli(qs, "admin", "apply", path, "--dry-run")
    assert (
        dry.returncode == 0
        and "would be created" in dry.stdout
        and "nothing was sent" in dry.stdout
    )
    created = cli(qs, "admin", "apply", path)
    assert created.returncode == 0, created.stderr
    sid = int(re.search(r"schedule (\d+) \"apply-me\" created", created.stdout).group(1))
    again = cli(qs, "admin", "apply", path)
    assert again.returncode == 0 and "unchanged" in again.stdout
    path = write(tmp_path, "apply.json", {**definition, "code": "console.log('v2')"})
    diff = cli(qs, "admin", "apply", path, "--dry-run")
    assert "-console.log('v1')" in diff.stdout and "+console.log('v2')" in diff.stdout
    assert "v1" in cli(qs, "admin", "describe", str(sid)).stdout  # the dry run sent nothing
    updated = cli(qs, "admin", "apply", path)
    assert updated.returncode == 0 and f'schedule {sid} "apply-me" updated (code)' in updated.stdout
    # A second schedule of the same name is refused with the existing id.
    duplicate = cli(qs, "admin", "create", path)
    assert duplicate.returncode == 1
    assert "HTTP 422 name_taken" in duplicate.stderr and f"schedule {sid}" in duplicate.stderr
    listed = json.loads(cli(qs, "admin", "list", "--json").stdout)["result"]["schedules"]
    assert [s["id"] for s in listed if s["definition"].get("name") == "apply-me"] == [sid]


def test_describe_by_name_shows_the_code_next_runs_and_state(qs, tmp_path):
    path = write(tmp_path, "d.json", {"name": "described", "code": "console.log('see me')",
                                      "cron": "*/5 * * * *", "timezone": "UTC",
                                      "policy": {"jitter_seconds": 30}})  # fmt: skip
    assert cli(qs, "admin", "apply", path).returncode == 0
    shown = cli(qs, "admin", "describe", "described")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert '"described" (enabled)' in out and "console.log('see me')" in out
    assert "next runs" in out and "jitter up to 30 s" in out
    document = json.loads(cli(qs, "admin", "describe", "described", "--json").stdout)
    assert document["schedule"]["definition"]["code"] == "console.log('see me')"
    assert len(document["next_runs"]) == 5
    missing = cli(qs, "admin", "describe", "no-such-name")
    assert missing.returncode == 1 and "no live schedule is named" in missing.stderr


def test_a_syntax_error_is_refused_at_create_and_by_schedule_check_with_line_and_column(
    qs, tmp_path
):
    path = write(tmp_path, "bad.json", {"name": "bad", "code": "console.log(1",
                                        "cron": "* * * * *", "timezone": "UTC"})  # fmt: skip
    checked = cli(qs, "admin", "schedule", "check", path)
    assert checked.returncode == 2 and "(line 1, column 13)" in checked.stderr
    created = cli(qs, "admin", "create", path)
    assert created.returncode == 1
    assert "HTTP 400 invalid_definition: definition.code: SyntaxError" in created.stderr
    assert "(line 1, column 13)" in created.stderr
    applied = cli(qs, "admin", "apply", path)
    assert applied.returncode == 2 and "line 1, column 13" in applied.stderr
    listed = json.loads(cli(qs, "admin", "list", "--json").stdout)["result"]["schedules"]
    assert "bad" not in [s["definition"].get("name") for s in listed]


def test_watch_prints_committed_changes_and_follow_prints_output_then_the_result(qs, tmp_path):
    watched = cli(qs, "admin", "watch", "--after", "0", "--schedule", "1", "--count", "3")
    assert watched.returncode == 0, watched.stderr
    lines = watched.stdout.splitlines()
    assert len(lines) == 3 and 'schedule 1 "hello": created' in lines[0]
    assert re.search(r"#\d+  occurrence \d+ \(schedule 1\) attempt 1: new -> Running", lines[1])
    events = cli(qs, "admin", "watch", "--after", "0", "--schedule", "1", "--count", "2", "--json")
    assert [json.loads(line)["kind"] for line in events.stdout.splitlines()] == [
        "schedule", "occurrence"
    ]  # fmt: skip
    # The newest demo occurrence, followed to its end (it may be running or already done).
    listed = json.loads(cli(qs, "admin", "list", "occurrences", "--json").stdout)["result"]
    upcoming = max(o["id"] for o in listed["occurrences"] if o["schedule_id"] == 1)
    followed = cli(qs, "admin", "output", str(upcoming), "--follow")
    assert followed.returncode == 0, followed.stderr
    assert f"hello from the appliance, occurrence {upcoming}" in followed.stdout
    assert "-- value: null" in followed.stdout
    assert followed.stdout.rstrip().endswith(
        f"-- occurrence {upcoming} is Succeeded (attempt 1) --"
    )


def test_pause_is_warned_first_and_list_holds_next_runs_until_resume(qs):
    paused = cli(qs, "admin", "pause")
    assert paused.returncode == 0 and paused.stdout.startswith("scheduling is paused cluster-wide")
    try:
        status = cli(qs, "admin", "status")
        assert status.stdout.splitlines()[0].startswith("WARNING paused: scheduling is paused")
        listed = cli(qs, "admin", "list")
        assert listed.stdout.startswith("scheduling is PAUSED since")
        hello = next(line for line in listed.stdout.splitlines() if " hello " in line)
        assert "(held)" in hello
    finally:
        resumed = cli(qs, "admin", "resume")
    assert resumed.returncode == 0 and resumed.stdout.startswith("scheduling resumed")
    assert "VALUE" not in resumed.stdout
    assert "(held)" not in cli(qs, "admin", "list").stdout


def test_update_names_the_fields_that_changed(qs, tmp_path):
    path = write(tmp_path, "u.json", {"name": "updated", "code": "console.log(1)",
                                      "cron": "0 4 * * *", "timezone": "UTC"})  # fmt: skip
    sid = re.search(r"schedule (\d+)", cli(qs, "admin", "apply", path).stdout).group(1)
    changed = cli(qs, "admin", "update", sid, "--cron", "0 5 * * *")
    assert changed.returncode == 0 and changed.stdout.startswith(f"schedule {sid}: changed cron")
    same = cli(qs, "admin", "update", sid, "--cron", "0 5 * * *")
    assert same.stdout.startswith(f"schedule {sid}: unchanged")
    document = json.loads(cli(qs, "admin", "update", sid, "--timezone", "UTC", "--json").stdout)
    assert document["result"]["fields"] == [] and document["result"]["changed"] is False


def test_json_honours_the_filters_of_list(qs):
    document = json.loads(
        cli(qs, "admin", "list", "occurrences", "--schedule", "1", "--limit", "2", "--json").stdout
    )
    occurrences = document["result"]["occurrences"]
    assert 0 < len(occurrences) <= 2 and {o["schedule_id"] for o in occurrences} == {1}
    schedules = json.loads(cli(qs, "admin", "list", "--schedule", "1", "--json").stdout)
    assert [s["id"] for s in schedules["result"]["schedules"]] == [1]


def test_tables_show_relative_times_by_default(qs):
    table = cli(qs, "admin", "list", "occurrences", "--schedule", "1", "--limit", "3").stdout
    rows = table.splitlines()[1:4]
    assert rows and all(re.search(r"\d+[smhd] ago|now|in \d+[smhd]", row) for row in rows), table
    absolute = cli(qs, "admin", "list", "occurrences", "--limit", "1", "--absolute").stdout
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", absolute)


def test_bash_completion_completes_subcommands_and_flags(qs):
    script = cli(qs, "completion", "bash")
    assert script.returncode == 0
    probe = (
        script.stdout + "\nCOMP_WORDS=(appliance admin wa); COMP_CWORD=2; _shtab_appliance; "
        'echo "${COMPREPLY[@]}"'
        + "\nCOMP_WORDS=(appliance admin output 3 --fo); COMP_CWORD=4; _shtab_appliance; "
        'echo "${COMPREPLY[@]}"'
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[:2] == ["watch", "--follow"], done.stdout + done.stderr
    zsh = cli(qs, "completion", "zsh")
    assert zsh.stdout.startswith("#compdef appliance") and "watch" in zsh.stdout
