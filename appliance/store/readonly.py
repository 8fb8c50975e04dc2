"""A read-only SQLite open that cannot change a byte or create a file.

Why not ``?mode=ro``: on a WAL database a read-only connection still creates the -shm file (and
may need the -wal file created). Why not ``immutable=1`` alone: it ignores a hot -wal file, so a
store left by a crash would be judged on stale pages. What we do instead:

* every file is opened through a VFS (``appliance-readonly``) whose files refuse ``xWrite`` and
  ``xTruncate``, whose ``xDelete`` refuses, and which never creates a missing file; locks are
  no-ops (exclusion comes from ``data_dir/LOCK``; a read-only descriptor cannot take SQLite's
  write locks anyway);
* when a -wal file exists, the connection sets ``locking_mode=EXCLUSIVE`` before its first read:
  SQLite then builds the WAL index in private heap memory instead of the -shm file, so committed
  transactions still in the -wal are read, and nothing is recovered or checkpointed on disk
  (``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`` as well, and a read-only WAL cannot checkpoint);
* when no -wal file exists, the main file is the whole truth and is opened ``immutable=1``
  (otherwise SQLite would try to create the -wal of a WAL-format file).
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from pathlib import Path

import apsw

VFS_NAME = "appliance-readonly"
_WRITE_FLAGS = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
_registered: list[apsw.VFS] = []
_register_lock = threading.Lock()


class _ReadOnlyFile(apsw.VFSFile):
    def __init__(self, vfs: str, name: object, flags: list[int]):
        flags[0] = (flags[0] & ~_WRITE_FLAGS) | apsw.SQLITE_OPEN_READONLY
        super().__init__("", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        raise apsw.ReadOnlyError("appliance-readonly: write refused")

    def xTruncate(self, newsize: int) -> None:
        raise apsw.ReadOnlyError("appliance-readonly: truncate refused")

    def xSync(self, flags: int) -> None:
        return None

    def xLock(self, level: int) -> None:
        return None

    def xUnlock(self, level: int) -> None:
        return None

    def xCheckReservedLock(self) -> bool:
        return False


class _ReadOnlyVFS(apsw.VFS):
    def __init__(self) -> None:
        super().__init__(VFS_NAME, "")

    def xOpen(self, name: object, flags: list[int]) -> apsw.VFSFile:
        if name is None:  # an anonymous temporary file: never inside data_dir
            return apsw.VFSFile("", name, flags)
        filename = name.filename() if hasattr(name, "filename") else str(name)
        if not os.path.exists(filename):
            raise apsw.CantOpenError(f"appliance-readonly: {filename} does not exist")
        return _ReadOnlyFile(VFS_NAME, name, flags)

    def xDelete(self, filename: str, syncdir: bool) -> None:
        raise apsw.ReadOnlyError("appliance-readonly: delete refused")


def _ensure_vfs() -> None:
    with _register_lock:
        if not _registered:
            _registered.append(_ReadOnlyVFS())


def wal_path(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def open_readonly(path: Path) -> apsw.Connection:
    """Open ``path`` for reading without creating, recovering or modifying any file."""
    _ensure_vfs()
    absolute = Path(os.path.abspath(path))
    has_wal = wal_path(absolute).exists()
    uri = "file:" + urllib.parse.quote(str(absolute))
    if not has_wal:
        uri += "?immutable=1"
    conn = apsw.Connection(
        uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI, vfs=VFS_NAME
    )
    try:
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute("PRAGMA query_only=ON")
        if has_wal:
            conn.execute("PRAGMA locking_mode=EXCLUSIVE")
    except BaseException:
        conn.close()
        raise
    return conn
