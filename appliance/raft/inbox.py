"""The driver's inbox: inputs waiting for the thread that holds the node's turn.

Unlike ``queue.Queue``, waiting for input does not take it: the driver thread waits here, then
takes the turn, and only then takes what is queued. A thread that already holds the turn (one
handling its own input inline) therefore finds the inputs that arrived meanwhile and handles them
in the same cycle, instead of the driver thread holding one of them while it waits for the turn.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

Item = tuple[Any, ...]


class Inbox:
    def __init__(self, max_items: int) -> None:
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        self._items: deque[Item] = deque()
        self._max = max_items
        self._cv = threading.Condition()

    def put(self, item: Item, *, force: bool = False, wake: bool = True) -> bool:
        """Queue ``item`` and (unless ``wake`` is False) wake the waiter; False when full
        (``force`` ignores the bound: for the few control inputs that must never be refused)."""
        with self._cv:
            if len(self._items) >= self._max and not force:
                return False
            self._items.append(item)
            if wake:
                self._cv.notify()
            return True

    def wake(self) -> None:
        """Wake the waiter (it returns if anything is queued)."""
        with self._cv:
            self._cv.notify()

    def take(self, limit: int) -> list[Item]:
        """Up to ``limit`` items, oldest first."""
        with self._cv:
            count = min(limit, len(self._items))
            return [self._items.popleft() for _ in range(count)]

    def wait(self, timeout_s: float) -> None:
        """Return when something is queued or ``timeout_s`` has passed; takes nothing."""
        with self._cv:
            if not self._items:
                self._cv.wait(timeout_s)

    def __len__(self) -> int:
        return len(self._items)  # a racy peek, as a hint: whoever acts on it takes under the lock
