"""``appliance.local``: a bounded in-process scheduler sharing the appliance's calendar core.

This is a local scheduler, not a durable business workflow or a distributed queue. See
docs/local/guide.en.md.
"""

from .clock import Clock, ManualClock, SystemClock
from .config import (
    MAX_DURABLE_TASKS,
    MAX_SCHEDULER_TASKS,
    MAX_SCHEDULER_WORKERS,
    THREAD_STACK_BYTES,
    DurableSchedulerConfigV1,
    SchedulerConfig,
)
from .durable import (
    Claim,
    DurableTaskRecord,
    FileStateProvider,
    MemoryStateProvider,
    Receipt,
    SchedulerStateProvider,
    SqliteStateProvider,
)
from .errors import (
    ClaimConflict,
    ClaimLost,
    DurabilityNotConfigured,
    InvalidSchedulerConfig,
    ProviderLocked,
    SchedulerClosed,
    SchedulerError,
    ShutdownIncomplete,
    SnapshotCorrupt,
    SnapshotTooLarge,
    StateProviderError,
    TaskLimitExceeded,
)
from .placement import (
    Candidate as PlacementCandidate,
)
from .placement import (
    Evaluation,
    InvalidPlacementInput,
    PlacementDecision,
    PlacementEngine,
    Rejection,
    ResourceRequest,
    Resources,
)
from .scheduler import Scheduler, TaskHandle
from .schedules import TaskSchedule
from .tasks import (
    MisfirePolicy,
    RetryPolicy,
    RunOutcome,
    RunResult,
    ScheduledTask,
    SchedulerSnapshot,
    TaskCancelled,
    TaskContext,
    TaskLimits,
    TaskSnapshot,
    TaskState,
)

__all__ = [
    "MAX_DURABLE_TASKS",
    "MAX_SCHEDULER_TASKS",
    "MAX_SCHEDULER_WORKERS",
    "THREAD_STACK_BYTES",
    "Claim",
    "ClaimConflict",
    "ClaimLost",
    "Clock",
    "DurabilityNotConfigured",
    "DurableSchedulerConfigV1",
    "DurableTaskRecord",
    "Evaluation",
    "FileStateProvider",
    "InvalidPlacementInput",
    "InvalidSchedulerConfig",
    "ManualClock",
    "MemoryStateProvider",
    "MisfirePolicy",
    "PlacementCandidate",
    "PlacementDecision",
    "PlacementEngine",
    "ProviderLocked",
    "Receipt",
    "Rejection",
    "ResourceRequest",
    "Resources",
    "RetryPolicy",
    "RunOutcome",
    "RunResult",
    "ScheduledTask",
    "Scheduler",
    "SchedulerClosed",
    "SchedulerConfig",
    "SchedulerError",
    "SchedulerSnapshot",
    "SchedulerStateProvider",
    "ShutdownIncomplete",
    "SnapshotCorrupt",
    "SnapshotTooLarge",
    "SqliteStateProvider",
    "StateProviderError",
    "SystemClock",
    "TaskCancelled",
    "TaskContext",
    "TaskHandle",
    "TaskLimitExceeded",
    "TaskLimits",
    "TaskSchedule",
    "TaskSnapshot",
    "TaskState",
]
