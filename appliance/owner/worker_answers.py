"""The worker's answers as the owner acts on them (wire protocol 1, docs/protocol.md).

A leaf module: the owner core (appliance/owner/owner.py) reads these without importing the HTTP
client that produces them (appliance/runner/worker_client.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.protocol.v1 import CAPACITY_FIELDS


@dataclass(frozen=True)
class Capacity:
    """What the worker's engine could still take when it answered (docs/protocol.md,
    "Capacity"): ``free_slots`` start at once, ``queue_room`` wait in its queue."""

    max_concurrent: int
    max_queued: int
    free_slots: int
    queue_room: int

    @property
    def takes(self) -> int:
        """The most executions the worker holds at once (running and queued)."""
        return self.max_concurrent + self.max_queued


CAPACITY_MAX = 1 << 20  # far above any engine's limits: a larger number is not a capacity


def capacity_of(value: Any) -> Capacity | None:
    """The ``capacity`` object of a worker answer, or None when it is absent or malformed (an
    older worker states none: the owner then dispatches as it always did)."""
    if not isinstance(value, dict):
        return None
    numbers = [value.get(name) for name in CAPACITY_FIELDS]
    if not all(type(n) is int and 0 <= n <= CAPACITY_MAX for n in numbers):
        return None
    capacity = Capacity(*numbers)  # type: ignore[arg-type]
    if capacity.max_concurrent < 1 or capacity.free_slots + capacity.queue_room > capacity.takes:
        return None
    return capacity


@dataclass(frozen=True)
class ExecResult:
    kind: str  # accepted | refused | not_dispatched | uncertain | retired
    execution_id: str | None = None
    code: str | None = None
    detail: str = ""
    capacity: Capacity | None = None  # the worker's, when its answer stated it
    protocol_answer: bool = False  # a protocol-1 document came back (with or without capacity)


@dataclass(frozen=True)
class ObserveResult:
    # reserved, running, completed, failed, timed_out, cancelled, lost, fenced; retired (at or
    # below the retention floor W: the worker keeps nothing and launches nothing)
    status: str | None
    document: dict[str, Any] | None = None
    detail: str = ""
    capacity: Capacity | None = None  # the worker's, when its answer stated it
    answered: bool = False  # a protocol-1 document came back, whatever it said (a 404 too)


@dataclass(frozen=True)
class CancelResult:
    result: str | None  # fenced_before_consume, stopped, completed, stopping, unknown
    report: dict[str, Any] | None = None
    detail: str = ""


def reached(result: object) -> bool:
    """Whether a worker call's result proves the worker answered (issue 33, reachability): any
    protocol answer does, even a refusal or a 404; a failed connection, a timeout, a reset or an
    answer that is not protocol 1 does not."""
    if isinstance(result, ExecResult):
        return result.protocol_answer or result.kind in ("accepted", "refused", "not_dispatched")
    if isinstance(result, ObserveResult):
        return result.answered or result.status is not None
    if isinstance(result, CancelResult):
        return result.result is not None
    return False
