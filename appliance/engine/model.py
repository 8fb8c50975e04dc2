"""Values that cross the engine's API: requests, reports, statuses, errors and limits."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

MIB = 1024 * 1024

# Bounds on what a request may ask for. heap_mb and timeout_seconds come from the grant's binding.
HEAP_MB_MIN = 16
HEAP_MB_MAX = 16384
TIMEOUT_SECONDS_MAX = 24 * 3600
CODE_BYTES_MAX = 512 * 1024

# Bounds on the engine's configuration (seeds/002: at most 64 workers).
MAX_CONCURRENT_LIMIT = 64
MAX_QUEUED_LIMIT = 1024
OUTPUT_LIMIT_BYTES_MAX = 256 * 1024
RESULT_LIMIT_BYTES_DEFAULT = 64 * 1024
ERROR_LIMIT_BYTES = 8 * 1024

# How long a timed-out or out-of-memory script gets to hand over its last console text (the
# child, sandbox.py; the parent's backstop allows for it).
OUTPUT_GRACE_SECONDS = 0.25
# How long disposing of everything an execution started may take in the child when the run
# does not say (the engine sends child_recycle_timeout_seconds).
DISPOSE_SECONDS_DEFAULT = 2.0

# Reasons carried by terminal reports.
REASON_EXCEPTION = "uncaught exception"
REASON_OUT_OF_MEMORY = "out of memory"
REASON_TIMEOUT = "timeout"
REASON_CANCELLED = "cancelled"
REASON_SHUTDOWN = "engine shutdown"
REASON_CHILD_DIED = "engine child died"
REASON_CHILD_START = "engine child failed to start"
REASON_PROTOCOL = "engine protocol error"


class ExecutionStatus(enum.Enum):
    """SPEC §7. RUNNING also covers "accepted, waiting for a free slot" (started_at is None)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self is not ExecutionStatus.RUNNING


class EngineError(Exception):
    """Base class of the engine's errors."""


class PoolFull(EngineError):
    """No capacity left: max_concurrent running plus max_queued waiting are all reserved."""


class EngineClosed(EngineError):
    """The engine is shutting down or shut down; it admits nothing new."""


class CapabilityError(EngineError):
    """A submit capability was copied, pickled, reused or misused."""


class SubmitRefused(EngineError):
    """The re-check callback did not confirm the durable consume record: nothing was submitted."""


class UnknownExecution(EngineError, KeyError):
    """No execution with that id is known to this engine."""


class DuplicateExecution(EngineError):
    """An execution with that id was already submitted to this engine."""


class InvalidExecutionRequest(EngineError, ValueError):
    """The request violates a limit (heap, timeout, code size, identifiers)."""


class InvalidEngineConfig(EngineError, ValueError):
    """The engine's own settings are out of bounds."""


@dataclass(frozen=True)
class ScheduledInfo:
    """What the script sees as the frozen ``scheduled`` object (SPEC §7)."""

    namespace: str
    schedule_id: str | int
    schedule_name: str | None
    occurrence_id: str | int
    attempt: int
    ownership_epoch: int
    due_time: str

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "schedule_id": self.schedule_id,
            "schedule_name": self.schedule_name,
            "occurrence_id": self.occurrence_id,
            "attempt": self.attempt,
            "ownership_epoch": self.ownership_epoch,
            "due_time": self.due_time,
        }


@dataclass(frozen=True)
class ExecutionRequest:
    execution_id: str
    code: str
    scheduled: ScheduledInfo
    heap_mb: int
    timeout_seconds: float

    def validate(self) -> None:
        problems = []
        if not self.execution_id or len(self.execution_id) > 256:
            problems.append("execution_id must be 1..256 characters")
        if len(self.code.encode("utf-8")) > CODE_BYTES_MAX:
            problems.append(f"code exceeds {CODE_BYTES_MAX} bytes")
        if isinstance(self.heap_mb, bool) or not isinstance(self.heap_mb, int):
            problems.append("heap_mb must be an integer")
        elif not HEAP_MB_MIN <= self.heap_mb <= HEAP_MB_MAX:
            problems.append(f"heap_mb must be within {HEAP_MB_MIN}..{HEAP_MB_MAX}")
        if isinstance(self.timeout_seconds, bool) or not isinstance(
            self.timeout_seconds, int | float
        ):
            problems.append("timeout_seconds must be a number")
        elif not 0 < self.timeout_seconds <= TIMEOUT_SECONDS_MAX:
            problems.append(f"timeout_seconds must be within (0, {TIMEOUT_SECONDS_MAX}]")
        if isinstance(self.scheduled.attempt, bool) or not isinstance(self.scheduled.attempt, int):
            problems.append("scheduled.attempt must be an integer")
        if problems:
            raise InvalidExecutionRequest("; ".join(problems))


@dataclass(frozen=True)
class ExecutionReport:
    """What is known about one execution at one moment."""

    execution_id: str
    status: ExecutionStatus
    result: Any = None
    error: str | None = None
    reason: str | None = None
    note: str | None = None
    output: str = ""
    output_truncated: bool = False
    started_at: datetime | None = None
    finished_at: datetime | None = None
    pid: int | None = None
    # The attempt's egress report (appliance/egress/__init__.py), None when scripts have no fetch.
    egress: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "status": self.status.value,
            "result": self.result,
            "error": self.error,
            "reason": self.reason,
            "note": self.note,
            "output": self.output,
            "output_truncated": self.output_truncated,
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "pid": self.pid,
            "egress": self.egress,
        }


@dataclass(frozen=True)
class EngineStats:
    """Gauges and counters of the pool (seeds/002: queued count and saturation make pressure
    observable)."""

    max_concurrent: int
    max_queued: int
    reserved: int
    running: int
    queued: int
    warm_children: int
    live_children: int
    saturation_events: int
    queued_events: int
    submitted_total: int
    children_spawned_total: int = 0  # real engine: children started (reuse keeps it low)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
