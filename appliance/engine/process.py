"""Starting, talking to, killing and reaping engine children.

Children are started by re-invoking the interpreter on the child entry point (spawn semantics):
the engine never forks a process that has threads or a V8 isolate. ``child_command`` is the one
place that decides how; packaging can change it (for a zipapp) without touching anything else.

A child hosts several executions at once, so its frames interleave: once ready, one reader
thread per child (``start_reading``) hands each frame to the mailbox of the execution it names.
End of file, or a frame that breaks the protocol, closes every mailbox of the child (each
supervisor then judges its own execution from the exit status).

The child gets a scrubbed environment: only the variables the interpreter needs to find the
package, plus the expected parent pid. Worker credentials therefore never reach a child.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
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
READER_JOIN_SECONDS = 5.0
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


class Mailbox:
    """The frames of one execution in one child, in order; closed when the child's pipe ends."""

    _ENDED = object()

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def put(self, message: dict[str, Any]) -> None:
        self._queue.put(message)

    def wake(self) -> None:
        """Make a pending ``get`` return None once (the owner has something to look at)."""
        self._queue.put(None)

    def end(self) -> None:
        self._queue.put(self._ENDED)

    def get(self, deadline_monotonic: float | None) -> dict[str, Any] | None:
        """The next frame; None when woken; FrameTimeout at the deadline; ChildEnded after the
        child's pipe ended (again on every later call)."""
        timeout = None if deadline_monotonic is None else deadline_monotonic - time.monotonic()
        try:
            item = self._queue.get(timeout=max(0.0, timeout) if timeout is not None else None)
        except queue.Empty:
            raise protocol.FrameTimeout("no frame before the deadline") from None
        if item is self._ENDED:
            self._queue.put(self._ENDED)
            raise ChildEnded("the child's pipe ended")
        return item


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
        self._mailbox_lock = threading.Lock()
        self._mailboxes: dict[str, Mailbox] = {}
        self._ended: str | None = None  # why the pipe ended, once it has
        self._reading: threading.Thread | None = None
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
        """One frame, before ``start_reading`` (the ready frame)."""
        if self._reader is None:
            raise ChildStartError("child has no reader")
        return self._reader.read(deadline_monotonic)

    def send(self, message: dict[str, Any]) -> None:
        stdin = self._popen.stdin
        if stdin is None:
            raise BrokenPipeError("child has no stdin")
        with self._send_lock:
            protocol.write_frame(stdin.fileno(), message, REQUEST_FRAME_BYTES_MAX)

    # ----- after ready: one reader thread, one mailbox per execution ---------------------

    def start_reading(self) -> None:
        self._reading = threading.Thread(
            target=self._read_frames, name=f"engine-child-{self.pid}", daemon=True
        )
        self._reading.start()

    def mailbox(self, execution_id: str) -> Mailbox:
        """The execution's mailbox, opened on first use (already ended if the pipe has)."""
        with self._mailbox_lock:
            box = self._mailboxes.get(execution_id)
            if box is None:
                box = self._mailboxes[execution_id] = Mailbox()
                if self._ended is not None:
                    box.end()
            return box

    def forget_mailbox(self, execution_id: str) -> None:
        with self._mailbox_lock:
            self._mailboxes.pop(execution_id, None)

    @property
    def ended(self) -> str | None:
        """Why the pipe ended (end of file, a protocol error), or None while it is open."""
        with self._mailbox_lock:
            return self._ended

    def _read_frames(self) -> None:
        why = "end of file"
        try:
            while True:
                message = self.read(None)
                execution_id = message.get("execution_id")
                if not isinstance(execution_id, str):
                    raise protocol.ProtocolError(
                        f"frame {message.get('type')!r} names no execution"
                    )
                with self._mailbox_lock:
                    box = self._mailboxes.get(execution_id)
                if box is None:
                    raise protocol.ProtocolError(f"frame for unknown execution {execution_id!r}")
                box.put(message)
        except protocol.PeerClosed:
            pass
        except (protocol.ProtocolError, OSError, ValueError) as exc:
            why = f"protocol error: {exc}"
        with self._mailbox_lock:
            self._ended = why
            boxes = list(self._mailboxes.values())
        for box in boxes:
            box.end()

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
        """Release the pipes and the stderr file (after reaping). The reader thread is joined
        first — the reaped child's end is closed, so it sees end of file at once — so its
        descriptor is never closed (and perhaps reused) under it."""
        streams: list[Any] = [self._popen.stdin, self._stderr_file]
        reading = self._reading
        if reading is not None and reading is not threading.current_thread():
            reading.join(READER_JOIN_SECONDS)
        if reading is None or not reading.is_alive():
            streams.append(self._popen.stdout)
        for stream in streams:
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
