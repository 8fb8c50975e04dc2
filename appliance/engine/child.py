"""The engine's child process: a reusable process, a fresh V8 isolate for every script.

Run as ``python -m appliance.engine.child`` (see process.child_command). The child warms up
BEFORE it gets work (imports mini-racer, creates an isolate, installs the harness), announces
``ready``, then blocks on stdin for a ``run`` frame. After the script it sends ``done``, disposes
of that isolate — ``MiniRacer.close()`` terminates whatever the script left behind (a pending
timer, a promise reaction, even one spinning in an endless loop) and frees the isolate — builds
the next one, and only then announces ``ready`` again. So a ``ready`` frame proves that nothing
of any earlier script can still run, and nothing a script did (globals, patched prototypes,
timers) is visible to the next one. The parent decides whether a child is reused at all: it
kills and replaces it after a timeout, out of memory, a crash or a cancel, and retires it after
a bounded number of executions or too much memory growth (engine.py).

Defences, in order: it dies with the parent (PR_SET_PDEATHSIG, checked against the expected
parent pid so a parent that died during our start-up is noticed); it ignores SIGINT (the parent
owns its lifetime); its stdout is reserved for frames (fd 1 is pointed at stderr so stray
prints cannot corrupt the protocol); before each script it sets V8's hard heap limit to heap_mb
(per isolate) and the *soft* RLIMIT_DATA to its current data size plus room for that heap, so a
runaway allocation outside the V8 heap hits the OS backstop instead of the machine; the soft
limit goes back to what it was once the script's isolate is gone (a hard limit could never be
raised again, and the next binding may ask for a larger heap). It enforces timeout_seconds
itself by terminating V8 execution; the parent kills it if that fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sys
import time
import traceback
from typing import Any

from appliance.engine import protocol
from appliance.engine.harness import HARNESS_JS
from appliance.engine.model import (
    ERROR_LIMIT_BYTES,
    MIB,
    REASON_EXCEPTION,
    REASON_OUT_OF_MEMORY,
    REASON_TIMEOUT,
)
from appliance.engine.pdeathsig import set_parent_death_signal
from appliance.engine.protocol import PARENT_PID_ENV, truncate_utf8

# Room above the V8 heap for GC working space, compiled code and the child's own Python.
DATA_HEADROOM_BYTES = 256 * MIB
REQUEST_FRAME_BYTES_MAX = 8 * MIB
REPLY_FRAME_BYTES_MAX = 64 * MIB

EXIT_PARENT_GONE = 3
EXIT_BAD_REQUEST = 4


def data_size_bytes() -> int:
    """VmData: the private writable memory that RLIMIT_DATA counts."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmData missing from /proc/self/status")


