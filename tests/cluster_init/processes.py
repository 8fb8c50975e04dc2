"""Real processes for the cluster tests: a free port block, started processes, their decisions."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from appliance.cluster_init.layout import BASE_PORT_MAX

POLL_S = 0.1


def free_port_block(span: int) -> int:
    """A base port whose whole block binds on loopback right now."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, min(60000, BASE_PORT_MAX))
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + span):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError("no free block of loopback ports")


def decisions(log: Path) -> list[dict[str, Any]]:
    events = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events


def wait_for_outcome(voter_logs: list[Path], timeout_s: float) -> list[dict[str, Any]]:
    """The first outcome events any voter logs, or [] once timeout_s has passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(POLL_S)  # the logs are files written by other processes: poll them
        outcomes = [
            event
            for log in voter_logs
            for event in decisions(log)
            if event.get("event") == "outcome"
        ]
        if outcomes:
            return outcomes
    return []


@contextlib.contextmanager
def started(argv_list: list[list[str]], cwd: Path, env: dict[str, str]) -> Iterator[list[Path]]:
    """Start every argv (stderr to a log file each); terminate them all on the way out."""
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    try:
        for i, argv in enumerate(argv_list):
            log = cwd / f"process-{i}.log"
            logs.append(log)
            with open(log, "wb") as err:
                procs.append(
                    subprocess.Popen(
                        argv,
                        cwd=cwd,
                        env=env,
                        stdin=subprocess.PIPE,  # kept open: EOF would only stop stdin commands
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                    )
                )
        yield logs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            if proc.stdin is not None:
                proc.stdin.close()


def stop_cluster(voters: Any, worker: subprocess.Popen[str] | None) -> None:
    """Stop every voter, then the worker (SIGTERM, then its whole process group)."""
    for voter in voters.values():
        with contextlib.suppress(Exception):
            voter.terminate()
    if worker is None:
        return
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.wait(20)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(worker.pid, signal.SIGKILL)


def start_worker(out: Path) -> subprocess.Popen[str]:
    """The worker of a ``cluster init`` directory, started and ready (its log in worker.log)."""
    log = out / "worker.log"
    with open(log, "w") as err:
        worker = subprocess.Popen(
            [sys.executable, "-m", "appliance", "worker", "--config", str(out / "worker.json")],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
    assert worker.stdout is not None
    line = worker.stdout.readline()
    if '"ready"' not in line:
        stop_cluster({}, worker)
        raise AssertionError(f"the worker did not start: {log.read_text()}")
    return worker
