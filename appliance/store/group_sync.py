"""Group commit for a WAL store: concurrent durable commits share one fsync of the -wal file.

Theory of operation (docs/worker.md, "Group commit"). With ``synchronous=FULL`` SQLite fsyncs the
-wal file inside every ``COMMIT``, under the store's one lock, so N concurrent launches pay N
fsyncs one after another. Here the connection runs ``synchronous=NORMAL`` (a commit writes its
frames to the -wal file, in order, without an fsync) and the durability comes from this class:

1. a committer notes its commit's sequence number while it still holds the store lock
   (``committed``): the -wal file holds the frames of every commit numbered up to it;
2. it releases the lock and calls ``wait(seq)``: if no fsync is running, it becomes the syncer —
   it takes the highest number committed so far, fsyncs the -wal file (outside the store lock,
   so others commit meanwhile) and marks everything up to that number durable; otherwise it
   waits for the running fsync and, if that one did not cover it, for (or as) the next one.

Why that is the same promise as FULL: the -wal file is append-ordered (a commit's frames follow
every earlier commit's), and an fsync of it makes every frame written before the call durable —
exactly what FULL's own fsync at commit does, only shared. A caller returns from its write only
once its commit is durable, so "each step is durable before the next one starts" holds per
caller. SQLite keeps the -wal consistent under NORMAL by itself (a checkpoint syncs the -wal
before it copies and the database before the -wal restarts), so NORMAL plus this fsync loses
nothing FULL keeps. A reader waits for the commit that last wrote what it read (the store
keeps that number per record), so nothing another caller committed and a reader saw leaves the
process before it is durable.

Not sans-I/O: it owns the -wal file descriptor (opened once, on the first fsync — the file
exists after the first commit — never closed before the store's connection is closed, so no
close of ours can drop a POSIX lock SQLite holds on the store's files) and fsyncs it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from appliance.store.errors import StoreWriteFailed
from appliance.store.sqlite import fsync_dir


class GroupSync:
    def __init__(self, wal_path: Path) -> None:
        self._wal_path = wal_path
        self._cond = threading.Condition()
        self._written = 0  # the highest commit number whose frames are in the -wal file
        self._synced = 0  # the highest commit number known durable
        self._syncing = False
        self._fd: int | None = None
        self.fsyncs = 0  # how many fsyncs covered how many commits: the batching, for tests
        self.commits = 0

    def committed(self) -> int:
        """Call right after a COMMIT, still holding the store lock: its sequence number."""
        with self._cond:
            self._written += 1
            self.commits += 1
            return self._written

    def latest(self) -> int:
        with self._cond:
            return self._written

    def durable(self) -> int:
        with self._cond:
            return self._synced

    def wait(self, seq: int) -> None:
        """Return once every commit numbered up to ``seq`` is durable (module doc)."""
        with self._cond:
            while self._synced < seq:
                if self._syncing:
                    self._cond.wait()
                    continue
                self._syncing = True
                target = self._written
                self._cond.release()
                try:
                    self._fsync()
                except BaseException:
                    self._cond.acquire()
                    self._syncing = False
                    self._cond.notify_all()
                    raise
                self._cond.acquire()
                self._syncing = False
                self._synced = max(self._synced, target)
                self.fsyncs += 1
                self._cond.notify_all()

    def _fsync(self) -> None:
        try:
            if self._fd is None:
                self._fd = os.open(self._wal_path, os.O_RDONLY | os.O_CLOEXEC)
                fsync_dir(self._wal_path.parent)  # the -wal file's name is durable too
            os.fsync(self._fd)
        except OSError as exc:
            raise StoreWriteFailed(
                f"fsync of {self._wal_path} failed ({exc}); durability of the write is unknown"
            ) from exc

    def close(self) -> None:
        """After the store's connection is closed."""
        with self._cond:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
