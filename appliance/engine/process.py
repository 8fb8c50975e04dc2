"""Starting, talking to, killing and reaping engine children.

Children are started by re-invoking the interpreter on the child entry point (spawn semantics):
the engine never forks a process that has threads or a V8 isolate. ``child_command`` is the one
place that decides how; packaging can change it (for a zipapp) without touching anything else.

The child gets a scrubbed environment: only the variables the interpreter needs to find the
package, plus the expected parent pid. Worker credentials therefore never reach a child.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

from appliance.engine import protocol
from appliance.engine.protocol import PARENT_PID_ENV

CHILD_MODULE = "appliance.engine.child"
ENV_ALLOWLIST = ("PATH", "PYTHONPATH", "PYTHONHOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")
STDERR_TAIL_BYTES = 8 * 1024
REQUEST_FRAME_BYTES_MAX = 8 * 1024 * 1024


def child_command() -> list[str]:
    """The argv that starts one engine child (spawn semantics: a fresh interpreter)."""
    return [sys.executable, "-m", CHILD_MODULE]


def child_environment() -> dict[str, str]:
    env = {name: os.environ[name] for name in ENV_ALLOWLIST if name in os.environ}
    env[PARENT_PID_ENV] = str(os.getpid())
    return env


class ChildStartError(Exception):
    """The child did not become ready."""


class ChildProcess:
    """One engine child seen from the parent. Not thread-safe except kill()."""

    def __init__(self, popen: subprocess.Popen[bytes], stderr_file: IO[bytes]) -> None:
        self._popen = popen
        self._stderr_file = stderr_file
        self._reader: protocol.FrameReader | None = None
        self.pid = popen.pid
        self.executions_done = 0  # done frames read from this child
        self.idle_since_monotonic = 0.0
        self._rss_bytes_first: int | None = None
        self._rss_bytes_last = 0

    @classmethod
    def spawn(cls, reply_frame_bytes_max: int) -> ChildProcess:
        """Start a child. Call only from a thread that outlives the child (parent-death signal)."""
        # A file, not a pipe: nobody has to drain it while the child runs, and the tail
        # survives the child's death (that is where a V8 abort explains itself).
        stderr_file = tempfile.TemporaryFile(prefix="appliance-engine-child-")  # noqa: SIM115
        try:
            popen = subprocess.Popen(
                child_command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr_file,
                env=child_environment(),
                close_fds=True,
                bufsize=0,
            )
        except BaseException:
            stderr_file.close()
            raise
        child = cls(popen, stderr_file)
        if popen.stdout is None:
            raise ChildStartError("child has no stdout pipe")
        child._reader = protocol.FrameReader(popen.stdout.fileno(), reply_frame_bytes_max)
        return child

    def wait_ready(self, deadline_monotonic: float) -> None:
        try:
            message = self.read(deadline_monotonic)
        except (protocol.PeerClosed, protocol.FrameTimeout, protocol.ProtocolError) as exc:
            raise ChildStartError(f"child {self.pid} not ready: {exc}") from exc
        if message.get("type") != protocol.MSG_READY or message.get("pid") != self.pid:
            raise ChildStartError(f"child {self.pid} sent {message!r} instead of ready")
        if message.get("v") != protocol.PROTOCOL_VERSION:
            raise ChildStartError(f"child {self.pid} speaks protocol {message.get('v')!r}")
        if message.get("executions") != self.executions_done:
            raise ChildStartError(
                f"child {self.pid} reports {message.get('executions')!r} executions, "
                f"the parent saw {self.executions_done}"
            )
        rss = message.get("rss_bytes")
        if isinstance(rss, int) and not isinstance(rss, bool):
            self._rss_bytes_last = rss
            if self._rss_bytes_first is None:
                self._rss_bytes_first = rss

    def rss_growth_bytes(self) -> int:
        """How much the child's RSS grew from its first ready frame to its latest one."""
        return self._rss_bytes_last - (self._rss_bytes_first or self._rss_bytes_last)

    def read(self, deadline_monotonic: float | None) -> dict[str, Any]:
        if self._reader is None:
            raise ChildStartError("child has no reader")
        return self._reader.read(deadline_monotonic)

    def send(self, message: dict[str, Any]) -> None:
        stdin = self._popen.stdin
        if stdin is None:
            raise BrokenPipeError("child has no stdin")
        protocol.write_frame(stdin.fileno(), message, REQUEST_FRAME_BYTES_MAX)

    def alive(self) -> bool:
        return self._popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the child unless it was already reaped (Popen guards against pid reuse)."""
        with contextlib.suppress(ProcessLookupError):
            self._popen.send_signal(signal.SIGKILL)

    def reap(self, timeout_seconds: float | None) -> int | None:
        """Wait for the child to exit; its exit status, or None if it is still running."""
        try:
            return self._popen.wait(timeout_seconds)
        except subprocess.TimeoutExpired:
            return None

    def kill_and_reap(self) -> int:
        self.kill()
        code = self.reap(None)
        if code is None:  # wait(None) only returns on exit
            raise ChildStartError(f"child {self.pid} could not be reaped")
        return code

    def stderr_tail(self) -> str:
        try:
            self._stderr_file.seek(0, os.SEEK_END)
            size = self._stderr_file.tell()
            self._stderr_file.seek(max(0, size - STDERR_TAIL_BYTES))
            return self._stderr_file.read().decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        """Release the pipes and the stderr file (after reaping)."""
        for stream in (self._popen.stdin, self._popen.stdout, self._stderr_file):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exited with status {code}"


def _is_engine_child(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return (PARENT_PID_ENV.encode() + b"=") in environ.read()
    except OSError:
        return False


def kill_recorded_children(pids: list[int] | set[int], timeout_seconds: float = 5.0) -> list[int]:
    """Kill leftover children of an earlier worker incarnation; the pids actually killed.

    A pid is only signalled if /proc shows it is still an engine child (its environment carries
    the engine marker), so a recycled pid that now belongs to something else is left alone.
    Waits, without polling sleeps, for each killed process to disappear (pidfd).
    """
    killed = []
    deadline = time.monotonic() + timeout_seconds
    for pid in sorted(set(pids)):
        if pid <= 0 or pid == os.getpid() or not _is_engine_child(pid):
            continue
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            killed.append(pid)
            poller = select.poll()  # not select(): descriptors past 1,024 (issue 18)
            poller.register(pidfd, select.POLLIN)
            poller.poll(math.ceil(max(0.0, deadline - time.monotonic()) * 1000))
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reaps it if it happens to be our own child
        finally:
            os.close(pidfd)
    return killed
