"""The engine's child process: a reusable process hosting up to ``slots`` executions at once,
each in its own fresh V8 isolate.

Run as ``python -m appliance.engine.child`` (see process.child_command). The child first reads a
``configure`` frame (its number of slots, and the egress handoff when scripts may fetch: it
holds credential values, so it comes over stdin, never through argv or the environment), warms
up (imports mini-racer, starts V8, builds a spare isolate with the harness), announces
``ready``, then serves ``run`` and ``stop`` frames until its stdin closes. Each ``run`` gets a
sandbox (sandbox.py) with a fresh isolate: nothing of one script — globals, patched prototypes,
timers — is visible to another, whether they run one after the other or side by side, because
they never share an isolate. An execution's ``done`` goes out only after its isolate is
disposed (``disposed`` says whether that was confirmed) and its slot is free again.

Defences, in order: it dies with the parent (PR_SET_PDEATHSIG, checked against the expected
parent pid so a parent that died during our start-up is noticed); it ignores SIGINT (the parent
owns its lifetime); its stdout is reserved for frames (fd 1 is pointed at stderr so stray
prints cannot corrupt the protocol, and one lock serialises the frames of all executions);
each isolate gets V8's hard heap limit of its own binding; and the *soft* RLIMIT_DATA — one
limit for the whole process — is kept at the data size of the idle child plus, for every
execution it hosts, room for twice its heap and its threads, plus headroom (DataLimit below),
so a runaway allocation outside a V8 heap hits the OS backstop instead of the machine. It goes
back to what it was whenever the child is idle (a hard limit could never be raised again, and
the next binding may ask for more). Timeouts are enforced per execution by the sandbox; the
parent kills the child if that fails.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from appliance.engine import protocol
from appliance.engine.model import MIB, REASON_CHILD_START, REASON_PROTOCOL
from appliance.engine.pdeathsig import set_parent_death_signal
from appliance.engine.procstat import data_size_bytes, rss_bytes
from appliance.engine.protocol import PARENT_PID_ENV

# Room above the V8 heaps for GC working space, compiled code and the child's own Python.
DATA_HEADROOM_BYTES = 256 * MIB
# Per execution, beyond twice its heap: the isolate's pump thread (8 MiB stack), its loop and
# driver threads, and a request thread per fetch in flight (THREAD_STACK_BYTES each).
EXECUTION_DATA_BYTES = 32 * MIB
THREAD_STACK_BYTES = 4 * MIB  # Python threads of the child (default would be 8 MiB each)
REQUEST_FRAME_BYTES_MAX = 8 * MIB
REPLY_FRAME_BYTES_MAX = 64 * MIB
SLOTS_MAX = 64
GATE_WAIT_SLICE_SECONDS = 0.05  # a script waiting for the gate still notices a stop this soon
SPARE_WAIT_SECONDS = 1.0  # a run waits this long for the spare being built, then builds its own
SPARE_FAILURES_MAX = 3  # one failure can be a passing race; three in a row is a broken child

EXIT_PARENT_GONE = 3
EXIT_BAD_REQUEST = 4


class DataLimit:
    """The soft RLIMIT_DATA of a child hosting several executions (module doc)."""

    def __init__(self) -> None:
        self._original = resource.getrlimit(resource.RLIMIT_DATA)
        self._idle_data_bytes = data_size_bytes()
        self._room_bytes: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, execution_id: str, room_bytes: int) -> None:
        with self._lock:
            if not self._room_bytes:
                self._idle_data_bytes = data_size_bytes()
            self._room_bytes[execution_id] = room_bytes
            self._apply_locked()

    def remove(self, execution_id: str) -> None:
        with self._lock:
            self._room_bytes.pop(execution_id, None)
            self._apply_locked()

    def _apply_locked(self) -> None:
        soft, hard = self._original
        if not self._room_bytes:
            resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
            return
        limit = self._idle_data_bytes + sum(self._room_bytes.values()) + DATA_HEADROOM_BYTES
        for stricter in (soft, hard):  # an operator's stricter limit stays in force
            if stricter != resource.RLIM_INFINITY:
                limit = min(limit, stricter)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


class Host:
    """The child's executions: slots, spare isolate, the data limit, the frames they send."""

    def __init__(self, slots: int, gate: GateHolder | None, reply_fd: int) -> None:
        self.slots = slots
        self._gate = gate
        self._reply_fd = reply_fd
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._sandboxes: dict[str, Any] = {}
        self._executions_done = 0
        self._spare: Any = None
        self._spare_ready = threading.Condition()  # guards _spare and _building_spare
        self._building_spare = False
        self._data_limit = DataLimit()

    def send(self, message: dict[str, Any]) -> None:
        with self._send_lock:
            protocol.write_frame(self._reply_fd, message, REPLY_FRAME_BYTES_MAX)

    # ----- isolates ------------------------------------------------------------------------

    def warm(self) -> None:
        """Build the first spare isolate, then keep one spare from a background thread."""
        from appliance.engine.v8 import Isolate

        self._spare = Isolate()
        threading.Thread(target=self._keep_a_spare, name="spare-isolate", daemon=True).start()

    def _keep_a_spare(self) -> None:
        from appliance.engine.v8 import Isolate

        failures = 0
        while True:
            with self._spare_ready:
                while self._spare is not None:
                    self._spare_ready.wait()
                self._building_spare = True
            spare = None
            try:
                spare = Isolate()
            except Exception:
                traceback.print_exc()
            with self._spare_ready:
                self._building_spare = False
                self._spare = spare
                self._spare_ready.notify_all()
            failures = 0 if spare is not None else failures + 1
            if failures >= SPARE_FAILURES_MAX:
                return  # cannot build isolates: each execution tries for itself (and says why)

    def _isolate(self) -> Any:
        """The spare isolate — waiting for the one being built rather than building a second
        (with one slot, the next run arrives while the spare for it is being built)."""
        from appliance.engine.v8 import Isolate

        with self._spare_ready:
            if self._spare is None and self._building_spare:
                self._spare_ready.wait_for(
                    lambda: not self._building_spare, timeout=SPARE_WAIT_SECONDS
                )
            spare, self._spare = self._spare, None
            self._spare_ready.notify_all()  # the builder starts the next one
        return spare if spare is not None else Isolate()

    # ----- executions ----------------------------------------------------------------------

    def ready_frame(self) -> dict[str, Any]:
        with self._lock:
            done = self._executions_done
        return {
            "type": protocol.MSG_READY,
            "v": protocol.PROTOCOL_VERSION,
            "pid": os.getpid(),
            "slots": self.slots,
            "executions": done,
            "rss_bytes": rss_bytes(),
        }

    def start(self, request: dict[str, Any]) -> None:
        from appliance.engine.sandbox import Sandbox

        execution_id = str(request.get("execution_id"))
        with self._lock:
            refusal = None
            if execution_id in self._sandboxes:
                refusal = "the execution is already running in this child"
            elif len(self._sandboxes) >= self.slots:
                refusal = f"all {self.slots} slots of this child are busy"
        if refusal is not None:
            self.send(
                {
                    "type": protocol.MSG_DONE,
                    "execution_id": execution_id,
                    "status": "failed",
                    "reason": REASON_PROTOCOL,
                    "error": refusal,
                    "disposed": True,
                }
            )
            return
        heap_bytes = int(request["heap_mb"]) * MIB
        room = 2 * heap_bytes + EXECUTION_DATA_BYTES
        if self._gate is not None:
            room += self._gate.max_requests * THREAD_STACK_BYTES
        from appliance.engine.v8 import IsolateError

        self._data_limit.add(execution_id, room)
        try:
            isolate = self._isolate()  # the one call here that raises IsolateError
            sandbox = Sandbox(request, isolate, self._gate, self.send, self._finished)
        except IsolateError as exc:
            # Nothing of the script ran and the failed isolate closed itself: this execution
            # fails alone, and the executions beside it in this child go on.
            self._data_limit.remove(execution_id)
            traceback.print_exc()
            self.send(
                {
                    "type": protocol.MSG_DONE,
                    "execution_id": execution_id,
                    "status": "failed",
                    "reason": REASON_CHILD_START,
                    "error": f"the engine could not build an isolate for it: {exc}",
                    "disposed": True,
                }
            )
            return
        except BaseException:
            self._data_limit.remove(execution_id)
            raise
        with self._lock:
            self._sandboxes[execution_id] = sandbox
        sandbox.start()

    def stop(self, execution_id: str) -> None:
        with self._lock:
            sandbox = self._sandboxes.get(execution_id)
        if sandbox is not None:
            sandbox.request_stop()

    def _finished(self, sandbox: Any, disposed: bool) -> None:
        """A sandbox disposed of everything it started (or could not prove it did): its slot
        is free before its ``done`` goes out."""
        with self._lock:
            self._sandboxes.pop(sandbox.execution_id, None)
            self._executions_done += 1
        self._data_limit.remove(sandbox.execution_id)


