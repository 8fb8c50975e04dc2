"""Scheduler configuration and its hard limits (seeds/002: 64 workers, 65,536 tasks)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import InvalidSchedulerConfig

MAX_SCHEDULER_WORKERS = 64
MAX_SCHEDULER_TASKS = 65_536
THREAD_STACK_BYTES = 1024 * 1024
SHUTDOWN_WAIT_SECONDS = 5.0

MAX_DURABLE_TASKS = 1024
OWNER_ID_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
CLAIM_TTL_MS_MIN = 1_000
CLAIM_TTL_MS_MAX = 3_600_000


@dataclass(frozen=True)
class SchedulerConfig:
    max_concurrent_tasks: int = 4
    max_tasks: int = 1024

    def __post_init__(self) -> None:
        if not 1 <= self.max_concurrent_tasks <= MAX_SCHEDULER_WORKERS:
            raise InvalidSchedulerConfig(
                f"max_concurrent_tasks: {self.max_concurrent_tasks} "
                f"not in 1..{MAX_SCHEDULER_WORKERS}"
            )
        if not 1 <= self.max_tasks <= MAX_SCHEDULER_TASKS:
            raise InvalidSchedulerConfig(
                f"max_tasks: {self.max_tasks} not in 1..{MAX_SCHEDULER_TASKS}"
            )

    @property
    def queue_capacity(self) -> int:
        """The internal dispatch queue bound: min(2 x workers, max_tasks)."""
        return min(2 * self.max_concurrent_tasks, self.max_tasks)


@dataclass(frozen=True)
class DurableSchedulerConfigV1:
    """Opt-in durable recovery: who owns the claims and how long a claim lives unrenewed."""

    owner_id: str
    claim_ttl_ms: int = 30_000
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)

    def __post_init__(self) -> None:
        if not OWNER_ID_PATTERN.fullmatch(self.owner_id):
            raise InvalidSchedulerConfig("owner_id: 1..64 characters of A-Za-z0-9_.:-")
        if not CLAIM_TTL_MS_MIN <= self.claim_ttl_ms <= CLAIM_TTL_MS_MAX:
            raise InvalidSchedulerConfig(
                f"claim_ttl_ms: {self.claim_ttl_ms} not in {CLAIM_TTL_MS_MIN}..{CLAIM_TTL_MS_MAX}"
            )

    @property
    def renew_every_ms(self) -> int:
        """Renew at a third of the TTL so two missed renewals still leave the claim valid."""
        return self.claim_ttl_ms // 3
