"""Starting, talking to, killing and reaping engine children.

Children are started by re-invoking the interpreter on the child entry point (spawn semantics):
the engine never forks a process that has threads or a V8 isolate. ``child_command`` is the one
place that decides how; packaging can change it (for a zipapp) without touching anything else.

A child hosts several executions at once, so its frames interleave. Their supervisors share the
reading (leader and followers): one of the waiting supervisors reads the pipe, keeps a frame that
names its own execution and files any other in the mailbox of the execution it names, waking its
supervisor; when it has its frame it hands the reading over. So a child running one execution
costs no thread hand-off per frame (a hand-off waits for the GIL, which a busy worker holds for
milliseconds at a time). End of file, or a frame that breaks the protocol, ends every mailbox of
the child (each supervisor then judges its own execution from the exit status).

The child gets a scrubbed environment: only the variables the interpreter needs to find the
package, plus the expected parent pid. Worker credentials therefore never reach a child.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

from appliance.engine import protocol
from appliance.engine.protocol import PARENT_PID_ENV

CHILD_MODULE = "appliance.engine.child"
ENV_ALLOWLIST = ("PATH", "PYTHONPATH", "PYTHONHOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")
STDERR_TAIL_BYTES = 8 * 1024
READ_SLICE_SECONDS = 0.1  # a reading supervisor looks at its wake-ups and deadline this often
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


class ChildEnded(Exception):
    """The child's pipe ended (end of file or a protocol error) before the awaited frame."""


