"""The transaction overlay and ``apply``: every command is all-or-nothing.

A command's apply function (registered with :func:`register`) reads and writes through a
:class:`Txn`; only :meth:`Txn.commit` writes the state, after every check (including the
checkpoint cap) passed, so a refused command raises a ``CoreError`` and changes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from appliance.core.canonical import canonical_json
from appliance.core.commands import Applied
from appliance.core.errors import CoreError
from appliance.core.limits import CHECKPOINT_BYTES_MAX
from appliance.core.occurrence import (
    INSTANT_MAX_S,
    INT_MAX,
    RECORD_BYTES_MAX,
    Occurrence,
    encode_occurrence,
)
from appliance.core.retention import OldestTerminalFirst, drop_retired
from appliance.core.state_errors import (
    AttemptMismatch,
    CheckpointFull,
    InvalidCommand,
    UnknownOccurrence,
    UnknownSchedule,
)
from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import (
    _PART_KINDS,
    CHARGING_PART,
    CHARGING_V1,
    CHARGING_V2,
    GROWTH_BYTES_MAX,
    HEADROOM_BYTES,
    PROGRESS_BYTES_MAX,
    Progress,
    S,
    Schedule,
    _frame,
    _meta_json,
    _occurrence_budget,
    _schedule_budget,
    _schedule_json,
    bound_max_for,
    bound_part_budget,
    bound_part_max,
    bound_part_names,
    bound_reserve_bytes,
    encode_progress,
    record_bytes_max,
)

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

    @property
    def rules(self) -> int:
        """The charging rules the checkpoint names (see ``state.py``)."""
        return CHARGING_V1 if self.extra(CHARGING_PART) is None else CHARGING_V2

    # -- charges --

    def _fitted(self, kind: str, record: Occurrence) -> int:
        return self._bound_max(f"{kind}/{record.id}", record)

    def _bound_max(self, name: str, record: Occurrence | None) -> int:
        kind = name.partition("/")[0]
        schedule = None if record is None else self.schedule(record.schedule_id)
        return bound_max_for(kind, record, self.extra(name), schedule, self.rules)

    def _record_budget(self, data_bytes: int, record: Occurrence) -> int:
        return _occurrence_budget(data_bytes, record, self.has_part, self.rules, self._fitted)

    def _part_data(self, name: str) -> bytes | None:
        return self._parts[name][0] if name in self._parts else self.state._parts.get(name)

    def rebudget_live(self, schedule_id: int | None = None) -> None:
        """Charge every live record (of ``schedule_id``, or all) and its bound parts again: the
        charging rules changed, or the facts a rule-2 charge reads (its schedule) did."""
        live = {
            oid
            for oid, r in self.state.occurrences.items()
            if not r.terminal and schedule_id in (None, r.schedule_id)
        }
        for oid, r in self._occ.items():
            if r is None or r.terminal or schedule_id not in (None, r.schedule_id):
                live.discard(oid)
            else:
                live.add(oid)
        for oid in sorted(live):
            record = self.occurrence(oid)
            assert record is not None
            part = f"occurrence/{oid}"
            data = self._part_data(part)
            if data is None:
                raise CoreError(f"invariant: occurrence {oid} has no part")
            self._set_part(part, data, self._record_budget(len(data), record))
            self._rebudget_bound_parts(record)

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
        budget = self._record_budget(len(data), record)
        self._set_part(f"occurrence/{record.id}", data, budget)
        if old is None or old.terminal != record.terminal:
            self._rebudget_bound_parts(record)

    def new_record_charge(self, record: Occurrence) -> int:
        """What a new Pending ``record`` (holding no bound part) is charged, frame aside."""
        if self.rules == CHARGING_V1:
            return RECORD_BYTES_MAX + bound_reserve_bytes(record.id)
        return record_bytes_max(record) + bound_reserve_bytes(
            record.id, record=record, fitted=self._fitted
        )

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
        budget = self.new_record_charge(record)
        self._budget_delta += len(name) + 4 + budget
        self._parts[name] = (data, budget)

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
        growth command (default: what its kind registered); see the checkpoint budget above."""
        kind, _, key = name.partition("/")
        if kind not in _PART_KINDS:
            raise CoreError(f"invariant: part kind {kind!r} is not registered")
        data = canonical_json(value)
        # By default the kind's registered budget, so a reloaded part is charged the same.
        budget = _PART_KINDS[kind](value) if budget_bytes is None else budget_bytes
        self._extra[name] = value
        if bound_part_max(kind) is not None:
            record = self.occurrence(int(key))
            size_max = self._bound_max(name, record)
            if len(data) > size_max:
                raise CoreError(f"invariant: part {name!r} exceeds its bound size")
            budget = bound_part_budget(len(data), size_max, record)
        if budget < len(data):
            raise CoreError(f"invariant: part {name!r} is larger than its budget")
        self._set_part(name, data, budget)
        self._rebudget_owner(name)

    def delete_extra(self, name: str) -> None:
        self._extra[name] = None
        self._set_part(name, None, 0)
        self._rebudget_owner(name)

    def has_part(self, name: str) -> bool:
        return self.extra(name) is not None

    def _rebudget_bound_parts(self, record: Occurrence) -> None:
        """The record turned terminal (or live): its bound parts change their charge."""
        for name in bound_part_names(record.id):
            data = self._part_data(name)
            if data is not None:
                size_max = self._bound_max(name, record)
                self._set_part(name, data, bound_part_budget(len(data), size_max, record))

    def _rebudget_owner(self, name: str) -> None:
        """A bound part appeared or vanished: its record's reserve changes by as much."""
        kind, _, occurrence_id = name.partition("/")
        size_max = bound_part_max(kind)
        if size_max is None:
            return
        record = self.occurrence(int(occurrence_id))
        if record is not None:
            part = f"occurrence/{record.id}"
            data = self._parts[part][0] if part in self._parts else self.state._parts[part]
            if data is None:
                raise CoreError(f"invariant: occurrence {record.id} has no part")
            self._set_part(part, data, self._record_budget(len(data), record))

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
        if self.rules == CHARGING_V2 and self.nonterminal(schedule_id) > 0:
            # Rule-2 charges of its live records read the schedule's name: charge them again.
            self.rebudget_live(schedule_id)

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
        for hook in _BEFORE_COMMIT:
            hook(self)  # still inside the overlay: a hook's writes are checked like the rest
        state = self.state
        limits_changed = self.limits != state.limits  # a limits amendment (core/amendments.py)
        meta_changed = limits_changed or (self.next_schedule_id, self.next_occurrence_id) != (
            state.next_schedule_id,
            state.next_occurrence_id,
        )
        meta_budget = state._meta_budget
        if limits_changed:
            meta_budget = len(canonical_json(_meta_json(self.limits, INT_MAX, INT_MAX)))
        if meta_changed:
            meta = _meta_json(self.limits, self.next_schedule_id, self.next_occurrence_id)
            self._set_part("meta", canonical_json(meta), meta_budget)
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
            state.note_schedule(sid, schedule)
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
        state._advance_floor()
        state.limits = self.limits
        state._meta_budget = meta_budget
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


def on_retire(hook: Callable[[Txn, int], None]) -> Callable[[Txn, int], None]:
    """Register ``hook(txn, occurrence_id)``: delete what is bound to a retiring record."""
    _ON_RETIRE.append(hook)
    return hook


_BEFORE_COMMIT: list[Callable[[Txn], None]] = []


def before_commit(hook: Callable[[Txn], None]) -> Callable[[Txn], None]:
    """Register ``hook(txn)``, run by every commit before its checks (e.g. drop the code an
    update kept once no live record needs it); it must write only within the parts' budgets."""
    _BEFORE_COMMIT.append(hook)
    return hook


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
