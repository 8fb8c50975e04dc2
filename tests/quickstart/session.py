"""A real ``python -m appliance quickstart`` process, read line by line (no sleeps)."""

from __future__ import annotations

import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Final

LINE_WAIT_S: Final = 60.0
STOP_WAIT_S: Final = 60.0
TIME_SCALE: Final = "60"  # one scaled minute per real second: the demo runs every second


def descendants(root_pid: int) -> set[int]:
    """Every live process below ``root_pid`` (from /proc), grandchildren included."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Running or a zombie nobody reaped: either counts as left over."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Quickstart:
    """``start()``, then ``expect`` a matching stdout line; ``interrupt`` is Ctrl-C."""

    def __init__(self, data_dir: Path, *extra: str, testing: bool = True) -> None:
        self.data_dir = data_dir
        self.argv = [sys.executable, "-m", "appliance", "quickstart", "--data-dir", str(data_dir)]
        self.argv += [*extra]
        self.env = {**os.environ, "APPLIANCE_TESTING": "1" if testing else "0"}
        self.stdout_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> Quickstart:
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True).start()
        return self

    def _read(self, stream: IO[str], is_stdout: bool) -> None:
        for raw in stream:
            line = raw.rstrip("\n")
            if is_stdout:
                self.stdout_lines.append(line)
                self._lines.put(line)
            else:
                self.stderr_lines.append(line)
        if is_stdout:
            self._lines.put(None)

    def expect(
        self, predicate: Callable[[str], bool], what: str, timeout_s: float = LINE_WAIT_S
    ) -> str:
        """The next stdout line that matches; fails on EOF or after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                raise AssertionError(
                    f"no {what} within {timeout_s} s: {self.transcript()}"
                ) from None
            if line is None:
                raise AssertionError(f"stdout closed before {what}: {self.transcript()}")
            if predicate(line):
                return line

    def expect_match(self, pattern: str, what: str) -> re.Match[str]:
        line = self.expect(lambda text: re.search(pattern, text) is not None, what)
        match = re.search(pattern, line)
        if match is None:  # pragma: no cover - expect() returned a matching line
            raise AssertionError(line)
        return match

    def send(self, line: str) -> None:
        if self.proc is None or self.proc.stdin is None:
            raise AssertionError("not started")
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def interrupt(self) -> int:
        """SIGINT (what Ctrl-C sends) and the exit code."""
        if self.proc is None:
            raise AssertionError("not started")
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(STOP_WAIT_S)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def transcript(self) -> str:
        return (
            "\nstdout:\n"
            + "\n".join(self.stdout_lines)
            + "\nstderr:\n"
            + "\n".join(self.stderr_lines[-20:])
        )


def wait_exit(pid: int, timeout_s: float) -> bool:
    """Whether ``pid`` (any process, not only a child) exits within ``timeout_s``; no polling."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(int(timeout_s * 1000)))
    finally:
        os.close(fd)
