"""The SQLite rules every store follows: pragmas, transactions, the data_dir lock.

Durability: WAL journal with ``synchronous=FULL``. Every commit appends its pages to the -wal file
and fsyncs it before ``COMMIT`` returns, so a committed transaction survives a process crash and,
on hardware that honours fsync, a power loss (see docs/store.md for the assumptions).

Locking rule: a store object owns exactly one connection and serialises every call on one
``threading.Lock``; another thread may call it, but never concurrently. Across processes,
``DataDirLock`` (``fcntl.flock`` on ``data_dir/LOCK``) admits one live process per data_dir, and
the busy timeout only covers the short window in which an offline reader probes the file.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

from appliance.store.errors import StoreRefused, StoreWriteFailed
from appliance.store.versions import LOCK_FILE_NAME

BUSY_TIMEOUT_MS = 5_000


def open_writable(path: Path, *, create: bool) -> apsw.Connection:
    """One read-write connection with WAL, synchronous=FULL and a busy timeout."""
    flags = apsw.SQLITE_OPEN_READWRITE | (apsw.SQLITE_OPEN_CREATE if create else 0)
    conn = apsw.Connection(str(path), flags=flags)
    try:
        conn.setbusytimeout(BUSY_TIMEOUT_MS)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchall()[0][0]
        if str(mode).lower() != "wal":
            raise StoreRefused(f"store {path}: SQLite refused WAL journal mode (got {mode!r})")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.execute("PRAGMA cell_size_check=ON")
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """All-or-nothing: ``BEGIN IMMEDIATE`` … ``COMMIT``; any exception rolls everything back.

    IMMEDIATE takes the write lock at the start, so a transaction never fails half-way on a lock
    upgrade. A failed COMMIT raises ``StoreWriteFailed``: the caller cannot know whether the
    write is durable and must stop instead of acting on it.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except apsw.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise StoreWriteFailed(
            f"commit failed ({exc}); durability of this write is unknown"
        ) from exc


def fsync_dir(directory: Path) -> None:
    """Make a rename or file creation in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DataDirLock:
    """Exclusive ``flock`` on ``data_dir/LOCK``, held for as long as a store is open.

    ``flock`` belongs to the open file description, so a second opener is refused even inside the
    same process, and the kernel releases the lock when the holder dies (also on SIGKILL). The
    LOCK file stays empty: holding it never changes a byte.
    """

    def __init__(self, fd: int, path: Path):
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, data_dir: Path, *, create: bool) -> DataDirLock | None:
        """Take the lock; ``None`` when it does not exist and ``create`` is false.

        Raises ``StoreRefused`` when another live process (or another open store object) holds it.
        """
        path = data_dir / LOCK_FILE_NAME
        if create:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        else:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreRefused(
                f"data_dir {data_dir} is in use by another live process (it holds {path}); "
                "stop that process first: two processes must never share a data_dir"
            ) from None
        return cls(fd, path)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
