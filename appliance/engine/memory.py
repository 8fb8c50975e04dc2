"""An in-memory engine: the real pool, capability and report rules, without V8 or processes.

For tests and simulations of the worker: it reserves, queues, re-checks, cancels, reports and
shuts down exactly like ``Engine`` (both inherit pool.PoolEngine, and tests/engine/
test_contract.py runs one suite against both), but a *behaviour* stands in for the script.

The default behaviour reads the code as a tiny script language:

- ``spin``: runs until cancelled, or until ``timeout_seconds`` passes (then ``timed_out``);
- ``throw MESSAGE``: ``failed`` with reason "uncaught exception" and error MESSAGE;
- JSON text: ``completed`` with that value as the result;
- anything else: ``completed`` with a null result and a note (no JavaScript is run).

A behaviour is ``(request, stop) -> ScriptOutcome | None``; ``stop`` is set when the execution
is cancelled, and returning None means "stopped as asked". An outcome returned after a cancel
wins, like a completion that wins the race in the real engine.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.engine.clock import Clock
from appliance.engine.model import (
    REASON_CANCELLED,
    REASON_EXCEPTION,
    REASON_TIMEOUT,
    ExecutionReport,
    ExecutionRequest,
    ExecutionStatus,
)
from appliance.engine.pool import Execution, PoolEngine
from appliance.engine.protocol import truncate_utf8


@dataclass(frozen=True)
class ScriptOutcome:
    status: ExecutionStatus
    result: Any = None
    error: str | None = None
    reason: str | None = None
    note: str | None = None
    output: str = ""


Behaviour = Callable[[ExecutionRequest, threading.Event], ScriptOutcome | None]


def default_behaviour(request: ExecutionRequest, stop: threading.Event) -> ScriptOutcome | None:
    code = request.code.strip()
    if code == "spin":
        if stop.wait(request.timeout_seconds):
            return None
        return ScriptOutcome(ExecutionStatus.TIMED_OUT, reason=REASON_TIMEOUT)
    if code.startswith("throw "):
        message = code.removeprefix("throw ")
        return ScriptOutcome(ExecutionStatus.FAILED, error=message, reason=REASON_EXCEPTION)
    try:
        return ScriptOutcome(ExecutionStatus.COMPLETED, result=json.loads(code))
    except ValueError:
        return ScriptOutcome(
            ExecutionStatus.COMPLETED, note="the in-memory engine does not run JavaScript"
        )


class InMemoryEngine(PoolEngine):
    """Same contract as Engine; behaviours run in the supervisor threads, no child processes."""

    def __init__(
        self,
        max_concurrent: int = 4,
        max_queued: int = 8,
        output_limit_bytes: int = 64 * 1024,
        clock: Clock | None = None,
        *,
        behaviour: Behaviour = default_behaviour,
        reports_max: int = 1024,
    ) -> None:
        super().__init__(max_concurrent, max_queued, output_limit_bytes, clock, reports_max)
        self._behaviour = behaviour

    def _execute(self, execution: Execution) -> ExecutionReport:
        stop = threading.Event()
        with self._cond:
            if execution.cancel_reason is not None:
                return self._cancelled_report(execution, execution.cancel_reason)
            execution.backend = stop
        self._mark_started(execution)
        outcome = self._behaviour(execution.request, stop)
        if outcome is None:
            return self._cancelled_report(execution, execution.cancel_reason or REASON_CANCELLED)
        output, cut = truncate_utf8(outcome.output, self.output_limit_bytes)
        return self._terminal(
            execution,
            outcome.status,
            result=outcome.result,
            error=outcome.error,
            reason=outcome.reason,
            note=outcome.note,
            output=output,
            output_truncated=cut,
        )

    def _stop(self, execution: Execution) -> None:
        with self._cond:
            stop = execution.backend
        if stop is not None:
            stop.set()
