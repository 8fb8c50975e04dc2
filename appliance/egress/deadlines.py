"""One thread that fires deadlines: what stops a request that is still running at its time.

A socket timeout bounds each read, not a request: a server dripping a byte per second would keep
one alive for ever. Each exchange registers its deadline here instead, and at that instant the
action (abort the exchange: shut its sockets down) runs on this thread. One thread per gate,
started on first use, rather than a timer thread per request; it holds no connection and runs
nothing of a script.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable


class Deadlines:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._condition = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._actions: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count(1)
        self._thread: threading.Thread | None = None

    def add(self, when_monotonic: float, action: Callable[[], None]) -> int:
        with self._condition:
            token = next(self._tokens)
            self._actions[token] = action
            heapq.heappush(self._heap, (when_monotonic, token))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="egress-deadlines", daemon=True
                )
                self._thread.start()
            self._condition.notify()
            return token

    def cancel(self, token: int) -> None:
        with self._condition:
            self._actions.pop(token, None)

    def _run(self) -> None:
        while True:
            with self._condition:
                action = self._next_due()
            if action is not None:
                try:
                    action()
                except Exception:  # one failed action must not stop every later deadline
                    continue

    def _next_due(self) -> Callable[[], None] | None:
        """Under the condition: wait until the earliest live deadline is due; its action."""
        while True:
            while self._heap and self._heap[0][1] not in self._actions:
                heapq.heappop(self._heap)  # cancelled
            if not self._heap:
                self._condition.wait()
                continue
            when, token = self._heap[0]
            remaining = when - self._clock()
            if remaining > 0:
                self._condition.wait(remaining)
                continue
            heapq.heappop(self._heap)
            return self._actions.pop(token, None)
