"""Which registered tasks are due, in dispatch order, without scanning them all.

Theory of operation (seeds/002): a scan must hand the free dispatch slots to the best due tasks
-- priority descending, then earlier deadline, then registration order -- and must not
materialize every due task to do so. Tasks wait in one min-heap per priority level keyed by
(deadline, registration id); a scan walks the levels from the highest priority down and pops
only while the level's earliest task is due and a slot is free. So a scan retains at most
``slots`` candidates (65,536 due tasks and 128 free slots retain 128), and costs
O(levels + slots x log n) instead of O(due).

Entries are never removed from a heap eagerly: rescheduling, dispatching or cancelling a task
bumps its ``version``, and stale heap items are discarded when they surface.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Indexed(Protocol):
    priority: int
    due_us: int
    task_id: int  # registration order: ids are handed out increasing, never reused
    version: int


E = TypeVar("E", bound=Indexed)


@dataclass
class SelectionStats:
    scans: int = 0
    retained_peak: int = 0


class DueIndex(Generic[E]):
    def __init__(self) -> None:
        self._levels: dict[int, list[tuple[int, int, int, E]]] = {}
        self._priorities: list[int] = []  # ascending; walked in reverse
        self.stats = SelectionStats()

    def push(self, entry: E) -> None:
        """Index ``entry`` at its current (priority, due_us, version)."""
        heap = self._levels.get(entry.priority)
        if heap is None:
            heap = self._levels[entry.priority] = []
            bisect.insort(self._priorities, entry.priority)
        heapq.heappush(heap, (entry.due_us, entry.task_id, entry.version, entry))

    def take_due(self, now_us: int, slots: int) -> list[E]:
        """Pop the best ``slots`` entries due at ``now_us``, best first."""
        taken: list[E] = []
        if slots > 0:
            emptied = False
            for priority in reversed(self._priorities):
                heap = self._levels[priority]
                while heap and len(taken) < slots:
                    due_us, _, version, entry = heap[0]
                    if entry.version != version:
                        heapq.heappop(heap)  # stale
                    elif due_us <= now_us:
                        heapq.heappop(heap)
                        taken.append(entry)
                    else:
                        break
                emptied = emptied or not heap
                if len(taken) >= slots:
                    break
            if emptied:
                self._drop_empty_levels()
        self.stats.scans += 1
        if len(taken) > self.stats.retained_peak:
            self.stats.retained_peak = len(taken)
        return taken

    def has_due(self, now_us: int) -> bool:
        return any(due_us <= now_us for due_us in self._live_tops())

    def next_due_us(self) -> int | None:
        return min(self._live_tops(), default=None)

    def _live_tops(self) -> list[int]:
        tops = []
        emptied = False
        for heap in self._levels.values():
            while heap and heap[0][3].version != heap[0][2]:
                heapq.heappop(heap)
            if heap:
                tops.append(heap[0][0])
            else:
                emptied = True
        if emptied:
            self._drop_empty_levels()
        return tops

    def _drop_empty_levels(self) -> None:
        for priority in [p for p, heap in self._levels.items() if not heap]:
            del self._levels[priority]
            self._priorities.remove(priority)
