"""Owner-only files: a data_dir is 0700 and every store file 0600, whatever the umask.

The stores hold the contract, the checkpoint and the admissions: nobody but the service account
has a reason to read them. ``tighten`` runs on every read-write open (so an existing store made
under a loose umask is fixed when it is next opened) and again once SQLite has created its
``-wal`` and ``-shm`` (SQLite gives those the main file's mode, so they are born 0600 too).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from appliance.store.errors import StoreRefused

DIR_MODE = 0o700
FILE_MODE = 0o600
SIDE_SUFFIXES = ("-wal", "-shm", "-journal", "-session")


def create_private_file(path: Path) -> None:
    """An empty file with mode 0600 (SQLite opens an empty file as an empty database)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def _set_mode(path: Path, mode: int) -> None:
    try:
        current = stat.S_IMODE(path.stat().st_mode)
        if current != mode:
            os.chmod(path, mode)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreRefused(
            f"cannot make {path} mode {mode:o} (owner only): {exc.strerror}; run the process as "
            "the owner of its data_dir"
        ) from None


def tighten(data_dir: Path, store_path: Path, extra: tuple[Path, ...] = ()) -> None:
    """The data_dir 0700; the store, its side files and ``extra`` (e.g. LOCK) 0600."""
    _set_mode(data_dir, DIR_MODE)
    names = [store_path, *(store_path.with_name(store_path.name + s) for s in SIDE_SUFFIXES)]
    for path in (*names, *extra):
        _set_mode(path, FILE_MODE)
