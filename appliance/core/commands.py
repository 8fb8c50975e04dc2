"""The scheduler state's commands (frozen dataclasses) and the values an apply returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.core.definition import (
    Definition,
)
from appliance.core.state_parts import DropReason

# ---- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateSchedule:
    definition: Definition
    at_s: int


@dataclass(frozen=True)
class DisableSchedule:
    schedule_id: int
    at_s: int


@dataclass(frozen=True)
class DeleteSchedule:
    schedule_id: int
    at_s: int


@dataclass(frozen=True)
class ObservedSchedule:
    """One schedule's selection, planned by the owner from the cursor ``base_cursor_s``."""

    schedule_id: int
    base_cursor_s: int
    cursor_s: int
    slots_s: tuple[int, ...]
    missed: int
    # Each slot's jittered instant, in step with ``slots_s``; empty when the schedule has no
    # jitter (and then not on the wire, so an un-jittered Observe encodes as it always did).
    not_before_s: tuple[int, ...] = ()


@dataclass(frozen=True)
class Observe:
    at_s: int
    entries: tuple[ObservedSchedule, ...]


@dataclass(frozen=True)
class Claim:
    occurrence_id: int
    attempt: int
    at_s: int


@dataclass(frozen=True)
class RecordOutcome:
    """An engine outcome for one attempt: one of ``OUTCOME_EVENTS``' values."""

    occurrence_id: int
    attempt: int
    outcome: str
    at_s: int
    reason: str | None = None
    execution_id: str | None = None


@dataclass(frozen=True)
class Cancel:
    occurrence_id: int
    at_s: int


@dataclass(frozen=True)
class ConfirmCancelled:
    occurrence_id: int
    attempt: int
    at_s: int


@dataclass(frozen=True)
class RetryDue:
    at_s: int


@dataclass(frozen=True)
class FenceNotLaunched:
    occurrence_id: int
    attempt: int
    at_s: int


@dataclass(frozen=True)
class AcknowledgeStopped:
    occurrence_id: int
    dispatcher_and_work_quiesced: bool
    at_s: int


@dataclass(frozen=True)
class Applied:
    """What an apply did: its value, the parts to persist and delete, the new size."""

    value: Any
    touched: frozenset[str]
    deleted: frozenset[str]
    size_bytes: int


@dataclass(frozen=True)
class ObserveReport:
    created: tuple[tuple[int, int, int], ...]  # (schedule_id, occurrence_id, due_s)
    dropped: tuple[tuple[int, DropReason, int], ...]  # (schedule_id, reason, count)
    ignored: tuple[tuple[int, str], ...]  # (schedule_id, why)
    retired: tuple[int, ...]
