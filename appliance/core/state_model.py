"""The replicated aggregate: :class:`SchedulerState`, its derived index and the list view.

Change it only with ``apply`` (``txn.py``); see ``state.py`` for the theory of operation.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from typing import Any, NamedTuple

from appliance.core.canonical import canonical_json
from appliance.core.limits import Limits
from appliance.core.occurrence import (
    INT_MAX,
    Occurrence,
    OccurrenceState,
    occurrence_to_json,
)
from appliance.core.state_parts import (
    Counts,
    Progress,
    S,
    Schedule,
    _meta_json,
    _progress_json,
    _schedule_json,
)
from appliance.protocol.v1 import payload_sha256

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
        # Derived (never serialized): schedules whose part an older binary cannot read (jitter,
        # kept code, a change history); kept by ``note_schedule`` on every schedule write.
        self.extended_schedules: set[int] = set()
        # Derived (never serialized): schedules whose definition carries ``placement`` (issue 33:
        # a binary before the fleet would read the definition without it).
        self.placed_schedules: set[int] = set()
        self.next_schedule_id = 1
        self.next_occurrence_id = 1
        # Derived (never serialized): every occurrence id below it has left the checkpoint.
        self._floor_id = 1
        self._parts: dict[str, bytes] = {}
        self._budgets: dict[str, int] = {}
        self._size_bytes = 1
        self._budget_bytes = 1
        self._index = _Index()
        self._meta_budget = len(canonical_json(_meta_json(limits, INT_MAX, INT_MAX)))
        meta = canonical_json(_meta_json(limits, 1, 1))
        self._write_part("meta", meta, self._meta_budget)

    def note_schedule(self, schedule_id: int, schedule: Schedule | None) -> None:
        extended = schedule is not None and bool(
            schedule.kept or schedule.changes or schedule.definition.policy.jitter_seconds
        )
        if extended:
            self.extended_schedules.add(schedule_id)
        else:
            self.extended_schedules.discard(schedule_id)
        if schedule is not None and schedule.definition.placement:
            self.placed_schedules.add(schedule_id)
        else:
            self.placed_schedules.discard(schedule_id)

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

    # -- the retention floor (issue 19: worker retention) --

    def retained_through(self) -> int:
        """W: the highest occurrence id such that every id at or below it has left this
        checkpoint (retired, or never created). It is the lowest retained id minus one — not the
        highest retired id, since an old live record (an ``Unknown`` nobody resolved) can sit
        below later retired ones and holds W back. Derived from the committed records alone,
        so every replica computes the same value; it only ever rises (ids are never reused)."""
        return self._floor_id - 1

    def _advance_floor(self) -> None:
        """After a commit: step the floor past ids that left. Each id is passed once in the
        life of the state, so the cost is amortized O(1) per occurrence created."""
        floor, occurrences, end = self._floor_id, self.occurrences, self.next_occurrence_id
        while floor < end and floor not in occurrences:
            floor += 1
        self._floor_id = floor

    def _reset_floor(self) -> None:
        """On load: the lowest retained id (no walk from 1 over a long-lived store's ids)."""
        self._floor_id = min(self.occurrences) if self.occurrences else self.next_occurrence_id

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

    def schedules_with_pending(self) -> list[int]:
        """Ids of the schedules that have a Pending record, in schedule order (the owner plans
        claims every pass: with a burst's records all claimed, that is none of them)."""
        pending = self._index.pending
        if not pending:
            return []
        return [sid for sid in self.schedules if sid in pending]

    def retry_waiting_ids(self) -> list[int]:
        return sorted(self._index.retry_waiting)

    def next_retry_due_s(self) -> int | None:
        """The earliest not-before of a retry-waiting occurrence (the owner's pulse uses it)."""
        waiting = self._index.retry_waiting
        if not waiting:
            return None
        return min(self.occurrences[i].not_before_s or 0 for i in waiting)


class ListSnapshot(NamedTuple):
    """What the operator's ``list`` shows, taken under the state's lock: references to immutable
    values (records, definitions, progress are replaced, never mutated, by every transition)
    and the counters computed then, so the view is rendered after the lock is released."""

    schedules: tuple[tuple[Schedule, Progress, dict[str, int]], ...]
    occurrences: tuple[Occurrence, ...]
    counts: Counts
    paused: Any


def list_snapshot(state: SchedulerState) -> ListSnapshot:
    return ListSnapshot(
        tuple(
            (state.schedules[sid], state.progress[sid], state.schedule_counts(sid))
            for sid in sorted(state.schedules)
        ),
        tuple(state.occurrences[i] for i in sorted(state.occurrences)),
        state.counts(),
        state.extra.get("paused"),  # appliance/core/pause.py
    )


def render_list(snapshot: ListSnapshot) -> dict[str, Any]:
    """The JSON-able view of a ``list_snapshot`` (no lock needed)."""
    schedules = []
    for s, p, counts in snapshot.schedules:
        view = _schedule_json(s)
        if "kept" in view:  # the operator sees which code a live record runs, not the code
            view["kept"] = [[k.until_id, payload_sha256(k.code)] for k in s.kept]
        schedules.append({**view, **_progress_json(p), "counts": counts})
    counts = snapshot.counts
    return {
        **({"paused": snapshot.paused} if snapshot.paused is not None else {}),
        "schedules": schedules,
        "occurrences": [occurrence_to_json(o) for o in snapshot.occurrences],
        "counts": {
            "records": counts.records,
            "outstanding": counts.outstanding,
            "running": counts.running,
            "by_state": counts.by_state,
        },
    }


def list_view(state: SchedulerState) -> dict[str, Any]:
    """The operator's ``list``: every schedule with its counters, and every retained record."""
    return render_list(list_snapshot(state))