class ChildProcess:
    """One engine child seen from the parent. ``send``, ``kill`` and the mailboxes are
    thread-safe; the rest belongs to the engine (under its lock)."""

    def __init__(self, popen: subprocess.Popen[bytes], stderr_file: IO[bytes]) -> None:
        self._popen = popen
        self._stderr_file = stderr_file
        self._reader: protocol.FrameReader | None = None
        self.pid = popen.pid
        self.slots = 1
        self.idle_since_monotonic = 0.0
        self._rss_bytes_first: int | None = None
        self._rss_bytes_last = 0
        self._send_lock = threading.Lock()
        self._frames = threading.Condition()  # guards everything below
        self._mailboxes: dict[str, collections.deque[dict[str, Any] | None]] = {}
        self._ended: str | None = None  # why the pipe ended, once it has
        self._reader_busy = False  # a supervisor is reading the pipe for everyone
        # The engine's bookkeeping (under the engine's lock):
        self.hosted: set[str] = set()  # placed, not yet done
        self.placed_total = 0
        self.retiring = False  # takes no new execution; killed once empty (or at once)
        self.end_note: str | None = None  # why the engine killed it (for the other executions)
        self.hosted_at_end: frozenset[str] | None = None  # who was running when it died
        self.buried = False  # reaped, pipes closed, pid forgotten

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

    def configure(self, slots: int, egress: dict[str, Any] | None) -> None:
        """The first frame: how many executions the child hosts, and the egress handoff (it
        holds credential values: stdin only, never logged)."""
        self.slots = slots
        self.send({"type": protocol.MSG_CONFIGURE, "slots": slots, "egress": egress})

    def wait_ready(self, deadline_monotonic: float) -> None:
        try:
            message = self.read(deadline_monotonic)
        except (protocol.PeerClosed, protocol.FrameTimeout, protocol.ProtocolError, OSError) as exc:
            raise ChildStartError(f"child {self.pid} not ready: {exc}") from exc
        if message.get("type") != protocol.MSG_READY or message.get("pid") != self.pid:
            raise ChildStartError(f"child {self.pid} sent {message!r} instead of ready")
        if message.get("v") != protocol.PROTOCOL_VERSION:
            raise ChildStartError(f"child {self.pid} speaks protocol {message.get('v')!r}")
        if message.get("slots") != self.slots:
            raise ChildStartError(
                f"child {self.pid} offers {message.get('slots')!r} slots, not {self.slots}"
            )
        self.note_rss(message.get("rss_bytes"))

    def note_rss(self, rss: Any) -> None:
        if isinstance(rss, int) and not isinstance(rss, bool):
            self._rss_bytes_last = rss
            if self._rss_bytes_first is None:
                self._rss_bytes_first = rss

    def rss_growth_bytes(self) -> int:
        """How much the child's RSS grew from its ready frame to its latest done one."""
        return self._rss_bytes_last - (self._rss_bytes_first or self._rss_bytes_last)

    def read(self, deadline_monotonic: float | None) -> dict[str, Any]:
        """One frame from the pipe: the ready frame, then whichever frame comes (``receive``)."""
        if self._reader is None:
            raise ChildStartError("child has no reader")
        return self._reader.read(deadline_monotonic)

    def send(self, message: dict[str, Any]) -> None:
        stdin = self._popen.stdin
        if stdin is None:
            raise BrokenPipeError("child has no stdin")
        with self._send_lock:
            protocol.write_frame(stdin.fileno(), message, REQUEST_FRAME_BYTES_MAX)

    # ----- after ready: the supervisors share the reading, one mailbox per execution -------

    def open_mailbox(self, execution_id: str) -> None:
        """Frames naming execution_id are kept for it from now on."""
        with self._frames:
            self._mailboxes.setdefault(execution_id, collections.deque())

    def forget_mailbox(self, execution_id: str) -> None:
        with self._frames:
            self._mailboxes.pop(execution_id, None)

    def wake(self, execution_id: str) -> None:
        """Make the execution's pending ``receive`` return None once (something to look at)."""
        with self._frames:
            box = self._mailboxes.get(execution_id)
            if box is not None:
                box.append(None)
                self._frames.notify_all()

    @property
    def ended(self) -> str | None:
        """Why the pipe ended (end of file, a protocol error), or None while it is open."""
        with self._frames:
            return self._ended

    def receive(self, execution_id: str, deadline_monotonic: float) -> dict[str, Any] | None:
        """The next frame naming execution_id; None when woken (``wake``); FrameTimeout at the
        deadline; ChildEnded once the pipe ended and nothing is left for it."""
        while True:
            with self._frames:
                while True:
                    box = self._mailboxes.get(execution_id)
                    if box:
                        return box.popleft()
                    if self._ended is not None:
                        raise ChildEnded(self._ended)
                    if not self._reader_busy:
                        self._reader_busy = True
                        break  # this supervisor reads for everyone, outside the lock
                    remaining = deadline_monotonic - time.monotonic()
                    if remaining <= 0:
                        raise protocol.FrameTimeout("no frame before the deadline")
                    self._frames.wait(remaining)
            try:
                mine = self._read_one(execution_id, deadline_monotonic)
            finally:
                with self._frames:
                    self._reader_busy = False
                    self._frames.notify_all()  # a follower takes the reading over
            if mine is not None:
                return mine

    def _read_one(self, execution_id: str, deadline_monotonic: float) -> dict[str, Any] | None:
        """Read one frame (at most READ_SLICE_SECONDS, so a wake or the deadline is noticed):
        return it when it is execution_id's, else file it and return None."""
        slice_end = min(deadline_monotonic, time.monotonic() + READ_SLICE_SECONDS)
        try:
            message = self.read(slice_end)
        except protocol.FrameTimeout:
            if time.monotonic() >= deadline_monotonic:
                raise
            return None
        except protocol.PeerClosed:
            self._end("end of file")
            return None
        except (protocol.ProtocolError, OSError, ValueError) as exc:
            self._end(f"protocol error: {exc}")
            return None
        owner = message.get("execution_id")
        if owner == execution_id:
            return message
        with self._frames:
            box = self._mailboxes.get(owner) if isinstance(owner, str) else None
            if box is not None:
                box.append(message)
                self._frames.notify_all()
                return None
        self._end(f"protocol error: frame {message.get('type')!r} for unknown execution {owner!r}")
        return None

    def _end(self, why: str) -> None:
        with self._frames:
            if self._ended is None:
                self._ended = why
            self._frames.notify_all()

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
        """Release the pipes and the stderr file (after reaping, when no supervisor reads)."""
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
