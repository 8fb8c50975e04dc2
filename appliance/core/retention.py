"""Retention: which occurrence records leave the checkpoint, oldest terminal first.

Theory of operation
-------------------
A record is retained until something needs its room: the ``records`` limit (SPEC §3) or the
checkpoint byte budget (a history of terminal records must never stop scheduling). Only terminal
records retire, lowest occurrence id first (ids are assigned in creation order, so that is the
oldest); non-terminal records never retire, whatever the pressure — the creation that needed the
room is dropped as ``capacity`` instead. Retirement removes the record and anything bound to it
(the state aggregate's ``retire_occurrence`` is the one place that does that); the id high-water
marks stay, so an id is never reused and a replayed reference to a retired record stays refused.

Once committed, a terminal record never changes state again, so the set of terminal ids only
grows by new terminals and shrinks by retirement: a min-heap is exact.
"""

from __future__ import annotations

import heapq
from collections.abc import Container


class OldestTerminalFirst:
    """Yields retirement candidates from the committed terminal-id heap without mutating it.

    The heap is copied on the first request only, so an apply that retires nothing costs nothing.
    """

    def __init__(self, terminal_heap: list[int]):
        self._source = terminal_heap
        self._heap: list[int] | None = None

    def next(self, skip: Container[int]) -> int | None:
        """The oldest terminal id not in ``skip`` (ids changed in this apply), or None."""
        if self._heap is None:
            self._heap = list(self._source)
        while self._heap:
            candidate = heapq.heappop(self._heap)
            if candidate not in skip:
                return candidate
        return None


def drop_retired(terminal_heap: list[int], retired: set[int]) -> None:
    """Remove ``retired`` ids from the committed heap (they are almost always its smallest)."""
    retired = set(retired)
    while terminal_heap and terminal_heap[0] in retired:
        retired.discard(heapq.heappop(terminal_heap))
    if retired:
        terminal_heap[:] = [i for i in terminal_heap if i not in retired]
        heapq.heapify(terminal_heap)
