"""``appliance quickstart`` as a user runs it: a real process, its worker, its demo schedule.

One first session (module fixture) is started, observed and stopped with Ctrl-C; the tests below
check what it showed and left behind, then a second session resumes the same data directory.
"""

from __future__ import annotations

import io
import json
import re
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from appliance.quickstart.files import CREDENTIALS_FILE, prepare, read_credentials
from appliance.quickstart.run import run_quickstart
from tests.quickstart.session import TIME_SCALE, Quickstart, alive, descendants, wait_exit

SUCCEEDED = r"^occurrence (\d+) attempt 1: Succeeded$"
OUTPUT_LINE = r"^    \| hello from the appliance, occurrence (\d+) due at \S+Z$"


@dataclass
class FirstSession:
    qs: Quickstart
    occurrence: str = ""
    output_occurrence: str = ""
    admin_status: subprocess.CompletedProcess[str] | None = None
    schedules: list[dict[str, object]] = field(default_factory=list)
    children: set[int] = field(default_factory=set)
    worker_pid: int = 0
    exit_code: int | None = None


def _list_schedules(qs: Quickstart) -> list[dict[str, object]]:
    qs.send(json.dumps({"action": "list"}))
    reply = qs.expect(lambda line: line.startswith('{"ok":true') and '"schedules"' in line, "list")
    return json.loads(reply)["schedules"]


