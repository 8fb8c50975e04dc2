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


class _Waiter:
    """One caller waiting for its commit to be durable, woken only when that is so (or when it
    is asked to run the next fsync)."""

    __slots__ = ("cond", "seq")

    def __init__(self, seq: int, lock: threading.Lock) -> None:
        self.seq = seq
        self.cond = threading.Condition(lock)


class GroupSync:
    def __init__(self, wal_path: Path) -> None:
        self._wal_path = wal_path
        self._lock = threading.Lock()
        self._waiters: list[_Waiter] = []  # callers waiting for a running fsync
        self._written = 0  # the highest commit number whose frames are in the -wal file
        self._synced = 0  # the highest commit number known durable
        self._syncing = False
        self._fd: int | None = None
        self.fsyncs = 0  # how many fsyncs covered how many commits: the batching, for tests
        self.commits = 0
        self.wakeups = 0  # waits that ended in a wake-up (for tests: no thundering herd)

    def committed(self) -> int:
        """Call right after a COMMIT, still holding the store lock: its sequence number."""
        with self._lock:
            self._written += 1
            self.commits += 1
            return self._written

    def latest(self) -> int:
        with self._lock:
            return self._written

    def durable(self) -> int:
        with self._lock:
            return self._synced

    def wait(self, seq: int) -> None:
        """Return once every commit numbered up to ``seq`` is durable (module doc).

        A caller that finds no fsync running runs one; the others sleep until a finished fsync
        covers them — each is woken alone, so a burst of concurrent launches does not wake every
        waiter at every fsync — and one that is not covered is woken to run the next."""
        with self._lock:
            me: _Waiter | None = None
            try:
                while self._synced < seq:
                    if not self._syncing:
                        self._sync_now()
                        continue
                    if me is None:
                        me = _Waiter(seq, self._lock)
                        self._waiters.append(me)
                    me.cond.wait()
                    self.wakeups += 1
            finally:
                if me is not None:
                    self._waiters.remove(me)

    def _sync_now(self) -> None:
        """Under the lock: fsync everything written so far (the lock is released meanwhile),
        then wake the waiters it covers and one it does not (the next fsync's runner)."""
        self._syncing = True
        target = self._written
        self._lock.release()
        try:
            self._fsync()
        except BaseException:
            self._lock.acquire()
            self._syncing = False
            for waiter in self._waiters:  # each tries (and fails) for itself
                waiter.cond.notify()
            raise
        self._lock.acquire()
        self._syncing = False
        self._synced = max(self._synced, target)
        self.fsyncs += 1
        following: _Waiter | None = None
        for waiter in self._waiters:
            if waiter.seq <= self._synced:
                waiter.cond.notify()
            elif following is None or waiter.seq < following.seq:
                following = waiter
        if following is not None:
            following.cond.notify()

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
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
