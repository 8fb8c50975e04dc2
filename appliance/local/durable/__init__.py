"""Durable state providers for the local scheduler (opt-in; see Scheduler.with_state_provider)."""

from .file import FileStateProvider
from .provider import MemoryStateProvider, SchedulerStateProvider
from .records import RECEIPTS_PER_TASK_MAX, Claim, DurableTaskRecord, Receipt
from .snapshot import SNAPSHOT_BYTES_MAX
from .sqlite import SqliteStateProvider

__all__ = [
    "RECEIPTS_PER_TASK_MAX",
    "SNAPSHOT_BYTES_MAX",
    "Claim",
    "DurableTaskRecord",
    "FileStateProvider",
    "MemoryStateProvider",
    "Receipt",
    "SchedulerStateProvider",
    "SqliteStateProvider",
]