def _admin_status_as_printed(qs: Quickstart) -> subprocess.CompletedProcess[str]:
    """Run the two shell lines the banner prints, exactly as printed, in a POSIX shell."""
    lines = qs.stdout_lines
    start = lines.index("  status from another shell:")
    script = "\n".join(line.strip() for line in lines[start + 1 : start + 3])
    env = {k: v for k, v in qs.env.items() if not k.startswith("MCP_SCHEDULER_")}
    return subprocess.run(
        ["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FirstSession]:
    data_dir = tmp_path_factory.mktemp("quickstart") / "data"
    qs = Quickstart(data_dir, "--time-scale", TIME_SCALE).start()
    session = FirstSession(qs)
    try:
        qs.expect(lambda line: "Ctrl-C stops both" in line, "the banner")
        pid = re.search(r"\(pid (\d+)\)", "\n".join(qs.stdout_lines))
        session.worker_pid = int(pid.group(1)) if pid else 0
        session.occurrence = qs.expect_match(SUCCEEDED, "a Succeeded demo occurrence").group(1)
        session.output_occurrence = qs.expect_match(OUTPUT_LINE, "its console output").group(1)
        session.admin_status = _admin_status_as_printed(qs)
        session.schedules = _list_schedules(qs)
        assert qs.proc is not None
        session.children = descendants(qs.proc.pid)
        session.exit_code = qs.interrupt()
        yield session
    finally:
        qs.kill()


def test_a_demo_occurrence_is_reported_succeeded_with_its_console_output(
    first: FirstSession,
) -> None:
    assert first.occurrence != ""
    # The output line printed right under the outcome is that same occurrence's console.log.
    index = first.qs.stdout_lines.index(f"occurrence {first.occurrence} attempt 1: Succeeded")
    assert re.match(OUTPUT_LINE, first.qs.stdout_lines[index + 1])
    assert first.output_occurrence == first.occurrence


def test_the_banner_names_every_listener_and_the_data_dir(first: FirstSession) -> None:
    text = "\n".join(first.qs.stdout_lines)
    assert f"data in {first.qs.data_dir} (created a new store)" in text
    for label in ("voter:", "management:", "worker:", "credentials:", "logs:"):
        assert re.search(rf"^  {label}\s+\S", text, re.MULTILINE), label
    assert re.search(r"admission 127\.0\.0\.1:\d+", text)
    assert re.search(r"management:\s+127\.0\.0\.1:\d+ \(loopback only", text)
    assert "  time scale:  60.0x (testing only)" in first.qs.stdout_lines


def test_admin_status_as_printed_answers_with_the_owner(first: FirstSession) -> None:
    result = first.admin_status
    assert result is not None
    assert result.returncode == 0, result.stderr
    fields = dict(line.split(None, 1) for line in result.stdout.splitlines() if " " in line)
    assert fields["ownership.node"].strip() == "quickstart"
    assert int(fields["ownership.epoch"]) >= 1
    assert fields["time_scale"].strip() == "60.0"


def test_ctrl_c_exits_0_and_leaves_no_child_process(first: FirstSession) -> None:
    assert first.exit_code == 0, first.qs.transcript()
    assert first.qs.stdout_lines[-1] == "appliance quickstart: stopped"
    # Ctrl-C said what it waits for and for how long, before waiting
    said = [line for line in first.qs.stdout_lines if line.startswith("appliance quickstart: ")]
    drain = next(line for line in said if "stopping: scheduling stopped" in line)
    assert "nothing to wait for" in drain or "waiting up to 10 s" in drain
    assert any("stopping the worker" in line and "up to 30 s" in line for line in said)
    assert said.index(drain) < said.index("appliance quickstart: stopped")
    assert first.worker_pid in first.children  # the worker was a child, now gone
    assert [pid for pid in first.children if alive(pid)] == []


def test_the_credentials_file_is_0600_and_no_credential_is_ever_printed(
    first: FirstSession,
) -> None:
    path = first.qs.data_dir / CREDENTIALS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(first.qs.data_dir.stat().st_mode) == 0o700
    credentials = read_credentials(path)
    # The management listener's address is exported too (not a credential: it is printed).
    assert credentials.pop("APPLIANCE_MANAGEMENT_ADDR").startswith("127.0.0.1:")
    assert sorted(credentials) == [
        "APPLIANCE_CONSOLE_TOKEN",
        "MCP_SCHEDULER_ADMIN_TOKEN",
        "MCP_SCHEDULER_ADMISSION_TOKEN",
        "MCP_SCHEDULER_CLUSTER_TOKEN",
        "MCP_SCHEDULER_OPERATOR_TOKEN",
        "MCP_SCHEDULER_RECOVERY_TOKEN",
        "MCP_SCHEDULER_WORKER_TOKEN",
    ]
    assert len(set(credentials.values())) == 7
    assert all(len(value) >= 40 for value in credentials.values())
    shown = "\n".join(
        [
            *first.qs.stdout_lines,
            *first.qs.stderr_lines,
            first.admin_status.stdout if first.admin_status else "",
            first.admin_status.stderr if first.admin_status else "",
            (first.qs.data_dir / "runner.log").read_text(),
            (first.qs.data_dir / "worker.log").read_text(),
        ]
    )
    for name, value in credentials.items():
        assert value[: len(value) // 2] not in shown, f"half of {name} was shown"


def test_worker_log_holds_the_workers_stdout_and_its_stderr_to_the_last_line(
    first: FirstSession,
) -> None:
    # Both streams come through one pipe into a rotating file; the quickstart reads it to the
    # end after the worker is reaped, so even the worker's stop notice is kept.
    lines = (first.qs.data_dir / "worker.log").read_text().splitlines()
    assert any(line.startswith('{"event": "ready"') for line in lines)  # stdout
    assert any(line.startswith("appliance worker: stopping") for line in lines)  # stderr, last
    assert not (first.qs.data_dir / "worker.log.1").exists()  # far below its bound


def test_a_second_run_resumes_the_same_store_and_schedule(first: FirstSession) -> None:
    assert first.exit_code == 0
    assert [s["definition"]["name"] for s in first.schedules] == ["hello"]  # type: ignore[index]
    qs = Quickstart(first.qs.data_dir, "--time-scale", TIME_SCALE).start()
    try:
        qs.expect(lambda line: "Ctrl-C stops both" in line, "the banner")
        assert f"data in {first.qs.data_dir} (resumed the store)" in qs.stdout_lines[0]
        qs.expect_match(SUCCEEDED, "a Succeeded occurrence after resuming")
        schedules = _list_schedules(qs)
        assert [s["id"] for s in schedules] == [s["id"] for s in first.schedules]
        assert len(schedules) == 1
        assert qs.interrupt() == 0
    finally:
        qs.kill()
    first_ids = {int(first.occurrence)}
    resumed = [int(m.group(1)) for m in map(re.compile(SUCCEEDED).match, qs.stdout_lines) if m]
    assert min(resumed) > max(first_ids), "occurrence ids continue from the first run"


def test_time_scale_is_refused_outside_testing(tmp_path: Path) -> None:
    qs = Quickstart(tmp_path / "data", "--time-scale", TIME_SCALE, testing=False).start()
    try:
        assert qs.proc is not None
        assert qs.proc.wait(60) == 2
    finally:
        qs.kill()
    assert any("APPLIANCE_TESTING=1" in line for line in qs.stderr_lines)
    assert not (tmp_path / "data").exists()


def test_a_sealed_port_taken_by_something_else_is_a_clear_error_before_anything_starts(
    tmp_path: Path,
) -> None:
    layout = prepare(tmp_path, datetime.now(UTC))
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", layout.runner["cluster_port"]))
        holder.listen(1)
        out, err = io.StringIO(), io.StringIO()
        code = run_quickstart(str(tmp_path), io.StringIO(), out, stderr=err)
    finally:
        holder.close()
    assert code == 1
    assert f"127.0.0.1:{layout.runner['cluster_port']} (the voter's cluster port) is in use" in (
        err.getvalue()
    )
    assert out.getvalue() == ""
    assert not (tmp_path / "worker.log").exists() and not (tmp_path / "runner").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux")
def test_a_killed_quickstart_does_not_leave_its_worker_holding_the_sealed_port(
    tmp_path: Path,
) -> None:
    qs = Quickstart(tmp_path / "data", "--time-scale", TIME_SCALE).start()
    try:
        qs.expect(lambda line: "Ctrl-C stops both" in line, "the banner")
        pid = re.search(r"\(pid (\d+)\)", "\n".join(qs.stdout_lines))
        assert pid is not None
        qs.expect_match(SUCCEEDED, "a Succeeded demo occurrence")
        assert qs.proc is not None
        qs.proc.kill()  # SIGKILL: no handler runs, nothing is stopped in order
        qs.proc.wait(10)
        if not wait_exit(int(pid.group(1)), 30.0):
            log = tmp_path / "data" / "worker.log"
            tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no worker.log)"
            raise AssertionError(f"the worker outlived the quickstart; its log ends:\n{tail}")
    finally:
        qs.kill()
    again = Quickstart(tmp_path / "data", "--time-scale", TIME_SCALE).start()
    try:
        again.expect(lambda line: "Ctrl-C stops both" in line, "the banner after a SIGKILL")
        again.expect_match(SUCCEEDED, "a Succeeded occurrence after the SIGKILL")
        assert again.interrupt() == 0
    finally:
        again.kill()
