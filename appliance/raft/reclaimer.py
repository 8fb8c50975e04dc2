"""Deleting compacted log rows off the node's turn, in small chunks (docs/raft.md).

A compaction is recorded at once (one small durable commit on the node's turn: from then on the
storage reads as if the entries were gone); the rows themselves are deleted here, ``rows_max``
per transaction, on a thread of their own, pausing ``pause_s`` between chunks so a commit
waiting for the store's lock gets it within one chunk. Nothing depends on when the deletion ends:
a crash leaves rows below the compaction point that the next start deletes the same way.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

log = logging.getLogger(__name__)

RECLAIM_ROWS_MAX = 64  # rows per transaction: well under a millisecond of store time here
RECLAIM_PAUSE_S = 0.02  # between chunks: commits waiting for the store's lock go first


class Reclaimable(Protocol):
    def reclaim(self, rows_max: int) -> bool:
        """Delete up to ``rows_max`` compacted rows; True while some are left."""


class Reclaimer:
    def __init__(
        self,
        storage: Reclaimable,
        *,
        rows_max: int = RECLAIM_ROWS_MAX,
        pause_s: float = RECLAIM_PAUSE_S,
        name: str = "raft-reclaim",
    ) -> None:
        if rows_max < 1:
            raise ValueError("rows_max must be >= 1")
        self._storage = storage
        self._rows_max = rows_max
        self._pause_s = pause_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self.chunks = 0
        self.failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._wake.set()  # rows left by a crash before the last start
        self._thread.start()

    def poke(self) -> None:
        self._idle.clear()
        self._wake.set()

    def wait_idle(self, timeout_s: float) -> bool:
        """Tests and benchmarks: True once every compacted row is deleted."""
        return self._idle.wait(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            try:
                while not self._stop.is_set() and self._storage.reclaim(self._rows_max):
                    self.chunks += 1
                    self._stop.wait(self._pause_s)
            except Exception as exc:  # the store is closing or failing; the next start retries
                self.failed = exc
                log.error("deleting compacted log rows failed: %r", exc)
                return
            if not self._wake.is_set():
                self._idle.set()
