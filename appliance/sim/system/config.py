"""The system simulator's settings: constants, options, the result, a process's clock.

See appliance/sim/system/world.py for the theory of operation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Protocol

from appliance.core.limits import Limits
from appliance.secret import Secret

START_S: Final = 1_800_000_000  # the wall clock's origin (2027-01-15)
TICK_MS: Final = 100
WAKE_MS_MAX: Final = 1_000  # an owner's driver wakes at least this often
PROPOSAL_TIMEOUT_MS: Final = 10_000  # then FailedAnswer: it may still commit
FAULT_EVERY_MS_MAX: Final = 3_000
OPERATOR_EVERY_MS_MAX: Final = 8_000
LINK_MS: Final = (1, 30)  # one-way latency voter<->worker
CONNECT_FAIL_MS: Final = 50
EXEC_TIMEOUT_MS: Final = 30_000  # appliance/runner/worker_client.py's read timeouts
OBSERVE_TIMEOUT_MS: Final = 5_000
CANCEL_TIMEOUT_MS: Final = 30_000
ADMIT_TIMEOUT_MS: Final = 15_000  # appliance/worker/admission.py's read timeout
ADMISSION_ROUTE_MS_MAX: Final = 10_000  # the route answers 503 "uncertain" past this
NAMESPACE: Final = "sim"
WORKER_ID: Final = "worker-1"
WORKER: Final = "worker"
FLEET_WORKERS_MAX: Final = 4  # the fleet profile's largest fleet
CODE: Final = "console.log('tick')"
BEARER: Final = Secret("sim-bearer")
LIMITS: Final = Limits(schedules=4, records=256, outstanding=64, running=16)
DEFINITION: Final = {
    "name": "every-minute",
    "code": CODE,
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": {"CatchUp": {"cap": 3}},
        "overlap": "Concurrent",
        "retry": {"max_retries": 1, "delay_seconds": 30},
    },
}


@dataclass(frozen=True)
class SystemOptions:
    voters: int = 3
    safety_ms: int = 60_000
    liveness_ms: int = 90_000
    time_scale: float = 6.0
    faults: bool = True
    strict_unknown: bool = True  # issue 23: fail any Unknown without a committed permit
    # Issue 31: an exception inside an owner fails the seed. False: production's behaviour
    # (logged as loop_error, the decision dropped, the run goes on).
    strict: bool = True
    timeout_seconds: int = 20  # the remote grant's engine timeout (wall seconds)
    # Retention profile (issue 19): a records limit this small retires records within a run, so
    # the owners state a rising floor W and the worker prunes; its faults also replay exec
    # requests to the worker later (a duplicated request), which is what pruning must survive.
    # 0: the default LIMITS and no replays (every seed's random stream as before).
    records: int = 0
    # Burst profile (issue 17): this many copies of the every-minute schedule, so that several
    # occurrences fall due at once and wait in the engine's queue. 1: every seed as before.
    schedules: int = 1
    # Fleet profile (issue 33): each seed runs 1-4 workers (its own draw), with worker crashes,
    # partitions between voters and single workers, and drains. False: one worker, as before.
    fleet: bool = False


def liveness_ms_for(schedules: int) -> int:
    """The liveness phase's default length: a burst settles one engine slot's worth at a time,
    retries and re-claims after fences included, so it grows with the schedule's copies."""
    return SystemOptions.liveness_ms * max(1, schedules)


def limits_for(options: SystemOptions) -> Limits:
    if not options.records:
        return LIMITS
    return Limits(
        schedules=LIMITS.schedules,
        records=options.records,
        outstanding=min(LIMITS.outstanding, options.records),
        running=min(LIMITS.running, options.records),
    )


@dataclass
class SystemResult:
    seed: int
    ok: bool = True
    violation: str = ""
    rule: str = ""
    events: int = 0
    occurrences: int = 0
    states: dict[str, int] = field(default_factory=dict)
    permits: int = 0
    launches: int = 0
    unknown_with_permit: int = 0
    unknown_without_permit: int = 0
    voter_crashes: int = 0
    worker_crashes: int = 0
    power_losses: int = 0
    workers: int = 1  # the fleet's size in this seed
    log_entries: int = 0
    retained_through: int = 0  # the reference replica's W at the end
    worker_pruned: int = 0  # invocation records the worker pruned (retention profile)
    reached: dict[str, int] = field(default_factory=dict)  # which rules the run exercised


class ProcessCrash(Exception):
    """The simulated process died at this point (a crash hook, or a fault)."""


class SimTime(Protocol):
    now_ms: int
    options: SystemOptions


class Clock:
    """A process's wall clock: the simulation's time plus this process's own offset."""

    def __init__(self, sim: SimTime) -> None:
        self._sim = sim
        self.offset_ms = 0

    def wall_s(self) -> float:
        return START_S + (self._sim.now_ms + self.offset_ms) / 1000 * self._sim.options.time_scale

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.wall_s(), UTC)
