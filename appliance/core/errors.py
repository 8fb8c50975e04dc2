"""Errors raised by the policy core.

Every message names the field and the problem, so that a CLI, a management reply or a log line can
show it unchanged.
"""

from __future__ import annotations


class CoreError(Exception):
    """Base of every error the policy core raises on purpose."""


class InvalidSchedule(CoreError, ValueError):
    """A cron expression, timezone or instant that cannot define a schedule."""


class InvalidDefinition(CoreError, ValueError):
    """A schedule definition that violates the contract (SPEC §3)."""


class InvalidConfig(CoreError, ValueError):
    """A runner or worker configuration that violates the contract (SPEC §6, §7).

    ``problems`` lists every ``(field_path, message)`` found, not only the first.
    """

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"{path}: {msg}" for path, msg in self.problems))


class IllegalTransition(CoreError):
    """An occurrence transition the state table does not allow; nothing was changed."""
