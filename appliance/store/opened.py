"""What every open store shares: its connection, its data_dir lock, one lock serialising callers.

``RunnerStore`` and ``WorkerStore`` differ in schema and methods, not in how they hold the file:
one apsw connection used under ``_lock`` (one caller at a time), the exclusive ``data_dir/LOCK``
held for as long as the connection is open, and ``close`` releasing both exactly once.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Self

import apsw

from appliance.store.sqlite import DataDirLock


class OpenedStore:
    store_name = "store"  # for the "closed" error; subclasses name themselves

    def __init__(self, conn: apsw.Connection, lock: DataDirLock, path: Path, created: bool):
        self._conn: apsw.Connection | None = conn
        self._dir_lock = lock
        self._lock = threading.Lock()
        self.path = path
        self.created = created  # True when this open created and sealed the store

    @property
    def _db(self) -> apsw.Connection:
        if self._conn is None:
            raise ValueError(f"the {self.store_name} is closed")
        return self._conn

    def close(self) -> None:
        """Close the connection (SQLite checkpoints the WAL) and release ``data_dir/LOCK``."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
                self._dir_lock.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