def rss_bytes() -> int:
    """VmRSS: what the parent watches for growth across executions."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS missing from /proc/self/status")


class Runtime:
    """A warm V8 isolate with the harness installed, waiting for one script."""

    def __init__(self) -> None:
        from py_mini_racer import MiniRacer

        self._racer = MiniRacer()
        harness = self._racer.eval(HARNESS_JS)
        self._install = harness["install"]  # type: ignore[index]
        self._run = harness["run"]  # type: ignore[index]
        self._drain = harness["drain"]  # type: ignore[index]

    restore_data_limit: tuple[int, int] | None = None

    def dispose(self) -> None:
        """Terminate and free the isolate: none of its timers or promises can run after this."""
        self._install = self._run = self._drain = None
        self._racer.close()
        if self.restore_data_limit is not None:
            resource.setrlimit(resource.RLIMIT_DATA, self.restore_data_limit)

    def execute(self, request: dict[str, Any], announce_running: Any) -> dict[str, Any]:
        from py_mini_racer import (
            JSEvalException,
            JSOOMException,
            JSPromise,
            JSPromiseError,
            JSTimeoutException,
        )

        heap_bytes = int(request["heap_mb"]) * MIB
        timeout_seconds = float(request["timeout_seconds"])
        result_limit_bytes = int(request["result_limit_bytes"])
        limit = data_size_bytes() + 2 * heap_bytes + DATA_HEADROOM_BYTES
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        for stricter in (soft, hard):  # an operator's stricter limit stays in force
            if stricter != resource.RLIM_INFINITY:
                limit = min(limit, stricter)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
        self.restore_data_limit = (soft, hard)
        self._racer.set_hard_memory_limit(heap_bytes)
        self._install(json.dumps(request["scheduled"]), int(request["output_limit_bytes"]))

        announce_running()
        deadline = time.monotonic() + timeout_seconds
        reply: dict[str, Any] = {"type": protocol.MSG_DONE}
        out_of_memory = False
        try:
            outcome = self._run(request["code"], timeout_sec=timeout_seconds)
            if isinstance(outcome, JSPromise):
                outcome = outcome.get(timeout=max(deadline - time.monotonic(), 0.001))
            reply.update(_describe(str(outcome), result_limit_bytes))
            reply["reusable"] = True  # the harness saw the script end; the isolate is sound
        except JSTimeoutException:
            reply.update(status="timed_out", reason=REASON_TIMEOUT)
        except JSOOMException:
            out_of_memory = True
        except (JSEvalException, JSPromiseError) as exc:
            if self._racer.was_hard_memory_limit_reached():
                out_of_memory = True
            else:
                error, _ = truncate_utf8(str(exc), ERROR_LIMIT_BYTES)
                reply.update(status="failed", reason=REASON_EXCEPTION, error=error)
        if out_of_memory or self._racer.was_hard_memory_limit_reached():
            reply.update(
                status="failed", reason=REASON_OUT_OF_MEMORY, result_json=None, reusable=False
            )
            reply["error"] = f"V8 heap limit of {request['heap_mb']} MiB reached"
            # Lift the limit so the console buffer can still be read; the OS backstop stays.
            self._racer.set_hard_memory_limit(0)
        if "output" not in reply or reply.get("reusable") is not True:
            reply.update(self._drained_output())
        return reply

    def _drained_output(self) -> dict[str, Any]:
        try:
            drained = json.loads(str(self._drain()))
            return {"output": drained["output"], "output_truncated": drained["truncated"]}
        except Exception as exc:  # the isolate may be unusable after a failure
            return {
                "output": "",
                "output_truncated": True,
                "output_note": f"lost: {exc}",
                "reusable": False,
            }


def _without_harness_frames(stack: str) -> str:
    """Drop the stack frames that belong to the harness, keeping the script's own."""
    kept = [
        line
        for line in stack.splitlines()
        if not (line.lstrip().startswith("at ") and "<anonymous>" in line)
    ]
    return "\n".join(kept)


def _describe(outcome_json: str, result_limit_bytes: int) -> dict[str, Any]:
    outcome = json.loads(outcome_json)
    described: dict[str, Any] = {
        "output": outcome["output"],
        "output_truncated": outcome["truncated"],
    }
    if not outcome["ok"]:
        text = _without_harness_frames(outcome["stack"] or "") or outcome["message"]
        error, _ = truncate_utf8(text, ERROR_LIMIT_BYTES)
        return {**described, "status": "failed", "reason": REASON_EXCEPTION, "error": error}
    result_json = outcome["json"]
    note = outcome.get("note")
    if result_json is not None and len(result_json.encode("utf-8")) > result_limit_bytes:
        result_json = None
        note = f"completion value exceeds {result_limit_bytes} bytes as JSON; result is null"
    return {**described, "status": "completed", "result_json": result_json, "note": note}


def ready_frame(executions: int) -> dict[str, Any]:
    return {
        "type": protocol.MSG_READY,
        "v": protocol.PROTOCOL_VERSION,
        "pid": os.getpid(),
        "executions": executions,
        "rss_bytes": rss_bytes(),
    }


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_parent_death_signal(signal.SIGKILL)
    expected_parent = os.environ.get(PARENT_PID_ENV)
    if expected_parent is None or os.getppid() != int(expected_parent):
        return EXIT_PARENT_GONE
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(message: dict[str, Any]) -> None:
        protocol.write_frame(reply_fd, message, REPLY_FRAME_BYTES_MAX)

    reader = protocol.FrameReader(0, REQUEST_FRAME_BYTES_MAX)
    executions = 0
    while True:
        runtime = Runtime()
        send(ready_frame(executions))
        try:
            request = reader.read()
        except protocol.PeerClosed:
            return 0  # retired
        if request.get("type") != protocol.MSG_RUN:
            return EXIT_BAD_REQUEST
        reply = runtime.execute(request, lambda: send({"type": protocol.MSG_RUNNING}))
        executions += 1
        send(reply)
        if reply.get("reusable") is not True:
            return 0  # the parent kills this child; nothing more to do here
        # The report is out first (its latency matters); the isolate goes before the next
        # ready frame, which is what the parent waits for before it hands out this child.
        runtime.dispose()


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