class GateHolder:
    """The child's egress gate, built after ``ready`` (importing the HTTP client and compiling
    the policy take a few hundred milliseconds of CPU, which a burst of starting children would
    otherwise pay before any script starts): a script waits for it only at its first ``fetch``.
    The policy runtime's allocator (rego-cpp's snmalloc) reserves its memory when it first
    allocates, which must happen before an execution lowers the child's RLIMIT_DATA — so
    ``start_runtime`` runs before ``ready``."""

    def __init__(self, document: dict[str, Any]) -> None:
        settings = document.get("settings")
        max_requests = settings.get("max_requests") if isinstance(settings, dict) else None
        self.max_requests = max_requests if isinstance(max_requests, int) else 0
        self._document: dict[str, Any] | None = document
        self._gate: Any = None
        self._error: str | None = None
        self._built = threading.Event()

    @staticmethod
    def start_runtime() -> None:
        import regopy

        regopy.Interpreter()  # the allocator's first allocation: its reservation, unlimited

    def build(self) -> None:
        from appliance.egress.gate import EgressGate

        try:
            self._gate = EgressGate.from_child_json(self._document or {})
        except Exception as exc:  # the worker checked it: this is a bug, said to the script
            traceback.print_exc()
            self._error = f"the egress gate could not be built: {type(exc).__name__}"
        finally:
            self._document = None  # it holds credential values: keep them only in the gate
            self._built.set()

    def get(self, timeout_seconds: float, given_up: Callable[[], bool]) -> Any:
        """The gate; RuntimeError (its message safe for the script) when it is not there in
        time, or when ``given_up()`` says the caller stopped waiting (a stop)."""
        deadline = time.monotonic() + timeout_seconds
        while not self._built.wait(min(GATE_WAIT_SLICE_SECONDS, max(0.0, timeout_seconds))):
            timeout_seconds = deadline - time.monotonic()
            if timeout_seconds <= 0 or given_up():
                raise RuntimeError("the egress gate is not ready")
        if self._gate is None:
            raise RuntimeError(self._error or "the egress gate is not available")
        return self._gate


