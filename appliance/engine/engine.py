"""The real engine: executions run in pre-started, reusable V8 children, several at a time.

Theory of operation
-------------------
The pool (pool.py) decides what may run; this module runs it; children.py keeps the children.
A child hosts up to ``executions_per_child`` executions side by side, each in a fresh isolate
of its own (child.py, sandbox.py): a script that waits — for a timer, for a ``fetch`` response
— costs an isolate and a few threads, not a process. With ``executions_per_child=1`` every
execution has a child to itself, the engine of earlier versions.

Each started execution's supervisor takes a slot (children.place), sends the request, and reads
its frames (children share the reading: process.py) until ``done``, end of file, or the
backstop: ``timeout_seconds`` plus what the child may take to stop the script itself and
dispose of it, plus ``kill_grace_seconds`` — the child enforces the timeout; the parent kills a
child that failed to. ``output`` frames are kept (bounded) so that ``status()`` shows a running
execution's console output so far.

Stopping one execution (cancel), and the proof behind ``cancelled`` (SPEC §12):

- when the child hosts no other running execution, it is killed and reaped — the proof is the
  reaped child, as it always was;
- otherwise the child is asked to stop it (a ``stop`` frame): the child terminates the script,
  disposes of its isolate, joins its request threads and closes its connections, and answers
  ``done`` with ``disposed: true`` only when each of those was confirmed. Without that answer
  within ``stop_grace_seconds``, or with ``disposed: false``, the child is killed and reaped
  (its other executions end as ``failed``, "engine child died", saying why).

Every ``done`` comes after the child disposed of the execution's isolate (terminating anything
the script left running, a timer included), joined its request threads and closed its
connections, within ``child_recycle_timeout_seconds`` — ``disposed: true`` says it did. A
timeout or out of memory the child handled itself ends like a stop: alone in its child, the
execution's child is killed and reaped before the report (as single-use children always were);
sharing it, the confirmed disposal is the proof. A script that ended by itself (completed, or
an exception the harness caught) keeps its child in service when the disposal was confirmed;
whatever was not confirmed reaps the child before the report.

Judging the end, in order: a ``done`` frame from the child is the truth (a completion that won a
race with cancel keeps its result); otherwise a requested cancel is ``cancelled`` (the child is
already reaped); otherwise the backstop is ``timed_out``; otherwise the child died — killed by
the engine for another execution (the report says so), or by itself: a V8 out-of-memory abort
on its stderr is ``failed`` / "out of memory" when the execution was alone in the child, and
"engine child died" naming the abort when it was not (which of them caused it cannot be told).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.engine import protocol
from appliance.engine.children import Children
from appliance.engine.clock import Clock
from appliance.engine.model import (
    ERROR_LIMIT_BYTES,
    OUTPUT_GRACE_SECONDS,
    REASON_CANCELLED,
    REASON_CHILD_DIED,
    REASON_CHILD_START,
    REASON_EXCEPTION,
    REASON_OUT_OF_MEMORY,
    REASON_PROTOCOL,
    REASON_TIMEOUT,
    RESULT_LIMIT_BYTES_DEFAULT,
    ExecutionReport,
    ExecutionStatus,
)
from appliance.engine.pool import Execution, PoolEngine, check_positive, check_range
from appliance.engine.process import ChildEnded, ChildProcess, ChildStartError, describe_exit
from appliance.engine.protocol import truncate_utf8
from appliance.engine.text import JSON_DEPTH_MAX, TooDeep, well_formed_json

log = logging.getLogger(__name__)

# Reuse limits (named in docs/engine.md); child_executions_max=1 means single-use children.
CHILD_EXECUTIONS_MAX_DEFAULT = 1000
CHILD_EXECUTIONS_MAX_LIMIT = 1_000_000
CHILD_RSS_GROWTH_BYTES_MAX_DEFAULT = 128 * 1024 * 1024
CHILD_RECYCLE_TIMEOUT_SECONDS_DEFAULT = 5.0
CHILD_IDLE_SECONDS_DEFAULT = 60.0
EXECUTIONS_PER_CHILD_DEFAULT = 1
EXECUTIONS_PER_CHILD_MAX = 64
EGRESS_REPORT_BYTES_MAX = 32 * 1024  # appliance/egress/record.py bounds the report to this
DRAIN_SECONDS = 1.0  # reading what a reaped child wrote: its pipe ends at once
_DONE_STATUSES = {
    "completed": ExecutionStatus.COMPLETED,
    "failed": ExecutionStatus.FAILED,
    "timed_out": ExecutionStatus.TIMED_OUT,
    "cancelled": ExecutionStatus.CANCELLED,
}
# A script that ended by itself: the child reports at once and disposes of the isolate after.
_CLEAN_REASONS = {None, REASON_EXCEPTION}


@dataclass
class _Outcome:
    """What the supervisor saw of one execution in its child."""

    reply: dict[str, Any] | None = None
    backstop_fired: bool = False
    stop_unconfirmed: bool = False
    protocol_error: str | None = None
    exit_code: int | None = None


@dataclass
class _Placement:
    """An execution's place in a child (``Execution.backend`` while it runs)."""

    child: ChildProcess
    stop_sent_monotonic: float | None = None


