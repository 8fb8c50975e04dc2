"""A fixed pool of callback threads fed by a hand-off queue.

Theory of operation: the pool starts exactly ``workers`` threads and never more, so the number of
concurrently running callbacks is bounded by construction. The queue itself is a plain FIFO; its
bound (min(2 x workers, max_tasks)) is enforced by the scheduler core, which counts queued items
under its own lock and offers only as many as there are free slots. ``close`` appends one stop
marker per worker behind the accepted items, so workers drain what was accepted, then exit.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from .threads import start_thread

T = TypeVar("T")
_STOP = object()


class WorkerPool(Generic[T]):
    def __init__(self, workers: int, run: Callable[[T], None], name: str):
        self._run = run
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._closed = False
        self._threads = [start_thread(self._loop, f"{name}-{i}") for i in range(workers)]

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        return tuple(self._threads)

    def put(self, item: T) -> None:
        self._queue.put(item)

    def close(self) -> None:
        """Idempotent; the caller serializes it with ``put`` (the core holds its lock)."""
        if not self._closed:
            self._closed = True
            for _ in self._threads:
                self._queue.put(_STOP)

    def _loop(self) -> None:
        get, run = self._queue.get, self._run
        while True:
            item = get()
            if item is _STOP:
                return
            run(item)  # type: ignore[arg-type]
