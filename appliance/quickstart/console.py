"""What the quickstart shows on the terminal: each occurrence's outcome and its console output.

Theory of operation: the voter's decision log is given a ``Console`` as its stream. Every line goes
to ``runner.log`` unchanged. A few events are also turned into terminal lines — a claim
("dispatched"), an outcome, ownership, a fatal error — and queued for one printer thread, so the
runner loop that emits them never waits on the terminal or on the network. For an outcome whose
attempt the worker accepted (``dispatch_accepted`` carried its execution id), the printer reads
the execution from the worker's executions route (one bounded GET with the worker bearer, through
the runner's own ``WorkerClient``) and prints under the outcome line its console output (``|``),
then its completion value (``=``, JSON) or thrown error with the first stack lines (``!``): at most
``OUTPUT_LINES_MAX`` lines of at most ``LINE_CHARS_MAX`` characters, control characters escaped so
a script cannot drive the terminal. Nothing is printed before ``release()`` (the quickstart
releases the console once its banner is out), and the terminal stream is shared with the stdin
command replies through ``LockedStream`` so lines never interleave. The queue is bounded: when
the terminal cannot keep up, lines are dropped and counted (the log file still has every
decision).
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TextIO

from appliance.metrics.attempt_report import attempt_report
from appliance.runner.worker_client import ObserveResult

QUEUE_LINES_MAX: Final = 256
OUTPUT_LINES_MAX: Final = 20
LINE_CHARS_MAX: Final = 200
PENDING_EXECUTIONS_MAX: Final = 1024
CLOSE_TIMEOUT_S: Final = 10.0
OUTPUT_PREFIX: Final = "    | "
VALUE_PREFIX: Final = "    = "  # the completion value, as JSON
ERROR_PREFIX: Final = "    ! "  # the thrown error's message and stack
STACK_LINES_MAX: Final = 5
RETRIED_STATUSES: Final = frozenset({"failed", "timed_out"})
# Outcomes after which the worker holds the attempt's final console output.
STATES_WITH_OUTPUT: Final = frozenset({"Succeeded", "Failed", "Cancelled"})


@dataclass(frozen=True)
class _Show:
    text: str


@dataclass(frozen=True)
class _ShowOutcome:
    text: str
    execution_id: str | None


def printable(text: str) -> str:
    """``text`` with control characters (other than tab) escaped, for a terminal."""
    return "".join(
        ch if ch == "\t" or (ch.isprintable() and ch not in "\x1b\x9b") else repr(ch)[1:-1]
        for ch in text
    )


def output_lines(document: dict[str, Any] | None) -> list[str]:
    """The bounded, printable lines of an execution document's console output."""
    output = (document or {}).get("output")
    if not isinstance(output, dict) or not isinstance(output.get("text"), str):
        return []
    lines = output["text"].splitlines()
    shown = [
        printable(line if len(line) <= LINE_CHARS_MAX else line[:LINE_CHARS_MAX] + "…")
        for line in lines[:OUTPUT_LINES_MAX]
    ]
    if len(lines) > OUTPUT_LINES_MAX:
        shown.append(f"… {len(lines) - OUTPUT_LINES_MAX} more lines")
    if output.get("truncated"):
        shown.append("… (the engine truncated this output at its limit)")
    return shown


def outcome_lines(document: dict[str, Any] | None) -> list[str]:
    """The completion value (``= ...``) or the thrown error and its first stack lines (``! ...``),
    bounded and printable, from an execution document."""
    report = attempt_report(document or {})
    lines: list[str] = []
    value = report.get("value")
    if isinstance(value, dict) and value.get("json") not in (None, "null"):
        text = str(value["json"])
        lines.append(VALUE_PREFIX + printable(_bounded_line(text)))
    error = report.get("error")
    if isinstance(error, dict):
        lines.append(ERROR_PREFIX + printable(_bounded_line(str(error.get("message")))))
        stack = (error.get("stack") or "").splitlines()
        lines += [ERROR_PREFIX + printable(_bounded_line(line)) for line in stack[:STACK_LINES_MAX]]
        if len(stack) > STACK_LINES_MAX:
            lines.append(f"{ERROR_PREFIX}… {len(stack) - STACK_LINES_MAX} more stack lines")
    return lines


def _bounded_line(text: str) -> str:
    return text if len(text) <= LINE_CHARS_MAX else text[:LINE_CHARS_MAX] + "…"