def _configure(reader: protocol.FrameReader) -> tuple[int, GateHolder | None]:
    message = reader.read()
    if message.get("type") != protocol.MSG_CONFIGURE:
        raise ValueError(f"expected a configure frame, not {message.get('type')!r}")
    slots = message.get("slots")
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= SLOTS_MAX:
        raise ValueError(f"slots must be an integer within 1..{SLOTS_MAX}")
    document = message.get("egress")
    if document is None:
        return slots, None
    if not isinstance(document, dict):
        raise ValueError("egress must be an object")
    return slots, GateHolder(document)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_parent_death_signal(signal.SIGKILL)
    expected_parent = os.environ.get(PARENT_PID_ENV)
    if expected_parent is None or os.getppid() != int(expected_parent):
        return EXIT_PARENT_GONE
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    threading.stack_size(THREAD_STACK_BYTES)
    # A disposed isolate's loop drops the calls it can no longer answer; asyncio would log
    # each at its garbage collection, pushing useful lines out of the stderr tail.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)

    reader = protocol.FrameReader(0, REQUEST_FRAME_BYTES_MAX)
    try:
        slots, gate = _configure(reader)
    except protocol.PeerClosed:
        return 0
    except (ValueError, KeyError, TypeError, protocol.ProtocolError) as exc:
        print(f"engine child: bad configure frame: {exc}", file=sys.stderr)
        return EXIT_BAD_REQUEST
    from appliance.engine.v8 import initialise_v8

    if gate is not None:
        gate.start_runtime()
    initialise_v8()
    host = Host(slots, gate, reply_fd)
    host.warm()
    host.send(host.ready_frame())
    if gate is not None:
        threading.Thread(target=gate.build, name="egress-gate", daemon=True).start()
    while True:
        try:
            message = reader.read()
        except protocol.PeerClosed:
            return 0  # retired
        kind = message.get("type")
        if kind == protocol.MSG_RUN:
            host.start(message)
        elif kind == protocol.MSG_STOP:
            host.stop(str(message.get("execution_id")))
        else:
            return EXIT_BAD_REQUEST


if __name__ == "__main__":
    # os._exit skips V8 and interpreter teardown: the work is reported, nothing else matters.
    code = 1
    try:
        code = main()
    except BaseException:
        traceback.print_exc()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)
