"""File state provider: one V1 snapshot file, locked against other providers.

Same-process exclusion uses a registry of open paths; interprocess exclusion an ``flock`` on
``<path>.lock`` held for the provider's lifetime, so of two contending processes exactly one
holds the state. Every mutation writes a complete new snapshot (at most 1,024 records, 4 MiB) and
only then updates memory, so a failed save changes nothing.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from ..errors import ProviderLocked, StateProviderError
from .provider import TransitionProvider
from .records import DurableTaskRecord
from .snapshot import read_snapshot, write_snapshot

_OPEN_PATHS: set[Path] = set()
_OPEN_PATHS_LOCK = threading.Lock()


class FileStateProvider(TransitionProvider):
    def __init__(self, path: str | os.PathLike[str]):
        super().__init__()
        self._path = Path(path).resolve()
        with _OPEN_PATHS_LOCK:
            if self._path in _OPEN_PATHS:
                raise ProviderLocked(f"{self._path}: already open by a provider in this process")
            _OPEN_PATHS.add(self._path)
        self._lock_fd: int | None = None
        try:
            self._lock_fd = _lock_exclusively(Path(f"{self._path}.lock"))
            self._remove_stale_temporaries()
            if self._path.exists():
                self._epoch, self._records = read_snapshot(self._path)
            else:
                self._epoch, self._records = 0, {}
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> Path:
        return self._path

    def _remove_stale_temporaries(self) -> None:
        # Only the lock holder saves, so any temporary left behind belongs to a dead save.
        for stale in self._path.parent.glob(f".{self._path.name}.*.tmp"):
            stale.unlink(missing_ok=True)

    def _read(self, task_key: str) -> DurableTaskRecord | None:
        return self._records.get(task_key)

    def _count(self) -> int:
        return len(self._records)

    def _ordered(self, replacing: DurableTaskRecord | None) -> Iterator[DurableTaskRecord]:
        keys = set(self._records)
        if replacing is not None:
            keys.add(replacing.task_key)
        for key in sorted(keys):
            if replacing is not None and key == replacing.task_key:
                yield replacing
            else:
                yield self._records[key]

    def _write(self, record: DurableTaskRecord) -> None:
        count = len(self._records) + (record.task_key not in self._records)
        self._save(self._epoch, self._ordered(record), count)
        self._records[record.task_key] = record

    def _bump_epoch(self) -> int:
        self._save(self._epoch + 1, self._ordered(None), len(self._records))
        self._epoch += 1
        return self._epoch

    def _save(self, epoch: int, records: Iterator[DurableTaskRecord], count: int) -> None:
        if self._lock_fd is None:
            raise StateProviderError(f"{self._path}: provider is closed")
        try:
            write_snapshot(self._path, epoch, records, count)
        except OSError as exc:
            raise StateProviderError(f"{self._path}: save failed ({exc}); state unchanged") from exc

    def records(self) -> list[DurableTaskRecord]:
        with self._transaction():
            return list(self._ordered(None))

    def close(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None
        with _OPEN_PATHS_LOCK:
            _OPEN_PATHS.discard(self._path)

    def __enter__(self) -> FileStateProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lock_exclusively(lock_path: Path) -> int:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ProviderLocked(f"{lock_path}: held by another process") from None
    return fd
