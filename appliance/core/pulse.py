"""The owner's pulse: a heap of each enabled schedule's next due instant.

Theory of operation
-------------------
The owner wakes at least every second and exactly at the next due instant (issue 5). Most pulses
find nothing due, so that case must not touch every schedule: the heap's top answers it in O(1).
When schedules are due, only those are planned, each with the due instant the heap already holds
(``next_after(cursor)``), so a pulse costs one calendar step per due schedule instead of
rebuilding a cron iterator per schedule (issue 2: ~320 ms for 1,024 croniter rebuilds).

The heap is owner-side and never replicated: :meth:`Pulse.rebuild` derives it from the committed
state at any time (after election, or after a proposal whose fate is unknown). Entries are
invalidated lazily: ``_next`` holds each schedule's current value and heap entries that disagree
are stale and skipped. :meth:`plan` does not change the heap; :meth:`committed` advances the
schedules the applied plan observed.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from appliance.core.selection import (
    CompiledSchedule,
    Plan,
    next_after_s,
    plan_with_hints,
)
from appliance.core.state import SchedulerState


class Pulse:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int]] = []  # (next_due_s, schedule_id)
        self._next: dict[int, int] = {}

    @classmethod
    def rebuild(cls, state: SchedulerState, compiled: Mapping[int, CompiledSchedule]) -> Pulse:
        pulse = cls()
        for schedule_id, schedule in state.schedules.items():
            if schedule.enabled and schedule_id in compiled:
                cursor_s = state.progress[schedule_id].cursor_s
                pulse.set_next(schedule_id, _next_after(compiled[schedule_id], cursor_s))
        return pulse

    def set_next(self, schedule_id: int, next_due_s: int) -> None:
        if self._next.get(schedule_id) == next_due_s:
            return  # its live heap entry is already there (live entries are never popped)
        self._next[schedule_id] = next_due_s
        heapq.heappush(self._heap, (next_due_s, schedule_id))

    def track(self, state: SchedulerState, schedule_id: int, compiled: CompiledSchedule) -> None:
        """Start (or refresh) tracking a schedule from its committed cursor, e.g. after creation."""
        schedule = state.schedules.get(schedule_id)
        if schedule is None or not schedule.enabled:
            self.forget(schedule_id)
            return
        self.set_next(schedule_id, _next_after(compiled, state.progress[schedule_id].cursor_s))

    def forget(self, schedule_id: int) -> None:
        """Stop tracking a disabled or deleted schedule."""
        self._next.pop(schedule_id, None)

    def __len__(self) -> int:
        return len(self._next)

    def _drop_stale_top(self) -> None:
        heap = self._heap
        while heap and self._next.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)

    def next_due_s(self) -> int | None:
        """The earliest due instant, so the pulse source can wake exactly then."""
        self._drop_stale_top()
        return self._heap[0][0] if self._heap else None

    def due(self, now_s: int) -> list[int]:
        """Schedule ids whose next due instant is at or before ``now_s`` (heap unchanged)."""
        self._drop_stale_top()
        heap = self._heap
        if not heap or heap[0][0] > now_s:
            return []
        found: list[int] = []
        stack = [0]
        # Entries <= now form a subtree at the root of a min-heap: visit only that subtree.
        while stack:
            i = stack.pop()
            if i >= len(heap) or heap[i][0] > now_s:
                continue
            due_s, schedule_id = heap[i]
            if self._next.get(schedule_id) == due_s:
                found.append(schedule_id)
            stack.append(2 * i + 1)
            stack.append(2 * i + 2)
        return found

    def plan(
        self,
        state: SchedulerState,
        compiled: Mapping[int, CompiledSchedule],
        now_s: int,
    ) -> Plan | None:
        """The observation for the schedules due at ``now_s``, or None if nothing is due."""
        due = self.due(now_s)
        if not due:
            return None
        subset = {sid: compiled[sid] for sid in due if sid in compiled}
        hints = {sid: self._next[sid] for sid in due}
        return plan_with_hints(state, subset, now_s, next_due_s=hints)

    def committed(
        self,
        state: SchedulerState,
        plan: Plan,
        compiled: Mapping[int, CompiledSchedule],
    ) -> None:
        """After ``plan.command`` was applied: move each observed schedule to its next slot."""
        for schedule_id in plan.skipped:
            self.forget(schedule_id)
        for schedule_id, cursor_s in plan.cursors_s.items():
            schedule = state.schedules.get(schedule_id)
            if schedule is None or not schedule.enabled:
                self.forget(schedule_id)
                continue
            committed_cursor_s = state.progress[schedule_id].cursor_s
            hint = plan.next_due_s.get(schedule_id)
            if committed_cursor_s != cursor_s or hint is None or hint <= committed_cursor_s:
                hint = _next_after(compiled[schedule_id], committed_cursor_s)
            self.set_next(schedule_id, hint)


def _next_after(compiled: CompiledSchedule, cursor_s: int) -> int:
    return next_after_s(compiled, cursor_s)
