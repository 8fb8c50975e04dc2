"""The deterministic scheduler state: schedules, occurrences, commands and their pure apply.

Theory of operation
-------------------
Every replica holds one :class:`SchedulerState` and changes it only through :func:`apply` with a
committed command (a frozen dataclass). Apply is a function of (state, command) alone: every
instant and every calendar result travels inside the command, computed by the owner (SPEC §2), so
replicas with different clocks or tzdata cannot diverge.

Apply is a compare-and-set. Each command's preconditions (the exact occurrence and attempt, the
state table, the limits, the checkpoint budget) are checked inside a :class:`Txn`, an overlay over
the committed state; only :meth:`Txn.commit` writes, and only after every check passed, so a
rejected command raises a :class:`CoreError` and changes nothing.

The state is a set of named *parts* — ``meta``, ``schedule/<id>`` (the definition),
``progress/<id>`` (cursor and drop counters, which change on every observation) and
``occurrence/<id>`` — whose canonical JSON is cached. The checkpoint is the canonical JSON object
of all parts; each apply reports the parts it touched and deleted, so a store persists only those,
and the total size is tracked incrementally (``1 + sum(len(name) + 4 + len(part))``).

The 4 MiB cap (SPEC §3) is enforced with a *budget*: every part counts at the largest size it can
reach without another growth command — a non-terminal record at ``RECORD_BYTES_MAX``, a progress
part at ``PROGRESS_BYTES_MAX`` — and only creation and observation may raise the budget, refusing
beyond ``CHECKPOINT_BYTES_MAX - HEADROOM_BYTES``. Claims, outcomes, cancellations, fences and
acknowledgements only move a part within its reservation, so they always fit. The headroom is left
for the runner's own parts (ownership, claims, permits).

Extending (the runner's ownership, claims and permits): a new command is a new frozen dataclass
plus a function registered with :func:`register`; it works on the same ``Txn`` and inherits the
all-or-nothing commit. Its own parts are registered with :func:`register_part_kind` and written
with ``Txn.put_extra`` (sized, budgeted, serialized and reloaded like the core's), and
:func:`on_retire` hooks delete what is bound to a record when retention retires it.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple, TypeVar

from appliance.core.canonical import canonical_json
from appliance.core.definition import (
    Definition,
    MissedCatchUp,
    MissedPolicy,
    MissedRunOnce,
    MissedSkip,
    OverlapPolicy,
    Policy,
    RetryPolicy,
    definition_to_json,
)
from appliance.core.errors import CoreError
from appliance.core.limits import CHECKPOINT_BYTES_MAX, Limits, limits_to_json
from appliance.core.occurrence import (
    INSTANT_MAX_S,
    INT_MAX,
    OUTCOME_EVENTS,
    RECORD_BYTES_MAX,
    Event,
    Occurrence,
    OccurrenceState,
    encode_occurrence,
    new_occurrence,
    occurrence_from_json,
    occurrence_to_json,
    transition,
)
from appliance.core.retention import OldestTerminalFirst, drop_retired

SCHEMA_VERSION = 2
HEADROOM_BYTES = 64 * 1024
RECENT_DROPS_MAX = 8
GROWTH_BYTES_MAX = CHECKPOINT_BYTES_MAX - HEADROOM_BYTES

S = OccurrenceState


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


# ---- values ------------------------------------------------------------------------------------


class DropReason(enum.Enum):
    MISSED = "missed"
    OVERLAP = "overlap"
    CAPACITY = "capacity"

    __hash__ = object.__hash__  # identity: see OccurrenceState


DROP_REASONS = tuple(DropReason)
_DROP_NAMES = {reason: reason.value for reason in DropReason}


@dataclass(frozen=True)
class Schedule:
    id: int
    definition: Definition
    enabled: bool
    created_at_s: int


@dataclass(frozen=True)
class DropEvent:
    at_s: int
    reason: DropReason
    count: int


class Progress(NamedTuple):
    """The observation side of a schedule: its cursor and what it dropped (a NamedTuple, like
    Occurrence: every observation builds one per due schedule)."""

    cursor_s: int
    dropped: tuple[int, int, int] = (0, 0, 0)  # in DROP_REASONS order
    recent: tuple[DropEvent, ...] = ()

    def dropped_by(self, reason: DropReason) -> int:
        return self.dropped[DROP_REASONS.index(reason)]


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


@dataclass(frozen=True)
class Counts:
    records: int
    outstanding: int
    running: int
    by_state: dict[str, int]


# ---- part encodings ----------------------------------------------------------------------------


def _frame(name: str) -> int:
    # '"name":' plus the ',' separating it from the next part.
    return len(name) + 4


def _schedule_json(s: Schedule) -> dict:
    return {
        "id": s.id,
        "definition": definition_to_json(s.definition),
        "enabled": s.enabled,
        "created_at": s.created_at_s,
    }


def _missed_from_json(value: Any) -> MissedPolicy:
    if value == "Skip":
        return MissedSkip()
    if value == "RunOnce":
        return MissedRunOnce()
    return MissedCatchUp(cap=value["CatchUp"]["cap"])


def definition_from_checkpoint(value: dict) -> Definition:
    """Structural decode of a definition already validated when it was created.

    Replicas must not re-validate against their own calendar/tzdata when loading a checkpoint or a
    command (a zone their tzdata lacks would make them diverge), so this only rebuilds the value.
    """
    policy = value["policy"]
    return Definition(
        code=value["code"],
        cron=value["cron"],
        timezone=value["timezone"],
        policy=Policy(
            missed=_missed_from_json(policy["missed"]),
            overlap=OverlapPolicy(policy["overlap"]),
            retry=RetryPolicy(
                max_retries=policy["retry"]["max_retries"],
                delay_seconds=policy["retry"]["delay_seconds"],
            ),
        ),
        name=value.get("name"),
    )


def _schedule_from_json(value: dict) -> Schedule:
    return Schedule(
        id=value["id"],
        definition=definition_from_checkpoint(value["definition"]),
        enabled=value["enabled"],
        created_at_s=value["created_at"],
    )


def _progress_json(p: Progress) -> dict:
    return {
        "cursor": p.cursor_s,
        "dropped": {r.value: n for r, n in zip(DROP_REASONS, p.dropped, strict=True)},
        "recent": [[e.at_s, e.reason.value, e.count] for e in p.recent],
    }


def encode_progress(p: Progress) -> bytes:
    """``canonical_json(_progress_json(p))`` by hand: every observation writes one per schedule."""
    missed, overlap, capacity = p.dropped
    recent = ",".join(f'[{e.at_s},"{_DROP_NAMES[e.reason]}",{e.count}]' for e in p.recent)
    return (
        f'{{"cursor":{p.cursor_s},"dropped":{{"capacity":{capacity},"missed":{missed},'
        f'"overlap":{overlap}}},"recent":[{recent}]}}'
    ).encode()


def _progress_from_json(value: dict) -> Progress:
    dropped = value["dropped"]
    return Progress(
        cursor_s=value["cursor"],
        dropped=tuple(dropped[r.value] for r in DROP_REASONS),  # type: ignore[arg-type]
        recent=tuple(DropEvent(at, DropReason(r), n) for at, r, n in value["recent"]),
    )


def _meta_json(limits: Limits, next_schedule_id: int, next_occurrence_id: int) -> dict:
    return {
        "schema": SCHEMA_VERSION,
        "limits": limits_to_json(limits),
        "next_schedule_id": next_schedule_id,
        "next_occurrence_id": next_occurrence_id,
    }


_LONGEST_REASON = max(DROP_REASONS, key=lambda r: len(r.value))
PROGRESS_BYTES_MAX = len(
    encode_progress(
        Progress(
            cursor_s=INSTANT_MAX_S,
            dropped=(INT_MAX, INT_MAX, INT_MAX),
            recent=(DropEvent(INSTANT_MAX_S, _LONGEST_REASON, INT_MAX),) * RECENT_DROPS_MAX,
        )
    )
)


def _schedule_budget(data_bytes: int, schedule: Schedule) -> int:
    # "true" may become "false" by a disable: one byte more, reserved now.
    return data_bytes + (1 if schedule.enabled else 0)


def _occurrence_budget(data_bytes: int, record: Occurrence) -> int:
    return data_bytes if record.terminal else RECORD_BYTES_MAX


# ---- the aggregate -----------------------------------------------------------------------------


class _Index:
    """Derived views kept in step with the records (never serialized; rebuilt on load)."""

    def __init__(self) -> None:
        self.by_state: Counter[OccurrenceState] = Counter()
        self.outstanding = 0
        self.running = 0
        self.nonterminal: Counter[int] = Counter()  # schedule id -> non-terminal records
        self.reserving: Counter[int] = Counter()  # schedule id -> Running/Cancelling/Unknown
        self.pending: dict[int, list[int]] = {}  # schedule id -> Pending ids, ascending
        self.retry_waiting: set[int] = set()
        self.terminal_heap: list[int] = []

    def add(self, r: Occurrence) -> None:
        self.by_state[r.state] += 1
        if r.terminal:
            heapq.heappush(self.terminal_heap, r.id)
            return
        self.outstanding += 1
        self.nonterminal[r.schedule_id] += 1
        if r.reserving:
            self.running += 1
            self.reserving[r.schedule_id] += 1
        if r.state is S.PENDING:
            ids = self.pending.setdefault(r.schedule_id, [])
            if not ids or ids[-1] < r.id:
                ids.append(r.id)
            else:
                bisect.insort(ids, r.id)
            if r.not_before_s is not None:
                self.retry_waiting.add(r.id)

    def remove(self, r: Occurrence) -> None:
        """Forget ``r``; a terminal record's heap entry is dropped separately (retention)."""
        self.by_state[r.state] -= 1
        if r.terminal:
            return
        self.outstanding -= 1
        _decrement(self.nonterminal, r.schedule_id)
        if r.reserving:
            self.running -= 1
            _decrement(self.reserving, r.schedule_id)
        if r.state is S.PENDING:
            ids = self.pending[r.schedule_id]
            ids.remove(r.id)
            if not ids:
                del self.pending[r.schedule_id]
            self.retry_waiting.discard(r.id)


