"""The bounded execution pool shared by the real engine and the in-memory one.

Theory of operation
-------------------
Capacity. ``max_concurrent`` executions may run and ``max_queued`` more may wait. Capacity is
*reserved* before the worker asks the quorum for a permit (``reserve``), so work that was
admitted never finds the pool full; a refused reservation is counted as a saturation event and
the occurrence simply stays due (seeds/002: excess work is not dropped and consumes no retry).
A reservation turns into an execution only through the one-shot SubmitCapability
(capability.py). One unit of capacity stays held from ``reserve`` until the execution's terminal
report, so ``reserved <= max_concurrent + max_queued`` and ``running <= max_concurrent`` always.

Executions. A started execution gets a supervisor thread that calls the backend's ``_execute``
(the real engine runs it in a child process; the in-memory engine runs a Python stand-in) and
files the terminal report it returns. Queued executions start in submission order as slots free
up. ``cancel`` fences the execution (a queued one never starts), asks the backend to stop it
(``_stop``) and waits for the terminal report: the backend reports ``cancelled`` only once the
work has provably stopped, and a completion that won the race keeps its result.

Every report transition (running, terminal) goes to the listeners, then wakes ``wait``.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from appliance.engine.capability import Reservation
from appliance.engine.clock import Clock, SystemClock
from appliance.engine.model import (
    MAX_CONCURRENT_LIMIT,
    MAX_QUEUED_LIMIT,
    OUTPUT_LIMIT_BYTES_MAX,
    REASON_CANCELLED,
    REASON_PROTOCOL,
    REASON_SHUTDOWN,
    DuplicateExecution,
    EngineClosed,
    EngineStats,
    ExecutionReport,
    ExecutionRequest,
    ExecutionStatus,
    InvalidEngineConfig,
    PoolFull,
    UnknownExecution,
)
from appliance.engine.protocol import truncate_utf8
from appliance.engine.text import TooDeep, well_formed, well_formed_json

log = logging.getLogger(__name__)

Listener = Callable[[ExecutionReport], None]


@dataclass(eq=False)
class Execution:
    """One submitted execution, as the pool tracks it (guarded by the pool's lock)."""

    request: ExecutionRequest
    queued: bool
    done: threading.Event = field(default_factory=threading.Event)
    report: ExecutionReport | None = None
    started_at: datetime | None = None
    pid: int | None = None
    cancel_reason: str | None = None
    thread: threading.Thread | None = None
    backend: Any = None  # the backend's handle on the running work (e.g. its child process)
    output: str = ""  # console output so far (bounded by output_limit_bytes)
    output_bytes: int = 0
    output_truncated: bool = False


class PoolEngine(abc.ABC):
    """Reservations, queue, reports and listeners. Subclasses supply the execution backend."""

    def __init__(
        self,
        max_concurrent: int,
        max_queued: int,
        output_limit_bytes: int,
        clock: Clock | None,
        reports_max: int,
    ) -> None:
        check_range("max_concurrent", max_concurrent, 1, MAX_CONCURRENT_LIMIT)
        check_range("max_queued", max_queued, 0, MAX_QUEUED_LIMIT)
        check_range("output_limit_bytes", output_limit_bytes, 0, OUTPUT_LIMIT_BYTES_MAX)
        check_range("reports_max", reports_max, 1, 1_000_000)
        self.max_concurrent = max_concurrent
        self.max_queued = max_queued
        self.output_limit_bytes = output_limit_bytes
        self._clock: Clock = clock or SystemClock()
        self._reports_max = reports_max
        self._cond = threading.Condition()
        self._closed = False
        self._reserved = 0
        self._running = 0
        self._queue: collections.deque[Execution] = collections.deque()
        self._executions: collections.OrderedDict[str, Execution] = collections.OrderedDict()
        self._saturation_events = 0
        self._queued_events = 0
        self._submitted_total = 0
        self._next_token = 0
        self._listeners: list[Listener] = []

    # ----- backend hooks --------------------------------------------------------------------

    @abc.abstractmethod
    def _execute(self, execution: Execution) -> ExecutionReport:
        """Run the execution to its end (in the supervisor thread); its terminal report."""

    @abc.abstractmethod
    def _stop(self, execution: Execution) -> None:
        """Ask the backend to stop a started execution (cancel_reason is already set)."""

    def _shutdown_backend(self, deadline_monotonic: float) -> bool:
        """Release the backend's idle resources; True when nothing of it is left."""
        return True

    def _backend_counts_locked(self) -> tuple[int, int]:
        """(warm_children, live_children) for stats()."""
        return 0, 0

    def _backend_extra_stats_locked(self) -> dict[str, int]:
        """Backend counters added to stats() (EngineStats fields)."""
        return {}

    def child_pids(self) -> frozenset[int]:
        """Pids of every child process this engine started and has not reaped."""
        return frozenset()

    # ----- capacity -------------------------------------------------------------------------

    def reserve(self) -> Reservation:
        """Hold one unit of capacity for a future submission, or raise PoolFull."""
        with self._cond:
            if self._closed:
                raise EngineClosed("engine is shut down")
            if self._reserved >= self.max_concurrent + self.max_queued:
                self._saturation_events += 1
                raise PoolFull(
                    f"{self.max_concurrent} running and {self.max_queued} queued are all reserved"
                )
            self._reserved += 1
            self._next_token += 1
            self._cond.notify_all()  # the real engine warms children for what is coming
            return Reservation(self, self._next_token)

    def capacity(self) -> tuple[int, int, int]:
        """``(max_concurrent, max_queued, reserved)`` now: what the worker states in its answers
        so that an owner paces its dispatches (docs/protocol.md, "Capacity")."""
        with self._cond:
            return self.max_concurrent, self.max_queued, self._reserved

    def release_reservation(self, reservation: Reservation) -> None:
        """capability.CapacityHolder: an unused reservation gives its capacity back."""
        with self._cond:
            self._reserved -= 1
            self._cond.notify_all()

    def submit_reserved(
        self, reservation: Reservation, request: ExecutionRequest
    ) -> ExecutionReport:
        """capability.CapacityHolder: the capability's submission, after its re-check."""
        with self._cond:
            # From here on the capacity is the engine's to return; a reservation that its
            # holder already released raises instead, changing nothing.
            reservation.hand_over()
            if self._closed:
                self._reserved -= 1
                raise EngineClosed("engine is shut down")
            if request.execution_id in self._executions:
                self._reserved -= 1
                raise DuplicateExecution(request.execution_id)
            execution = Execution(request, queued=self._running >= self.max_concurrent)
            self._executions[request.execution_id] = execution
            self._submitted_total += 1
            if execution.queued:
                self._queue.append(execution)
                self._queued_events += 1
            else:
                self._start_locked(execution)
            return self._snapshot_locked(execution)

    def _start_locked(self, execution: Execution) -> None:
        self._running += 1
        execution.queued = False
        execution.thread = threading.Thread(
            target=self._supervise,
            args=(execution,),
            name=f"engine-exec-{execution.request.execution_id[:32]}",
            daemon=True,
        )
        execution.thread.start()

    def _supervise(self, execution: Execution) -> None:
        try:
            report = self._execute(execution)
        except Exception as exc:  # a bug here must still free the capacity
            log.exception("engine supervisor failed")
            report = self._failed_report(execution, REASON_PROTOCOL, f"supervisor error: {exc}")
        with self._cond:
            self._finish_locked(execution, report, was_running=True)
        self._deliver(execution, report)

    # ----- observation ----------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Call listener(report) on every transition (running, terminal), from engine threads."""
        with self._cond:
            self._listeners.append(listener)

    def status(self, execution_id: str) -> ExecutionReport:
        with self._cond:
            return self._snapshot_locked(self._lookup_locked(execution_id))

    def wait(self, execution_id: str, timeout_seconds: float | None = None) -> ExecutionReport:
        """Block until the execution is terminal or the timeout passes; the latest report."""
        with self._cond:
            execution = self._lookup_locked(execution_id)
        execution.done.wait(timeout_seconds)
        with self._cond:
            return self._snapshot_locked(execution)

    def stats(self) -> EngineStats:
        with self._cond:
            warm, live = self._backend_counts_locked()
            return EngineStats(
                max_concurrent=self.max_concurrent,
                max_queued=self.max_queued,
                reserved=self._reserved,
                running=self._running,
                queued=len(self._queue),
                warm_children=warm,
                live_children=live,
                saturation_events=self._saturation_events,
                queued_events=self._queued_events,
                submitted_total=self._submitted_total,
                **self._backend_extra_stats_locked(),
            )

    # ----- cancel and shutdown --------------------------------------------------------------

    def cancel(self, execution_id: str, wait_seconds: float = 5.0) -> ExecutionReport:
        """Stop an execution. ``cancelled`` is reported only once the work provably stopped (for
        the real engine: its child was reaped); a completion that wins the race keeps its real
        result. Returns the report as known after at most wait_seconds (possibly running)."""
        with self._cond:
            execution = self._lookup_locked(execution_id)
            if execution.report is not None:
                return execution.report
            if execution.queued:
                self._queue.remove(execution)
                report = self._cancelled_report(execution, REASON_CANCELLED)
                self._finish_locked(execution, report, was_running=False)
            else:
                report = None
                execution.cancel_reason = execution.cancel_reason or REASON_CANCELLED
                self._cond.notify_all()  # a supervisor still waiting for resources gives up
        if report is not None:
            self._deliver(execution, report)
            return report
        self._stop(execution)
        return self.wait(execution_id, wait_seconds)

    def shutdown(self, wait_seconds: float = 5.0) -> bool:
        """Admit nothing more, cancel queued and running work, release idle resources.

        True when every supervisor finished (so all work provably stopped) within wait_seconds.
        """
        deadline = time.monotonic() + wait_seconds
        with self._cond:
            self._closed = True
            queued = list(self._queue)
            self._queue.clear()
            busy = []
            for execution in self._executions.values():
                if execution.report is None and not execution.queued:
                    execution.cancel_reason = execution.cancel_reason or REASON_SHUTDOWN
                    busy.append(execution)
            self._cond.notify_all()
            finished = []
            for execution in queued:
                report = self._cancelled_report(execution, REASON_SHUTDOWN)
                self._finish_locked(execution, report, was_running=False)
                finished.append((execution, report))
        for execution, report in finished:
            self._deliver(execution, report)
        for execution in busy:
            self._stop(execution)
        backend_clean = self._shutdown_backend(deadline)
        for execution in busy:
            if execution.thread is not None:
                execution.thread.join(max(0.0, deadline - time.monotonic()))
        supervisors_done = not any(e.thread is not None and e.thread.is_alive() for e in busy)
        return backend_clean and supervisors_done and not self.child_pids()

    # ----- reports --------------------------------------------------------------------------

    def _terminal(
        self, execution: Execution, status: ExecutionStatus, **fields: Any
    ) -> ExecutionReport:
        # The one encoding rule (text.py), for every backend: a report always encodes as UTF-8.
        for name in ("error", "reason", "note", "output"):
            if isinstance(fields.get(name), str):
                fields[name] = well_formed(fields[name])
        if "result" in fields:
            try:
                fields["result"] = well_formed_json(fields["result"])
            except TooDeep as exc:
                fields["result"] = None
                fields["note"] = "; ".join(n for n in (fields.get("note"), str(exc)) if n)
        return ExecutionReport(
            execution_id=execution.request.execution_id,
            status=status,
            started_at=execution.started_at,
            finished_at=self._clock.now(),
            pid=execution.pid,
            **fields,
        )

    def _failed_report(self, execution: Execution, reason: str, error: str) -> ExecutionReport:
        return self._terminal(
            execution,
            ExecutionStatus.FAILED,
            reason=reason,
            error=error,
            output=execution.output,
            output_truncated=execution.output_truncated,
        )

    def _cancelled_report(self, execution: Execution, reason: str) -> ExecutionReport:
        # The output the script wrote before it was stopped (live output, below) stays.
        return self._terminal(
            execution,
            ExecutionStatus.CANCELLED,
            reason=reason,
            output=execution.output,
            output_truncated=execution.output_truncated,
        )

    def _append_output(self, execution: Execution, text: str, truncated: bool) -> None:
        """Console output of a running execution, as it arrives; bounded by
        output_limit_bytes (cut on a character boundary) so status() can show it."""
        with self._cond:
            if execution.report is not None:
                return
            room = self.output_limit_bytes - execution.output_bytes
            kept, cut = truncate_utf8(text, max(0, room))
            execution.output += kept
            execution.output_bytes += len(kept.encode("utf-8"))
            execution.output_truncated = execution.output_truncated or truncated or cut

    def _mark_started(self, execution: Execution) -> None:
        """The script has started: stamp started_at and tell the listeners."""
        with self._cond:
            if execution.started_at is not None:
                return
            execution.started_at = self._clock.now()
            report = self._snapshot_locked(execution)
        self._emit(report)

    def _snapshot_locked(self, execution: Execution) -> ExecutionReport:
        if execution.report is not None:
            return execution.report
        return ExecutionReport(
            execution_id=execution.request.execution_id,
            status=ExecutionStatus.RUNNING,
            started_at=execution.started_at,
            pid=execution.pid,
            output=execution.output,
            output_truncated=execution.output_truncated,
        )

    def _finish_locked(
        self, execution: Execution, report: ExecutionReport, *, was_running: bool
    ) -> None:
        execution.report = report
        # The code is no longer needed; only the (bounded) report is kept.
        execution.request = dataclasses.replace(execution.request, code="")
        self._reserved -= 1
        if was_running:
            self._running -= 1
        while self._queue and self._running < self.max_concurrent and not self._closed:
            self._start_locked(self._queue.popleft())
        self._evict_locked()
        self._cond.notify_all()

    def _evict_locked(self) -> None:
        excess = len(self._executions) - self._reports_max
        if excess <= 0:
            return
        terminal = [i for i, e in self._executions.items() if e.report is not None]
        for execution_id in terminal[:excess]:
            del self._executions[execution_id]

    def _deliver(self, execution: Execution, report: ExecutionReport) -> None:
        self._emit(report)
        execution.done.set()

    def _emit(self, report: ExecutionReport) -> None:
        with self._cond:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(report)
            except Exception:
                log.exception("engine listener failed")

    def _lookup_locked(self, execution_id: str) -> Execution:
        try:
            return self._executions[execution_id]
        except KeyError:
            raise UnknownExecution(execution_id) from None


def check_range(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidEngineConfig(f"{name} must be an integer within {low}..{high}, not {value!r}")


def check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidEngineConfig(f"{name} must be a positive number of seconds, not {value!r}")
