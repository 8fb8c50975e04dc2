"""Task definitions, the callback context, and the observable results of runs.

A task is a frozen description (what, when, how urgent, how to retry, its limits); the scheduler
owns the mutable state and exposes it only as immutable ``TaskSnapshot`` values.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from .errors import InvalidSchedulerConfig
from .schedules import TaskSchedule

TASK_NAME_BYTES_MAX = 128
PRIORITY_MIN = -1000
PRIORITY_MAX = 1000
RETRIES_MAX = 100
RETRY_DELAY_MAX = timedelta(days=1)
RUNS_MAX = 2**31 - 1


class MisfirePolicy(enum.Enum):
    """What recovery does with a due time that passed while no scheduler owned the task."""

    FIRE_ONCE = "FireOnce"  # run once now; every missed slot coalesces into that run
    SKIP = "Skip"  # drop the missed slots; wait for the next slot after now


class TaskState(enum.Enum):
    SCHEDULED = "scheduled"  # waiting for its due time (or for a free dispatch slot)
    QUEUED = "queued"  # accepted into the bounded worker queue
    RUNNING = "running"
    RETRY_WAITING = "retry_waiting"
    COMPLETED = "completed"  # terminal: one-shot done, max_runs reached or misfire skipped
    FAILED = "failed"  # terminal: retries exhausted on a one-shot, or no representable next run
    CANCELLED = "cancelled"  # terminal: cancelled by handle or by shutdown
    FENCED = "fenced"  # terminal: a newer owner took the durable claim

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED, TaskState.FENCED}
)


class RunOutcome(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TaskCancelled(Exception):
    """A callback may raise this after seeing ``is_cancelled()`` to report a cancelled run."""


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` additional attempts after a failure, each ``delay`` after it finished."""

    max_retries: int = 0
    delay: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        if not 0 <= self.max_retries <= RETRIES_MAX:
            raise InvalidSchedulerConfig(f"retry.max_retries: {self.max_retries} not in 0..100")
        if not timedelta(0) <= self.delay <= RETRY_DELAY_MAX:
            raise InvalidSchedulerConfig(f"retry.delay: {self.delay} not in 0..1 day")


@dataclass(frozen=True)
class TaskLimits:
    """Explicit per-task limits; ``max_runs`` None means unbounded for recurring schedules."""

    max_runs: int | None = None

    def __post_init__(self) -> None:
        if self.max_runs is not None and not 1 <= self.max_runs <= RUNS_MAX:
            raise InvalidSchedulerConfig(f"limits.max_runs: {self.max_runs} not in 1..2^31-1")


@dataclass(frozen=True)
class ScheduledTask:
    """What to run, when, and how: priority orders due work (higher first)."""

    name: str
    schedule: TaskSchedule
    callback: Callable[[TaskContext], object]
    priority: int = 0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    limits: TaskLimits = field(default_factory=TaskLimits)
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE

    def __post_init__(self) -> None:
        if not 1 <= len(self.name.encode()) <= TASK_NAME_BYTES_MAX:
            raise InvalidSchedulerConfig(f"task.name: must be 1..{TASK_NAME_BYTES_MAX} bytes")
        if not PRIORITY_MIN <= self.priority <= PRIORITY_MAX:
            raise InvalidSchedulerConfig(f"task.priority: {self.priority} not in -1000..1000")
        if not callable(self.callback):
            raise InvalidSchedulerConfig("task.callback: must be callable")


class TaskContext:
    """What a callback sees: identity, attempt, fencing epoch and cooperative cancellation."""

    __slots__ = ("_cancel", "attempt", "due", "fencing_epoch", "task_id", "task_name")

    def __init__(
        self,
        task_id: int,
        task_name: str,
        attempt: int,
        due: datetime,
        fencing_epoch: int | None,
        cancel: threading.Event,
    ):
        self.task_id = task_id
        self.task_name = task_name
        self.attempt = attempt
        self.due = due
        self.fencing_epoch = fencing_epoch  # None for process-local tasks
        self._cancel = cancel

    def is_cancelled(self) -> bool:
        """True once the task was cancelled or the scheduler is shutting down."""
        return self._cancel.is_set()

    def wait_cancelled(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s`` real seconds, waking early on cancellation."""
        return self._cancel.wait(timeout_s)


class RunResult(NamedTuple):
    """The outcome of one attempt of one run (immutable; a tuple because one is built per run)."""

    outcome: RunOutcome
    attempt: int
    due: datetime
    started_at: datetime
    finished_at: datetime
    fencing_epoch: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class TaskSnapshot:
    task_id: int
    name: str
    state: TaskState
    next_due: datetime | None
    attempt: int
    runs_completed: int
    priority: int
    durable_key: str | None = None
    last_result: RunResult | None = None
    error: str | None = None


@dataclass(frozen=True)
class SchedulerSnapshot:
    tasks: tuple[TaskSnapshot, ...]
    registered_task_count: int
    queued_task_count: int
    running_task_count: int
    queue_saturation_count: int
    live_thread_count: int
    admission_open: bool