class LockedStream:
    """A text stream whose each ``write`` is atomic with respect to the others."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            return self._stream.write(text)

    def flush(self) -> None:
        with self._lock:
            self._stream.flush()


class Console:
    """The decision log's stream (see module doc). ``close()`` prints what is queued, then stops."""

    def __init__(
        self,
        log_file: TextIO,
        out: TextIO,
        observe: Callable[[str], ObserveResult],
    ) -> None:
        self._file = log_file
        self._out = out
        self._observe = observe
        self._queue: queue.Queue[_Show | _ShowOutcome | None] = queue.Queue(QUEUE_LINES_MAX)
        self._executions: dict[tuple[object, object], str] = {}
        self._lock = threading.Lock()
        self.dropped = 0
        self._released = threading.Event()
        self._printer = threading.Thread(target=self._print_all, name="console", daemon=True)
        self._printer.start()

    # ---- the stream side (called by DecisionLog under its lock) ------------------------------

    def write(self, text: str) -> int:
        self._file.write(text)
        for line in text.splitlines():
            self._route(line)
        return len(text)

    def flush(self) -> None:
        self._file.flush()

    def _route(self, line: str) -> None:
        try:
            event: dict[str, Any] = json.loads(line)
        except ValueError:
            return
        kind = event.get("event")
        key = (event.get("occurrence"), event.get("attempt"))
        if kind == "dispatch_accepted" and isinstance(event.get("execution_id"), str):
            with self._lock:
                if len(self._executions) >= PENDING_EXECUTIONS_MAX:
                    self._executions.pop(next(iter(self._executions)))
                self._executions[key] = event["execution_id"]
        elif kind == "claim":
            self._put(
                _Show(
                    f"occurrence {event.get('occurrence')} of schedule {event.get('schedule')} "
                    f"attempt {event.get('attempt')}: dispatched"
                )
            )
        elif kind == "outcome":
            self._put(self._outcome(event, key))
        elif kind == "ownership_acquired":
            self._put(_Show(f"the voter owns the schedules (ownership epoch {event.get('epoch')})"))
        elif kind == "fatal":
            self._put(_Show(f"fatal: {printable(str(event.get('error')))}"))

    def _outcome(self, event: dict[str, Any], key: tuple[object, object]) -> _ShowOutcome:
        state = event.get("state")
        reason = f" ({printable(str(event['reason']))})" if event.get("reason") else ""
        # A failed attempt whose policy retries it goes back to Pending: say so, and show what
        # it did like any finished attempt.
        retrying = state == "Pending" and event.get("worker_status") in RETRIED_STATUSES
        finished = state in STATES_WITH_OUTPUT or retrying
        with self._lock:
            execution_id = (
                self._executions.pop(key, None) if finished else self._executions.get(key)
            )
        shown = "Failed; a retry is scheduled (Pending)" if retrying else state
        text = f"occurrence {key[0]} attempt {key[1]}: {shown}{reason}"
        return _ShowOutcome(text, execution_id if finished else None)

    def _put(self, item: _Show | _ShowOutcome) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1

    # ---- the printer thread ------------------------------------------------------------------

    def release(self) -> None:
        """Start printing: until then lines wait in the queue (the banner goes first)."""
        self._released.set()

    def _print_all(self) -> None:
        self._released.wait()
        while True:
            item = self._queue.get()
            if item is None:
                return
            lines = [item.text]
            if isinstance(item, _ShowOutcome) and item.execution_id is not None:
                lines += self._output_of(item.execution_id)
            try:
                self._out.write("\n".join(lines) + "\n")
                self._out.flush()
            except (OSError, ValueError):
                return  # a closed terminal must not stop the voter

    def _output_of(self, execution_id: str) -> list[str]:
        try:
            result = self._observe(execution_id)
        except Exception as exc:  # the client classifies I/O; report anything else, keep going
            return [f"{OUTPUT_PREFIX}(output not available: {exc!r})"]
        if result.status is None:
            return [f"{OUTPUT_PREFIX}(output not available: {printable(result.detail)})"]
        lines = [OUTPUT_PREFIX + line for line in output_lines(result.document)]
        if not lines:
            lines = [f"{OUTPUT_PREFIX}(no console output)"]
        return lines + outcome_lines(result.document)

    def close(self) -> None:
        """Print what is queued (bounded by ``CLOSE_TIMEOUT_S``), then stop the printer."""
        self.release()
        try:
            self._queue.put(None, timeout=CLOSE_TIMEOUT_S)
        except queue.Full:
            return
        self._printer.join(CLOSE_TIMEOUT_S)
