"""Open sessions: catching a store that lost committed transactions, where that is cheap.

Theory of operation. Every read-write open of a store is a numbered *session*. The number is
committed in the store (meta ``open_session``) and then written, fsynced, to a marker beside it
(``<store>-session``: ``open N``); a clean close rewrites the marker as ``closed N``. What the
next open can then prove:

- the marker says ``open`` (the last process died without closing) but the ``-wal`` file is
  gone: a crash never removes the WAL (it holds the newest committed transactions until a clean
  close checkpoints it), so someone deleted it and those transactions are lost → refused;
- the store's own number is below the marker's: the file is older than the last session that
  used it (its WAL lost after a checkpoint was due, or an old copy put back) → refused.

The marker is rewritten as ``closed`` when the data_dir lock is released (every close path goes
through it), so only a process that dies leaves ``open`` behind.

Not detected (docs/store.md): a WAL deleted together with its marker; a store and its marker put
back together from an older backup; a disk that lies about fsync. The cost is one small
transaction and two small fsynced writes per open, one per close: nothing per commit.
"""

from __future__ import annotations

import os
from pathlib import Path

import apsw

from appliance.store import schema
from appliance.store.errors import StoreRefused
from appliance.store.sqlite import fsync_dir, transaction

META_OPEN_SESSION = "open_session"
SESSION_SUFFIX = "-session"
FILE_MODE = 0o600


def marker_path(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + SESSION_SUFFIX)


def read_marker(store_path: Path) -> tuple[str, int] | None:
    """(``open`` | ``closed``, number), or None when there is no marker (older or new store)."""
    path = marker_path(store_path)
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreRefused(f"cannot read the session marker {path}: {exc}") from None
    state, _, number = text.strip().partition(" ")
    if state not in ("open", "closed") or not number.isdigit():
        raise StoreRefused(
            f"the session marker {path} is not 'open N' or 'closed N'; it was edited or damaged"
        )
    return state, int(number)


def write_marker(store_path: Path, state: str, number: int) -> None:
    """Replace the marker atomically (written aside, fsynced, renamed, directory fsynced)."""
    path = marker_path(store_path)
    staging = path.with_name(path.name + ".writing")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.write(fd, f"{state} {number}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(staging, path)
    fsync_dir(path.parent)


def check_before_open(store_path: Path) -> None:
    """Refuse a store whose last session crashed and whose WAL is gone (call before SQLite
    opens it: the open itself creates a new WAL)."""
    marker = read_marker(store_path)
    wal = store_path.with_name(store_path.name + "-wal")
    if marker is not None and marker[0] == "open" and not wal.exists():
        raise StoreRefused(
            f"{store_path} lost committed transactions: its last session ({marker[1]}) ended "
            f"without a clean close and {wal.name}, which held its newest commits, is gone. Do "
            "not start on it: restore the data_dir from a backup taken while the process was "
            "stopped, or move it aside and, for a voter, run `appliance admin store recover` "
            "(see docs/store.md)"
        )


def begin(conn: apsw.Connection, store_path: Path) -> int:
    """Check the store against its marker and start the next session; returns its number."""
    marker = read_marker(store_path)
    values, _problems = schema.read_meta(conn)  # the guard has already refused damaged meta
    stored = values.get(META_OPEN_SESSION)
    stored_number = int(stored) if stored is not None and stored.isdigit() else 0
    if marker is not None and stored_number < marker[1]:
        raise StoreRefused(
            f"{store_path} lost committed transactions: it records session {stored_number}, "
            f"but session {marker[1]} used it ({marker_path(store_path).name}); the file is "
            "older than its last use (its WAL lost, or an older copy put back). Do not start on "
            "it: restore the whole data_dir from a backup taken while the process was stopped, "
            "or move it aside and, for a voter, run `appliance admin store recover`. Only if "
            "this file is a backup you put back on purpose and nothing may have been committed "
            f"after it (a single voter, say), delete {marker_path(store_path).name} to accept it "
            "(see docs/store.md)"
        )
    number = max(stored_number, marker[1] if marker else 0) + 1
    with transaction(conn):
        schema.write_meta(conn, META_OPEN_SESSION, str(number))
    write_marker(store_path, "open", number)
    return number


def end(store_path: Path, number: int) -> None:
    """After a clean close (SQLite has checkpointed and removed the WAL)."""
    write_marker(store_path, "closed", number)
