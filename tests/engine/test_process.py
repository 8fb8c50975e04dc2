"""The process model: spawn semantics, scrubbed environment, death with the parent, leftovers."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from appliance.engine import child_command, kill_recorded_children
from appliance.engine.process import ChildProcess, child_environment
from appliance.engine.protocol import PARENT_PID_ENV

from .conftest import pid_exists

READY_TIMEOUT_SECONDS = 30.0


def wait_gone(pid: int, timeout_seconds: float) -> bool:
    """True once the process has exited (a pidfd becomes readable), without polling sleeps."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], timeout_seconds)
        return bool(readable)
    finally:
        os.close(pidfd)


def test_child_command_reinvokes_this_interpreter_on_the_child_module() -> None:
    assert child_command() == [sys.executable, "-m", "appliance.engine.child"]


def test_child_environment_carries_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SCHEDULER_WORKER_TOKEN", "s3cret")
    env = child_environment()
    assert "MCP_SCHEDULER_WORKER_TOKEN" not in env
    assert env[PARENT_PID_ENV] == str(os.getpid())
    child = ChildProcess.spawn(1 << 20)
    try:
        with open(f"/proc/{child.pid}/environ", "rb") as environ:
            assert b"s3cret" not in environ.read()
    finally:
        child.kill_and_reap()
        child.close()


def test_child_refuses_to_start_under_an_unexpected_parent() -> None:
    env = child_environment()
    env[PARENT_PID_ENV] = "1"  # not our parent: the real parent must already be gone
    completed = subprocess.run(child_command(), env=env, capture_output=True, timeout=30)
    assert completed.returncode == 3
    assert completed.stdout == b""


def test_retired_unused_child_exits_cleanly_when_its_stdin_closes() -> None:
    child = ChildProcess.spawn(1 << 20)
    child.configure(1, None)
    child.wait_ready(time.monotonic() + READY_TIMEOUT_SECONDS)
    child.close()  # closes stdin: no work will come
    assert child.reap(10) == 0


HOLDER = textwrap.dedent(
    """
    import json, sys, threading
    from appliance.engine import Engine, ExecutionRequest, ExecutionStatus, ScheduledInfo
    engine = Engine(max_concurrent=1, max_queued=0, warm_children=1)
    started = threading.Event()
    engine.add_listener(lambda r: r.started_at and started.set())
    info = ScheduledInfo("ns", "s", None, "o", 1, 1, "2026-01-01T00:00:00Z")
    request = ExecutionRequest("busy", "while (true) {}", info, 64, 60)
    engine.reserve().capability(request, lambda: True).submit()
    started.wait(60)
    print(json.dumps(sorted(engine.child_pids() | {engine.status("busy").pid})), flush=True)
    sys.stdin.read()
    """
)


def test_children_die_when_the_worker_is_killed() -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        pids = json.loads(holder.stdout.readline())
        assert len(pids) >= 1
        assert all(pid_exists(pid) for pid in pids)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        if holder.stdin is not None:
            holder.stdin.close()
        if holder.stdout is not None:
            holder.stdout.close()
    for pid in pids:
        assert wait_gone(pid, 10), f"engine child {pid} outlived its worker"


def test_kill_recorded_children_kills_engine_leftovers_only() -> None:
    leftover = ChildProcess.spawn(1 << 20)
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        killed = kill_recorded_children([leftover.pid, stranger.pid, 0, -5], timeout_seconds=10)
        assert killed == [leftover.pid]
        assert wait_gone(leftover.pid, 1)
        assert stranger.poll() is None  # a pid that is not an engine child is left alone
    finally:
        stranger.kill()
        stranger.wait(10)
        if stranger.stdin is not None:
            stranger.stdin.close()
        leftover.reap(10)
        leftover.close()


def test_kill_recorded_children_ignores_pids_that_are_gone() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)
    assert kill_recorded_children([gone.pid]) == []