def _decrement(counter: Counter[int], key: int) -> None:
    counter[key] -= 1
    if counter[key] == 0:
        del counter[key]


class SchedulerState:
    """The replicated scheduler state. Change it only with :func:`apply`."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.schedules: dict[int, Schedule] = {}
        self.progress: dict[int, Progress] = {}
        self.occurrences: dict[int, Occurrence] = {}
        # Parts added by extension commands (the runner's ownership, claims, permits): decoded
        # JSON values by part name, kinds registered with ``register_part_kind``.
        self.extra: dict[str, Any] = {}
        self.next_schedule_id = 1
        self.next_occurrence_id = 1
        self._parts: dict[str, bytes] = {}
        self._budgets: dict[str, int] = {}
        self._size_bytes = 1
        self._budget_bytes = 1
        self._index = _Index()
        self._meta_budget = len(canonical_json(_meta_json(limits, INT_MAX, INT_MAX)))
        meta = canonical_json(_meta_json(limits, 1, 1))
        self._write_part("meta", meta, self._meta_budget)

    # -- parts and sizes --

    def _write_part(self, name: str, data: bytes | None, budget: int) -> None:
        frame = len(name) + 4  # '"name":' and the separating ','
        old = self._parts.get(name)
        if old is not None:
            self._size_bytes -= frame + len(old)
            self._budget_bytes -= frame + self._budgets[name]
        if data is None:
            self._parts.pop(name, None)
            self._budgets.pop(name, None)
            return
        self._parts[name] = data
        self._budgets[name] = budget
        self._size_bytes += frame + len(data)
        self._budget_bytes += frame + budget

    @property
    def size_bytes(self) -> int:
        """The exact length of :meth:`to_json`, tracked part by part."""
        return self._size_bytes

    @property
    def budget_bytes(self) -> int:
        """The size the checkpoint may reach without another creation or observation."""
        return self._budget_bytes

    def part_names(self) -> list[str]:
        return sorted(self._parts)

    def part_bytes(self, name: str) -> bytes:
        return self._parts[name]

    def to_json(self) -> bytes:
        """Canonical JSON of the whole state: ``{part name: part value}``."""
        body = b",".join(b'"' + n.encode() + b'":' + self._parts[n] for n in sorted(self._parts))
        return b"{" + body + b"}"

    # -- queries --

    def counts(self) -> Counts:
        idx = self._index
        return Counts(
            records=len(self.occurrences),
            outstanding=idx.outstanding,
            running=idx.running,
            by_state={s.value: idx.by_state[s] for s in OccurrenceState},
        )

    def schedule_counts(self, schedule_id: int) -> dict[str, int]:
        idx = self._index
        pending = idx.pending.get(schedule_id, [])
        return {
            "outstanding": idx.nonterminal[schedule_id],
            "running": idx.reserving[schedule_id],
            "pending": len(pending),
            "retry_waiting": sum(1 for i in pending if i in idx.retry_waiting),
        }

    def pending_ids(self, schedule_id: int) -> tuple[int, ...]:
        return tuple(self._index.pending.get(schedule_id, ()))

    def retry_waiting_ids(self) -> list[int]:
        return sorted(self._index.retry_waiting)

    def next_retry_due_s(self) -> int | None:
        """The earliest not-before of a retry-waiting occurrence (the owner's pulse uses it)."""
        waiting = self._index.retry_waiting
        if not waiting:
            return None
        return min(self.occurrences[i].not_before_s or 0 for i in waiting)


def list_view(state: SchedulerState) -> dict[str, Any]:
    """The operator's ``list``: every schedule with its counters, and every retained record."""
    schedules = []
    for sid in sorted(state.schedules):
        s = state.schedules[sid]
        p = state.progress[sid]
        schedules.append(
            {
                **_schedule_json(s),
                **_progress_json(p),
                "counts": state.schedule_counts(sid),
            }
        )
    occurrences = [occurrence_to_json(state.occurrences[i]) for i in sorted(state.occurrences)]
    counts = state.counts()
    return {
        "schedules": schedules,
        "occurrences": occurrences,
        "counts": {
            "records": counts.records,
            "outstanding": counts.outstanding,
            "running": counts.running,
            "by_state": counts.by_state,
        },
    }


# ---- the transaction ---------------------------------------------------------------------------

_MISSING: Any = object()


class Txn:
    """An overlay over a committed state; nothing reaches the state before :meth:`commit`."""

    def __init__(self, state: SchedulerState):
        self.state = state
        self.limits = state.limits
        self.next_schedule_id = state.next_schedule_id
        self.next_occurrence_id = state.next_occurrence_id
        self._occ: dict[int, Occurrence | None] = {}
        self._sch: dict[int, Schedule | None] = {}
        self._prog: dict[int, Progress | None] = {}
        self._extra: dict[str, Any] = {}
        self._parts: dict[str, tuple[bytes | None, int]] = {}
        self._size_delta = 0
        self._budget_delta = 0
        self._records_delta = 0
        self._schedules_delta = 0
        self._outstanding_delta = 0
        self._running_delta = 0
        self._nonterminal_delta: Counter[int] = Counter()
        self._retention = OldestTerminalFirst(state._index.terminal_heap)
        self.retired: list[int] = []

    # -- reads --

    def occurrence(self, occurrence_id: int) -> Occurrence | None:
        found = self._occ.get(occurrence_id, _MISSING)
        return self.state.occurrences.get(occurrence_id) if found is _MISSING else found

    def schedule(self, schedule_id: int) -> Schedule | None:
        found = self._sch.get(schedule_id, _MISSING)
        return self.state.schedules.get(schedule_id) if found is _MISSING else found

    def progress(self, schedule_id: int) -> Progress | None:
        found = self._prog.get(schedule_id, _MISSING)
        return self.state.progress.get(schedule_id) if found is _MISSING else found

    def require_occurrence(self, occurrence_id: int, attempt: int | None = None) -> Occurrence:
        _check_id("occurrence_id", occurrence_id)
        record = self.occurrence(occurrence_id)
        if record is None:
            retired = occurrence_id < self.state.next_occurrence_id
            why = "retired from retention" if retired else "never created"
            raise UnknownOccurrence(f"occurrence_id: no occurrence {occurrence_id} ({why})")
        if attempt is not None and record.attempt != attempt:
            raise AttemptMismatch(
                f"attempt: occurrence {occurrence_id} is at attempt {record.attempt}, not {attempt}"
            )
        return record

    def require_schedule(self, schedule_id: int) -> Schedule:
        _check_id("schedule_id", schedule_id)
        schedule = self.schedule(schedule_id)
        if schedule is None:
            raise UnknownSchedule(f"id: no schedule {schedule_id}")
        return schedule

    @property
    def records(self) -> int:
        return len(self.state.occurrences) + self._records_delta

    @property
    def schedule_count(self) -> int:
        return len(self.state.schedules) + self._schedules_delta

    @property
    def outstanding(self) -> int:
        return self.state._index.outstanding + self._outstanding_delta

    @property
    def running(self) -> int:
        return self.state._index.running + self._running_delta

    def nonterminal(self, schedule_id: int) -> int:
        base = self.state._index.nonterminal[schedule_id]
        return base + self._nonterminal_delta[schedule_id]

    @property
    def budget_bytes(self) -> int:
        return self.state._budget_bytes + self._budget_delta

    # -- writes --

    def _set_part(self, name: str, data: bytes | None, budget: int) -> None:
        if name in self._parts:
            old_data, old_budget = self._parts[name]
        else:
            old_data = self.state._parts.get(name)
            old_budget = self.state._budgets.get(name, 0)
        if old_data is not None:
            self._size_delta -= _frame(name) + len(old_data)
            self._budget_delta -= _frame(name) + old_budget
        if data is not None:
            self._size_delta += _frame(name) + len(data)
            self._budget_delta += _frame(name) + budget
        self._parts[name] = (data, budget)

    def put_occurrence(self, record: Occurrence) -> None:
        old = self.occurrence(record.id)
        self._count(old, -1)
        self._count(record, +1)
        self._occ[record.id] = record
        data = encode_occurrence(record)
        if len(data) > RECORD_BYTES_MAX:
            raise CoreError(f"invariant: occurrence {record.id} exceeds RECORD_BYTES_MAX")
        self._set_part(f"occurrence/{record.id}", data, _occurrence_budget(len(data), record))

    def add_occurrence(self, record: Occurrence) -> None:
        """A new Pending record (its id above every id so far): the observation's fast path."""
        if record.id < self.state.next_occurrence_id or record.id in self._occ:
            raise CoreError(f"invariant: occurrence {record.id} is not new")
        if record.state is not S.PENDING:
            raise CoreError(f"invariant: new occurrence {record.id} must be Pending")
        self._records_delta += 1
        self._outstanding_delta += 1
        self._nonterminal_delta[record.schedule_id] += 1
        self._occ[record.id] = record
        name = f"occurrence/{record.id}"
        data = encode_occurrence(record)
        self._size_delta += len(name) + 4 + len(data)
        self._budget_delta += len(name) + 4 + RECORD_BYTES_MAX
        self._parts[name] = (data, RECORD_BYTES_MAX)

    def _count(self, record: Occurrence | None, sign: int) -> None:
        if record is None:
            return
        self._records_delta += sign
        if not record.terminal:
            self._outstanding_delta += sign
            self._nonterminal_delta[record.schedule_id] += sign
            if record.reserving:
                self._running_delta += sign

    def retire_occurrence(self, occurrence_id: int) -> None:
        """Remove a terminal record and everything bound to it (the one place that does)."""
        record = self.occurrence(occurrence_id)
        if record is None or not record.terminal:
            raise CoreError(f"invariant: occurrence {occurrence_id} is not a terminal record")
        self._count(record, -1)
        self._occ[occurrence_id] = None
        self._set_part(f"occurrence/{occurrence_id}", None, 0)
        self.retired.append(occurrence_id)
        for hook in _ON_RETIRE:
            hook(self, occurrence_id)

    # -- extension parts --

    def extra(self, name: str) -> Any:
        found = self._extra.get(name, _MISSING)
        return self.state.extra.get(name) if found is _MISSING else found

    def put_extra(self, name: str, value: Any, budget_bytes: int | None = None) -> None:
        """Write an extension part. ``budget_bytes`` is the most it may grow to without another
        growth command (default: its size now); see the checkpoint budget above."""
        kind = name.partition("/")[0]
        if kind not in _PART_KINDS:
            raise CoreError(f"invariant: part kind {kind!r} is not registered")
        data = canonical_json(value)
        budget = len(data) if budget_bytes is None else budget_bytes
        if budget < len(data):
            raise CoreError(f"invariant: part {name!r} is larger than its budget")
        self._extra[name] = value
        self._set_part(name, data, budget)

    def delete_extra(self, name: str) -> None:
        self._extra[name] = None
        self._set_part(name, None, 0)

    def put_schedule(self, schedule: Schedule) -> None:
        if self.schedule(schedule.id) is None:
            self._schedules_delta += 1
        self._sch[schedule.id] = schedule
        data = canonical_json(_schedule_json(schedule))
        self._set_part(f"schedule/{schedule.id}", data, _schedule_budget(len(data), schedule))

    def put_progress(self, schedule_id: int, progress: Progress) -> None:
        self._prog[schedule_id] = progress
        data = encode_progress(progress)
        self._set_part(f"progress/{schedule_id}", data, PROGRESS_BYTES_MAX)

    def delete_schedule(self, schedule_id: int) -> None:
        if self.schedule(schedule_id) is not None:
            self._schedules_delta -= 1
        self._sch[schedule_id] = None
        self._prog[schedule_id] = None
        self._set_part(f"schedule/{schedule_id}", None, 0)
        self._set_part(f"progress/{schedule_id}", None, 0)

    def make_room(self, extra_budget: int = 0, extra_records: int = 0) -> bool:
        """Retire oldest terminal records until the growth fits; False if it cannot."""
        while (
            self.budget_bytes + extra_budget > GROWTH_BYTES_MAX
            or self.records + extra_records > self.limits.records
        ):
            victim = self._retention.next(skip=self._occ)
            if victim is None:
                return False
            self.retire_occurrence(victim)
        return True

    # -- commit --

    def commit(self, value: Any, grows: bool) -> Applied:
        state = self.state
        meta_changed = (self.next_schedule_id, self.next_occurrence_id) != (
            state.next_schedule_id,
            state.next_occurrence_id,
        )
        if meta_changed:
            meta = _meta_json(self.limits, self.next_schedule_id, self.next_occurrence_id)
            self._set_part("meta", canonical_json(meta), state._meta_budget)
        size = state._size_bytes + self._size_delta
        budget = self.budget_bytes
        if grows and budget > GROWTH_BYTES_MAX:
            raise CheckpointFull(
                f"checkpoint: would reserve {budget} bytes, above the growth limit "
                f"{GROWTH_BYTES_MAX} ({CHECKPOINT_BYTES_MAX} minus {HEADROOM_BYTES} headroom)"
            )
        if size > CHECKPOINT_BYTES_MAX:
            raise CheckpointFull(
                f"checkpoint: would be {size} bytes, above the cap {CHECKPOINT_BYTES_MAX}"
            )
        # Past this line nothing raises: the overlay is written in full.
        index = state._index
        retired_terminal: set[int] = set()
        for oid, record in self._occ.items():
            old = state.occurrences.get(oid)
            if old is not None:
                index.remove(old)
                if old.terminal:
                    retired_terminal.add(oid)
            if record is None:
                state.occurrences.pop(oid, None)
            else:
                state.occurrences[oid] = record
                index.add(record)
        drop_retired(index.terminal_heap, retired_terminal)
        for sid, schedule in self._sch.items():
            if schedule is None:
                state.schedules.pop(sid, None)
            else:
                state.schedules[sid] = schedule
        for sid, progress in self._prog.items():
            if progress is None:
                state.progress.pop(sid, None)
            else:
                state.progress[sid] = progress
        for name, extra in self._extra.items():
            if extra is None:
                state.extra.pop(name, None)
            else:
                state.extra[name] = extra
        touched, deleted = set(), set()
        for name, (data, part_budget) in self._parts.items():
            if data is None and name not in state._parts:
                continue
            state._write_part(name, data, part_budget)
            (deleted if data is None else touched).add(name)
        state.next_schedule_id = self.next_schedule_id
        state.next_occurrence_id = self.next_occurrence_id
        return Applied(value, frozenset(touched), frozenset(deleted), state._size_bytes)


# ---- apply -------------------------------------------------------------------------------------

C = TypeVar("C")
_APPLY: dict[type, tuple[Callable[[Txn, Any], Any], bool]] = {}


def register(command_type: type[C], *, grows: bool = False):
    """Register ``fn(txn, command) -> value`` as the apply of ``command_type``.

    ``grows`` marks commands that may add records or schedules: they are refused beyond the growth
    budget. Every other command must only move parts within their reservation.
    """

    def decorate(fn: Callable[[Txn, C], Any]) -> Callable[[Txn, C], Any]:
        if command_type in _APPLY:
            raise ValueError(f"{command_type.__name__} already has an apply")
        _APPLY[command_type] = (fn, grows)
        return fn

    return decorate


_ON_RETIRE: list[Callable[[Txn, int], None]] = []
_PART_KINDS: dict[str, Callable[[Any], int]] = {}
_CORE_PART_KINDS = frozenset({"meta", "schedule", "progress", "occurrence"})


def on_retire(hook: Callable[[Txn, int], None]) -> Callable[[Txn, int], None]:
    """Register ``hook(txn, occurrence_id)``: delete what is bound to a retiring record."""
    _ON_RETIRE.append(hook)
    return hook


def register_part_kind(kind: str, budget_bytes: Callable[[Any], int]) -> None:
    """Allow extension parts named ``<kind>/...``; ``budget_bytes(value)`` gives a loaded part's
    budget (the same value ``put_extra`` was given), so the budget survives a reload."""
    if kind in _CORE_PART_KINDS or kind in _PART_KINDS or "/" in kind:
        raise ValueError(f"part kind {kind!r} is taken or malformed")
    _PART_KINDS[kind] = budget_bytes


def apply(state: SchedulerState, command: Any) -> Applied:
    """Apply a committed command: all of it, or (raising a CoreError) none of it."""
    entry = _APPLY.get(type(command))
    if entry is None:
        raise InvalidCommand(f"command: unknown command type {type(command).__name__}")
    fn, grows = entry
    txn = Txn(state)
    value = fn(txn, command)
    return txn.commit(value, grows)


def _check_instant(field: str, value: Any) -> None:
    if type(value) is not int or not 0 <= value <= INSTANT_MAX_S:
        raise InvalidCommand(f"{field}: must be whole seconds in [0, {INSTANT_MAX_S}]")


def _check_id(field: str, value: Any) -> None:
    if type(value) is not int or not 1 <= value <= INT_MAX:
        raise InvalidCommand(f"{field}: must be an integer id in [1, {INT_MAX}]")


@register(CreateSchedule, grows=True)
def _create_schedule(txn: Txn, cmd: CreateSchedule) -> int:
    _check_instant("at_s", cmd.at_s)
    if not isinstance(cmd.definition, Definition):
        raise InvalidCommand("definition: must be a parsed Definition")
    missed = cmd.definition.policy.missed
    if isinstance(missed, MissedCatchUp) and not 1 <= missed.cap <= txn.limits.outstanding:
        raise InvalidCommand("definition.policy.missed.CatchUp.cap: must be in [1, outstanding]")
    if txn.schedule_count >= txn.limits.schedules:
        raise ScheduleLimitReached(f"schedules: limit of {txn.limits.schedules} schedules reached")
    schedule_id = txn.next_schedule_id
    if schedule_id > INT_MAX:
        raise ScheduleLimitReached("schedules: id space exhausted")
    txn.next_schedule_id += 1
    txn.put_schedule(Schedule(schedule_id, cmd.definition, True, cmd.at_s))
    # Creation schedules strictly after creation time: the cursor starts at the creation instant.
    txn.put_progress(schedule_id, Progress(cursor_s=cmd.at_s))
    txn.make_room()
    return schedule_id


@register(DisableSchedule)
def _disable_schedule(txn: Txn, cmd: DisableSchedule) -> bool:
    _check_instant("at_s", cmd.at_s)
    schedule = txn.require_schedule(cmd.schedule_id)
    if not schedule.enabled:
        return False
    txn.put_schedule(replace(schedule, enabled=False))
    return True


@register(DeleteSchedule)
def _delete_schedule(txn: Txn, cmd: DeleteSchedule) -> tuple[int, ...]:
    """Remove the definition; never-admitted (Pending) occurrences end Cancelled, since nothing
    can dispatch them without the code; admitted ones run on to a terminal state."""
    _check_instant("at_s", cmd.at_s)
    txn.require_schedule(cmd.schedule_id)
    cancelled = txn.state.pending_ids(cmd.schedule_id)
    for oid in cancelled:
        record = txn.require_occurrence(oid)
        txn.put_occurrence(transition(record, Event.SCHEDULE_DELETED, cmd.at_s))
    txn.delete_schedule(cmd.schedule_id)
    return cancelled


def _validate_entry(entry: ObservedSchedule, seen: set[int]) -> None:
    if not isinstance(entry, ObservedSchedule):
        raise InvalidCommand("entries: must be ObservedSchedule values")
    _check_id("schedule_id", entry.schedule_id)
    if entry.schedule_id in seen:
        raise InvalidCommand(f"entries: schedule {entry.schedule_id} appears twice")
    seen.add(entry.schedule_id)
    _check_instant("base_cursor_s", entry.base_cursor_s)
    _check_instant("cursor_s", entry.cursor_s)
    if entry.cursor_s < entry.base_cursor_s:
        raise InvalidCommand("cursor_s: must not be before base_cursor_s")
    if type(entry.missed) is not int or not 0 <= entry.missed <= INT_MAX:
        raise InvalidCommand("missed: must be a non-negative integer")
    previous = entry.base_cursor_s
    for slot in entry.slots_s:
        _check_instant("slots_s", slot)
        if not previous < slot <= entry.cursor_s:
            raise InvalidCommand("slots_s: must increase strictly within (base_cursor_s, cursor_s]")
        previous = slot


def _admit_slot(txn: Txn, schedule_id: int, skip_overlap: bool) -> DropReason | None:
    """Overlap, then capacity: why this slot cannot become an occurrence, or None."""
    if skip_overlap and txn.nonterminal(schedule_id):
        return DropReason.OVERLAP
    if txn.outstanding >= txn.limits.outstanding:
        return DropReason.CAPACITY
    extra_budget = len(_OCCURRENCE_PREFIX) + len(str(txn.next_occurrence_id)) + 4
    extra_budget += RECORD_BYTES_MAX
    if not txn.make_room(extra_budget, extra_records=1):
        return DropReason.CAPACITY
    return None


_OCCURRENCE_PREFIX = "occurrence/"


def _saturating(a: int, b: int) -> int:
    return min(a + b, INT_MAX)


@register(Observe, grows=True)
def _observe(txn: Txn, cmd: Observe) -> ObserveReport:
    _check_instant("at_s", cmd.at_s)
    seen: set[int] = set()
    for entry in cmd.entries:
        _validate_entry(entry, seen)
    at_s = cmd.at_s
    created: list[tuple[int, int, int]] = []
    dropped: list[tuple[int, DropReason, int]] = []
    ignored: list[tuple[int, str]] = []
    for entry in cmd.entries:
        schedule_id = entry.schedule_id
        schedule = txn.schedule(schedule_id)
        if schedule is None:
            ignored.append((schedule_id, "deleted"))
            continue
        if not schedule.enabled:
            ignored.append((schedule_id, "disabled"))
            continue
        progress = txn.progress(schedule_id)
        if progress is None:
            raise CoreError(f"invariant: schedule {schedule_id} has no progress")
        cursor_s = progress.cursor_s
        if entry.cursor_s <= cursor_s:
            ignored.append((schedule_id, "stale"))
            continue
        # The missed count is exact only for a plan made from this very cursor; a replayed or
        # overlapping plan keeps its unconsumed slots but not its count.
        missed = entry.missed if entry.base_cursor_s == cursor_s else 0
        overlap = capacity = 0
        skip_overlap = schedule.definition.policy.overlap is OverlapPolicy.SKIP
        for slot in entry.slots_s:
            if slot <= cursor_s:
                continue  # consumed already: a slot is never armed twice
            reason = _admit_slot(txn, schedule_id, skip_overlap)
            if reason is DropReason.OVERLAP:
                overlap += 1
            elif reason is DropReason.CAPACITY:
                capacity += 1
            else:
                occurrence_id = txn.next_occurrence_id
                txn.next_occurrence_id += 1
                txn.add_occurrence(new_occurrence(occurrence_id, schedule_id, slot, at_s))
                created.append((schedule_id, occurrence_id, slot))
        totals, recent = progress.dropped, progress.recent
        if missed or overlap or capacity:
            counts = (missed, overlap, capacity)  # in DROP_REASONS order
            for reason, count in zip(DROP_REASONS, counts, strict=True):
                if count:
                    recent = (*recent, DropEvent(at_s, reason, count))
                    dropped.append((schedule_id, reason, count))
            totals = tuple(  # type: ignore[assignment]
                _saturating(n, c) for n, c in zip(totals, counts, strict=True)
            )
            recent = recent[-RECENT_DROPS_MAX:]
        txn.put_progress(schedule_id, Progress(entry.cursor_s, totals, recent))
    return ObserveReport(tuple(created), tuple(dropped), tuple(ignored), tuple(txn.retired))


@register(Claim)
def _claim(txn: Txn, cmd: Claim) -> Occurrence:
    """Pending → Running. The running limit and the overlap order gate here; they never drop."""
    _check_instant("at_s", cmd.at_s)
    record = txn.require_occurrence(cmd.occurrence_id, cmd.attempt)
    if record.state is S.PENDING:
        if record.retry_waiting:
            raise RetryNotDue(f"occurrence {record.id}: retry-waiting until {record.not_before_s}")
        if txn.running >= txn.limits.running:
            raise ClaimRefused(f"running: limit of {txn.limits.running} reached")
        schedule = txn.schedule(record.schedule_id)
        if schedule is None:
            raise ClaimRefused(f"occurrence {record.id}: its schedule was deleted")
        overlap = schedule.definition.policy.overlap
        if overlap is not OverlapPolicy.CONCURRENT:
            if txn.state._index.reserving[schedule.id]:
                raise ClaimRefused(f"occurrence {record.id}: schedule has active work")
            head = txn.state.pending_ids(schedule.id)[0]
            if overlap is OverlapPolicy.QUEUE and head != record.id:
                raise ClaimRefused(f"occurrence {record.id}: occurrence {head} is first (Queue)")
    claimed = transition(record, Event.CLAIM, cmd.at_s)
    txn.put_occurrence(claimed)
    return claimed


@register(RecordOutcome)
def _record_outcome(txn: Txn, cmd: RecordOutcome) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    try:
        event = Event(cmd.outcome)
    except ValueError:
        event = None
    if event not in OUTCOME_EVENTS:
        outcomes = ", ".join(sorted(e.value for e in OUTCOME_EVENTS))
        raise InvalidCommand(f"outcome: must be one of {outcomes}")
    for field, value in (("reason", cmd.reason), ("execution_id", cmd.execution_id)):
        if value is not None and not isinstance(value, str):
            raise InvalidCommand(f"{field}: must be a string or null")
    record = txn.require_occurrence(cmd.occurrence_id, cmd.attempt)
    result = transition(record, event, cmd.at_s, reason=cmd.reason, execution_id=cmd.execution_id)
    # Only a confirmed failure of work nobody asked to stop retries (Cancelling + failed is final).
    if result.state is S.FAILED and record.state in (S.RUNNING, S.UNKNOWN):
        schedule = txn.schedule(record.schedule_id)
        retry = schedule.definition.policy.retry if schedule is not None else None
        if retry is not None and result.retries_used < retry.max_retries:
            result = transition(
                result, Event.RETRY, cmd.at_s, retry_delay_seconds=retry.delay_seconds
            )
    txn.put_occurrence(result)
    return result


@register(Cancel)
def _cancel(txn: Txn, cmd: Cancel) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    result = transition(txn.require_occurrence(cmd.occurrence_id), Event.CANCEL, cmd.at_s)
    txn.put_occurrence(result)
    return result


@register(ConfirmCancelled)
def _confirm_cancelled(txn: Txn, cmd: ConfirmCancelled) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    record = txn.require_occurrence(cmd.occurrence_id, cmd.attempt)
    result = transition(record, Event.CANCEL_CONFIRMED, cmd.at_s)
    txn.put_occurrence(result)
    return result


@register(RetryDue)
def _retry_due(txn: Txn, cmd: RetryDue) -> tuple[int, ...]:
    """Make every retry whose not-before is at or before ``at_s`` claimable."""
    _check_instant("at_s", cmd.at_s)
    ready = []
    for oid in txn.state.retry_waiting_ids():
        record = txn.require_occurrence(oid)
        if record.not_before_s is not None and record.not_before_s <= cmd.at_s:
            txn.put_occurrence(transition(record, Event.RETRY_DUE, cmd.at_s))
            ready.append(oid)
    return tuple(ready)


@register(FenceNotLaunched)
def _fence_not_launched(txn: Txn, cmd: FenceNotLaunched) -> Occurrence:
    """A provably never-admitted attempt: claim again as attempt + 1, no retry spent."""
    _check_instant("at_s", cmd.at_s)
    record = txn.require_occurrence(cmd.occurrence_id, cmd.attempt)
    result = transition(record, Event.FENCED_NOT_LAUNCHED, cmd.at_s)
    if result.state is S.PENDING and txn.schedule(record.schedule_id) is None:
        result = transition(result, Event.SCHEDULE_DELETED, cmd.at_s)
    txn.put_occurrence(result)
    return result


@register(AcknowledgeStopped)
def _acknowledge_stopped(txn: Txn, cmd: AcknowledgeStopped) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    record = txn.require_occurrence(cmd.occurrence_id)
    result = transition(
        record,
        Event.ACKNOWLEDGE_STOPPED,
        cmd.at_s,
        attested=cmd.dispatcher_and_work_quiesced is True,
    )
    txn.put_occurrence(result)
    return result


# ---- serialisation -----------------------------------------------------------------------------


def to_json(state: SchedulerState) -> bytes:
    return state.to_json()


def from_json(data: bytes) -> SchedulerState:
    """Decode a checkpoint; it must re-encode to exactly the same bytes (else CorruptState)."""
    try:
        parts = json.loads(data)
        meta = parts["meta"]
        if meta["schema"] != SCHEMA_VERSION:
            raise CorruptState(f"schema: version {meta['schema']}, expected {SCHEMA_VERSION}")
        state = SchedulerState(Limits(**meta["limits"]))
        state.next_schedule_id = meta["next_schedule_id"]
        state.next_occurrence_id = meta["next_occurrence_id"]
        state._write_part("meta", canonical_json(meta), state._meta_budget)
        for name, value in parts.items():
            kind, _, _ = name.partition("/")
            if kind == "schedule":
                schedule = _schedule_from_json(value)
                state.schedules[schedule.id] = schedule
                data_part = canonical_json(_schedule_json(schedule))
                state._write_part(name, data_part, _schedule_budget(len(data_part), schedule))
            elif kind == "progress":
                progress = _progress_from_json(value)
                state.progress[int(name.partition("/")[2])] = progress
                state._write_part(name, encode_progress(progress), PROGRESS_BYTES_MAX)
            elif kind == "occurrence":
                record = occurrence_from_json(value)
                state.occurrences[record.id] = record
                state._index.add(record)
                data_part = encode_occurrence(record)
                state._write_part(name, data_part, _occurrence_budget(len(data_part), record))
            elif kind in _PART_KINDS:
                state.extra[name] = value
                state._write_part(name, canonical_json(value), _PART_KINDS[kind](value))
            elif kind != "meta":
                raise CorruptState(f"checkpoint: unknown part {name!r}")
    except CorruptState:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CorruptState(f"checkpoint: cannot decode ({err!r})") from err
    if set(state.schedules) != set(state.progress):
        raise CorruptState("checkpoint: schedule and progress parts do not match")
    if any(sid >= state.next_schedule_id for sid in state.schedules) or any(
        oid >= state.next_occurrence_id for oid in state.occurrences
    ):
        raise CorruptState("checkpoint: an id is above its high-water mark")
    if state.to_json() != data:
        raise CorruptState("checkpoint: does not re-encode to the same bytes")
    return state


# -- commands on the wire (the runner replicates them as canonical JSON) --

COMMAND_TYPES: dict[str, type] = {
    t.__name__: t
    for t in (
        CreateSchedule,
        DisableSchedule,
        DeleteSchedule,
        Observe,
        Claim,
        RecordOutcome,
        Cancel,
        ConfirmCancelled,
        RetryDue,
        FenceNotLaunched,
        AcknowledgeStopped,
    )
}


def command_to_json(command: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"command": type(command).__name__}
    for f in fields(command):
        value = getattr(command, f.name)
        if isinstance(value, Definition):
            value = definition_to_json(value)
        elif f.name == "entries":
            value = [
                [e.schedule_id, e.base_cursor_s, e.cursor_s, list(e.slots_s), e.missed]
                for e in value
            ]
        out[f.name] = value
    return out


def command_from_json(value: dict[str, Any]) -> Any:
    try:
        kind = COMMAND_TYPES[value["command"]]
        args = {k: v for k, v in value.items() if k != "command"}
        if kind is CreateSchedule:
            args["definition"] = definition_from_checkpoint(args["definition"])
        if kind is Observe:
            args["entries"] = tuple(
                ObservedSchedule(sid, base, cursor, tuple(slots), missed)
                for sid, base, cursor, slots, missed in args["entries"]
            )
        return kind(**args)
    except (KeyError, TypeError, ValueError) as err:
        raise InvalidCommand(f"command: cannot decode ({err!r})") from err
