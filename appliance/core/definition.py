"""Schedule definitions: the value an operator creates (SPEC §3).

These are the shared types; parsing and validation of the JSON form live in this module too.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class MissedSkip:
    """Only the latest due slot, and only within the grace window."""


@dataclass(frozen=True)
class MissedRunOnce:
    """All unobserved slots coalesce into the newest."""


@dataclass(frozen=True)
class MissedCatchUp:
    """The newest ``cap`` slots, in chronological order."""

    cap: int


MissedPolicy = MissedSkip | MissedRunOnce | MissedCatchUp


class OverlapPolicy(enum.Enum):
    SKIP = "Skip"
    QUEUE = "Queue"
    CONCURRENT = "Concurrent"


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 0
    delay_seconds: int = 0


@dataclass(frozen=True)
class Policy:
    missed: MissedPolicy
    overlap: OverlapPolicy
    retry: RetryPolicy


@dataclass(frozen=True)
class Definition:
    code: str
    cron: str
    timezone: str
    policy: Policy
    name: str | None = None