class Engine(PoolEngine):
    """Runs scripts in reusable V8 children, a fresh isolate per script. Thread-safe."""

    def __init__(
        self,
        max_concurrent: int = 4,
        max_queued: int = 8,
        output_limit_bytes: int = 64 * 1024,
        clock: Clock | None = None,
        *,
        warm_children: int | None = None,
        executions_per_child: int = EXECUTIONS_PER_CHILD_DEFAULT,
        result_limit_bytes: int = RESULT_LIMIT_BYTES_DEFAULT,
        kill_grace_seconds: float = 0.5,
        stop_grace_seconds: float | None = None,
        child_start_timeout_seconds: float = 30.0,
        reports_max: int = 1024,
        on_child_spawned: Callable[[int], None] | None = None,
        child_executions_max: int = CHILD_EXECUTIONS_MAX_DEFAULT,
        child_rss_growth_bytes_max: int = CHILD_RSS_GROWTH_BYTES_MAX_DEFAULT,
        child_recycle_timeout_seconds: float = CHILD_RECYCLE_TIMEOUT_SECONDS_DEFAULT,
        child_idle_seconds: float = CHILD_IDLE_SECONDS_DEFAULT,
        egress: Any = None,
    ) -> None:
        super().__init__(max_concurrent, max_queued, output_limit_bytes, clock, reports_max)
        # The worker's appliance.egress.handoff.EgressHandoff, or None (scripts have no fetch).
        # Its to_child_json() holds credential values: it goes to children over stdin only.
        self.egress = egress
        warm = min(2, max_concurrent) if warm_children is None else warm_children
        check_range("warm_children", warm, 0, max_concurrent)
        check_range("executions_per_child", executions_per_child, 1, EXECUTIONS_PER_CHILD_MAX)
        check_range("child_executions_max", child_executions_max, 1, CHILD_EXECUTIONS_MAX_LIMIT)
        check_range("child_rss_growth_bytes_max", child_rss_growth_bytes_max, 0, 2**40)
        check_positive("child_recycle_timeout_seconds", child_recycle_timeout_seconds)
        check_positive("child_idle_seconds", child_idle_seconds)
        # What a child may take to stop one execution and prove it: its disposal bound, plus
        # the grace the parent gives any child before it kills.
        if stop_grace_seconds is None:
            stop_grace_seconds = child_recycle_timeout_seconds + kill_grace_seconds
        check_positive("stop_grace_seconds", stop_grace_seconds)
        self.executions_per_child = executions_per_child
        self.child_executions_max = child_executions_max
        self.child_rss_growth_bytes_max = child_rss_growth_bytes_max
        self._child_recycle_timeout_seconds = child_recycle_timeout_seconds
        self.result_limit_bytes = result_limit_bytes
        self._kill_grace_seconds = kill_grace_seconds
        self._stop_grace_seconds = stop_grace_seconds
        self._child_start_timeout_seconds = child_start_timeout_seconds
        # JSON escaping can grow text up to six-fold; the frame cap still bounds allocation.
        reply_frame_bytes_max = (
            6
            * (
                output_limit_bytes
                + result_limit_bytes
                + 2 * ERROR_LIMIT_BYTES
                + EGRESS_REPORT_BYTES_MAX
            )
            + 64 * 1024
        )
        self._children = Children(
            self._cond,
            executions_per_child=executions_per_child,
            warm_executions=warm,
            child_executions_max=child_executions_max,
            child_rss_growth_bytes_max=child_rss_growth_bytes_max,
            child_idle_seconds=child_idle_seconds,
            child_start_timeout_seconds=child_start_timeout_seconds,
            reply_frame_bytes_max=reply_frame_bytes_max,
            egress_document=self._egress_document,
            on_child_spawned=on_child_spawned,
            reserved_locked=lambda: min(self._reserved, self.max_concurrent),
        )
        self._children.start()

    def _egress_document(self) -> dict[str, Any] | None:
        return None if self.egress is None else self.egress.to_child_json()

    # ----- backend hooks --------------------------------------------------------------------

    def child_pids(self) -> frozenset[int]:
        """Pids of every child this engine has started and not yet reaped."""
        with self._cond:
            return self._children.live_pids_locked()

    def _backend_counts_locked(self) -> tuple[int, int]:
        return self._children.idle_count_locked(), len(self._children.live_pids_locked())

    def _backend_extra_stats_locked(self) -> dict[str, int]:
        return {"children_spawned_total": self._children.spawned_total}

    def _stop(self, execution: Execution) -> None:
        """Cancel or shutdown: kill the child when the execution is alone in it (or the
        engine is closing), else ask the child to stop that one execution."""
        execution_id = execution.request.execution_id
        with self._cond:
            placement = execution.backend
            if not isinstance(placement, _Placement):
                return  # not placed yet: placement sees cancel_reason and gives up
            child = placement.child
            if execution_id not in child.hosted:
                return  # its script already ended: its report is on the way
            others = child.hosted - {execution_id}
            kill = self._closed or not others or child.slots == 1
            if not kill:
                placement.stop_sent_monotonic = time.monotonic()
        if kill:
            self._children.retire(child)
            return
        with contextlib.suppress(OSError, ValueError):  # gone: the supervisor sees end of file
            child.send({"type": protocol.MSG_STOP, "execution_id": execution_id})
        child.wake(execution_id)

    def _shutdown_backend(self, deadline_monotonic: float) -> bool:
        return self._children.shutdown(deadline_monotonic)

    def _execute(self, execution: Execution) -> ExecutionReport:
        deadline = time.monotonic() + self._child_start_timeout_seconds
        try:
            child = self._children.place(execution, deadline)
        except ChildStartError as exc:
            return self._failed_report(execution, REASON_CHILD_START, str(exc))
        if child is None:
            return self._cancelled_report(execution, execution.cancel_reason or REASON_CANCELLED)
        execution_id = execution.request.execution_id
        with self._cond:
            execution.backend = _Placement(child)
            execution.pid = child.pid
        kept = False
        try:
            outcome = self._converse(execution, child)
            kept = self._keep_or_reap(execution, child, outcome)
            return self._judge(execution, child, outcome)
        finally:
            with self._cond:
                execution.backend = None
            if not kept and child.alive():  # only after an unexpected error: leave no child
                self._children.retire(child, "the engine met an unexpected error")
                child.reap(None)
            self._children.leave(child, execution_id)  # before the report: the slot is free

    # ----- one execution --------------------------------------------------------------------

    def _converse(self, execution: Execution, child: ChildProcess) -> _Outcome:
        request = execution.request
        execution_id = request.execution_id

        outcome = _Outcome()
        backstop = (
            time.monotonic()
            + request.timeout_seconds
            + OUTPUT_GRACE_SECONDS
            + self._child_recycle_timeout_seconds
            + self._kill_grace_seconds
        )
        try:
            child.send(
                {
                    "type": protocol.MSG_RUN,
                    "execution_id": execution_id,
                    "code": request.code,
                    "scheduled": request.scheduled.to_json(),
                    "heap_mb": request.heap_mb,
                    "timeout_seconds": request.timeout_seconds,
                    "output_limit_bytes": self.output_limit_bytes,
                    "result_limit_bytes": self.result_limit_bytes,
                    "dispose_seconds": self._child_recycle_timeout_seconds,
                }
            )
            while outcome.reply is None:
                deadline = backstop
                stop_deadline = self._stop_deadline(execution)
                if stop_deadline is not None:
                    deadline = min(deadline, stop_deadline)
                try:
                    message = child.receive(execution_id, deadline)
                except protocol.FrameTimeout:
                    if stop_deadline is not None and time.monotonic() >= stop_deadline:
                        outcome.stop_unconfirmed = True
                        note = f"the stop of {execution_id} could not be confirmed in time"
                    else:
                        outcome.backstop_fired = True
                        note = f"{execution_id} did not stop at its timeout"
                    self._children.retire(child, note)
                    break
                if message is not None:
                    self._handle_frame(execution, outcome, message)
        except (OSError, ValueError):
            pass  # the child is gone; its exit status says why
        except ChildEnded:
            pass
        except protocol.ProtocolError as exc:
            outcome.protocol_error = str(exc)
            self._children.retire(child, f"it broke the protocol: {exc}")
        if outcome.reply is not None:
            return outcome  # _keep_or_reap decides: keep it, or kill and reap it now
        self._children.retire(child)
        outcome.exit_code = child.reap(None)
        self._note_hosted_at_end(child)
        if outcome.protocol_error is None:
            # Everything the child wrote before it died is in its pipe or the mailbox, and the
            # reaped child's pipe ends at once: a done frame that raced the kill wins.
            drained_by = time.monotonic() + DRAIN_SECONDS
            try:
                while outcome.reply is None:
                    message = child.receive(execution_id, drained_by)
                    if message is not None:
                        self._handle_frame(execution, outcome, message)
            except (protocol.FrameTimeout, ChildEnded, protocol.ProtocolError):
                pass
        return outcome

    def _stop_deadline(self, execution: Execution) -> float | None:
        with self._cond:
            placement = execution.backend
            sent = placement.stop_sent_monotonic if isinstance(placement, _Placement) else None
        return None if sent is None else sent + self._stop_grace_seconds

    def _note_hosted_at_end(self, child: ChildProcess) -> None:
        with self._cond:
            if child.hosted_at_end is None:
                child.hosted_at_end = frozenset(child.hosted)

    def _handle_frame(
        self, execution: Execution, outcome: _Outcome, message: dict[str, Any]
    ) -> None:
        kind = message["type"]
        if kind == protocol.MSG_DONE:
            outcome.reply = message
        elif kind == protocol.MSG_RUNNING:
            self._mark_started(execution)
        elif kind == protocol.MSG_OUTPUT:
            text = message.get("text")
            if isinstance(text, str):
                self._append_output(execution, text, message.get("truncated") is True)
        else:
            raise protocol.ProtocolError(f"unexpected frame {kind!r}")

    def _keep_or_reap(self, execution: Execution, child: ChildProcess, outcome: _Outcome) -> bool:
        """After ``done``: keep the child in service, or kill and reap it now, before the
        report — see the module doc for when."""
        reply = outcome.reply
        if reply is None:
            return False  # already reaped in _converse
        execution_id = execution.request.execution_id
        disposed = reply.get("disposed") is True
        clean = reply.get("status") in ("completed", "failed") and reply.get("reason") in (
            _CLEAN_REASONS
        )
        child.note_rss(reply.get("rss_bytes"))
        with self._cond:
            others = child.hosted - {execution_id}
            kill = (
                self._closed
                or not disposed  # nothing unproved stays in service
                or (not clean and not others)  # alone: the reaped child is the proof
                or (child.retiring and not others)  # its last execution: retire it now
            )
        if not kill:
            return True
        note = None if disposed else f"the end of {execution_id} could not be confirmed"
        self._children.retire(child, note)
        outcome.exit_code = child.reap(None)
        return False

    # ----- judging --------------------------------------------------------------------------

    def _judge(
        self, execution: Execution, child: ChildProcess, outcome: _Outcome
    ) -> ExecutionReport:
        if outcome.reply is not None:
            return self._report_from_reply(execution, outcome.reply)
        if execution.cancel_reason is not None:
            return self._cancelled_report(execution, execution.cancel_reason)
        if outcome.backstop_fired:
            return self._terminal(
                execution,
                ExecutionStatus.TIMED_OUT,
                reason=REASON_TIMEOUT,
                note="the child did not stop at the timeout and was killed; "
                "output after the last line read was lost",
                output=execution.output,
                output_truncated=execution.output_truncated,
            )
        if outcome.protocol_error is not None:
            return self._failed_report(execution, REASON_PROTOCOL, outcome.protocol_error)
        exit_text = describe_exit(outcome.exit_code if outcome.exit_code is not None else -9)
        if child.end_note is not None:
            error, _ = truncate_utf8(
                f"engine child {exit_text}: the engine killed it because {child.end_note}",
                ERROR_LIMIT_BYTES,
            )
            return self._failed_report(execution, REASON_CHILD_DIED, error)
        alone = (child.hosted_at_end or frozenset()) <= {execution.request.execution_id}
        tail = child.stderr_tail()
        if "out of memory" in tail.lower():
            lines = [line for line in tail.splitlines() if "out of memory" in line.lower()]
            detail = f"V8 aborted ({exit_text}): {lines[-1].strip()}"
            if alone:
                return self._failed_report(execution, REASON_OUT_OF_MEMORY, detail)
            error, _ = truncate_utf8(
                f"{detail}; the child hosted {len(child.hosted_at_end or ())} executions and "
                "which of them ran out of memory cannot be told",
                ERROR_LIMIT_BYTES,
            )
            return self._failed_report(execution, REASON_CHILD_DIED, error)
        fatal = [line.strip("# ") for line in tail.splitlines() if "Fatal" in line]
        detail = fatal[-1] if fatal else tail[-2000:]
        error, _ = truncate_utf8(f"engine child {exit_text}: {detail}", ERROR_LIMIT_BYTES)
        return self._failed_report(execution, REASON_CHILD_DIED, error)

    def _report_from_reply(self, execution: Execution, reply: dict[str, Any]) -> ExecutionReport:
        status = _DONE_STATUSES.get(reply.get("status"))  # type: ignore[arg-type]
        if status is None:
            return self._failed_report(execution, REASON_PROTOCOL, f"bad status in {reply!r}")
        notes = [n for n in (reply.get("note"), reply.get("output_note")) if isinstance(n, str)]
        result = None
        result_json = reply.get("result_json")
        if isinstance(result_json, str):
            if len(result_json.encode("utf-8", errors="replace")) > self.result_limit_bytes:
                notes.append(f"completion value exceeds {self.result_limit_bytes} bytes")
            else:
                try:
                    result = well_formed_json(json.loads(result_json))
                except (RecursionError, TooDeep):
                    notes.append(f"completion value nests deeper than {JSON_DEPTH_MAX} levels")
                except ValueError as exc:
                    return self._failed_report(
                        execution, REASON_PROTOCOL, f"result_json is not JSON: {exc}"
                    )
        error = reply.get("error")
        reason = reply.get("reason")
        if status is ExecutionStatus.CANCELLED:
            reason = execution.cancel_reason or REASON_CANCELLED
        egress = reply.get("egress")
        return self._terminal(
            execution,
            status,
            result=result,
            error=truncate_utf8(error, ERROR_LIMIT_BYTES)[0] if isinstance(error, str) else None,
            reason=reason if isinstance(reason, str) else None,
            note="; ".join(notes) or None,
            output=execution.output,
            output_truncated=execution.output_truncated or reply.get("output_truncated") is True,
            egress=egress if isinstance(egress, dict) else None,
        )
