"""Errors of the local scheduler library.

Every error a caller can observe derives from :class:`SchedulerError`, so embedding code can catch
one type. Invalid schedules and unrepresentable deadlines reuse the core's ``InvalidSchedule``.
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Base of every error the local scheduler raises on purpose."""


class InvalidSchedulerConfig(SchedulerError, ValueError):
    """A ``SchedulerConfig``, ``DurableSchedulerConfigV1`` or task field outside its limits."""


class SchedulerClosed(SchedulerError):
    """Admission is closed: shutdown was requested, so no task can be scheduled."""


class TaskLimitExceeded(SchedulerError):
    """Registering one more task would exceed ``SchedulerConfig.max_tasks``."""


class ShutdownIncomplete(SchedulerError):
    """``shutdown()`` returned with the coordinator or a callback thread still live.

    The scheduler must be quarantined: its threads are detached and their effects may continue.
    """


class DurabilityNotConfigured(SchedulerError):
    """``schedule_durable`` on a scheduler built without ``Scheduler.with_state_provider``."""


class StateProviderError(SchedulerError):
    """Base of durable state provider failures."""


class ProviderLocked(StateProviderError):
    """Another provider instance (this process or another) holds the state lock."""


class SnapshotCorrupt(StateProviderError):
    """A V1 snapshot failed its checksum, bound or structure checks; nothing was loaded."""


class SnapshotTooLarge(StateProviderError):
    """A V1 snapshot would exceed (or exceeds) ``SNAPSHOT_BYTES_MAX``."""


class ClaimConflict(StateProviderError):
    """Another owner holds an unexpired claim on the task; ``retry_at`` is when it lapses."""

    def __init__(self, message: str, retry_at):
        super().__init__(message)
        self.retry_at = retry_at


class ClaimLost(StateProviderError):
    """The claim was fenced by a newer epoch or expired and was taken; the receipt is refused."""
