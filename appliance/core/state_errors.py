"""Errors of the scheduler state's commands: each names the rule a refused command broke.

A command that raises one of these (all :class:`CoreError`) changed nothing.
"""

from __future__ import annotations

from appliance.core.errors import CoreError

# ---- errors ------------------------------------------------------------------------------------


class InvalidCommand(CoreError):
    """A command whose fields are malformed (out-of-range instant, unsorted slots, ...)."""


class UnknownSchedule(CoreError):
    """No such schedule (never created, or deleted)."""


class UnknownOccurrence(CoreError):
    """No such occurrence (never created, or retired from retention)."""


class AttemptMismatch(CoreError):
    """The command names another attempt than the record's current one."""


class ScheduleLimitReached(CoreError):
    """Creating one more schedule would exceed ``limits.schedules``."""


class CheckpointFull(CoreError):
    """The change would pass the checkpoint byte cap (or the growth budget below it)."""


class ClaimRefused(CoreError):
    """A Pending occurrence may not start now (running limit, Queue order, active work)."""


class RetryNotDue(CoreError):
    """A retry-waiting occurrence is claimed before its committed retry_due."""


class CorruptState(CoreError):
    """A serialized state that does not decode to exactly itself."""


class Paused(CoreError):
    """Scheduling is paused (``pause``): the command would create or start work."""


class OutstandingLimitReached(CoreError):
    """An operator command's occurrences would exceed ``limits.outstanding`` (or ``records``)."""
