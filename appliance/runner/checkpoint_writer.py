"""Writing applied transitions to the checkpoint off the Raft path, merged.

Theory of operation
-------------------
The checkpoint is a cache of the state the committed log produces, not the record of any
decision: a command is decided once a quorum has it durably in its logs, before any replica
applies it. A checkpoint that lags the applied state is therefore safe as long as the log still
holds every entry after the checkpoint's applied index — the log is only ever compacted up to
the *durable* checkpoint (``LogStorage.snapshot_index_available``, docs/raft.md), and a restart
re-applies the committed entries after the checkpoint's applied index, exactly as after a crash
between a commit and its apply.

So the apply hook hands each transition (the parts it touched, with their bytes as of that
apply) to this writer and returns at once; the proposal's answer no longer waits for a
checkpoint fsync (about a millisecond per commit, and several when the disk is busy:
docs/runner.md, "Benchmark"). The writer's thread takes everything queued, merges it — the
newest bytes of each part, the deletions not undone later, the last applied index, the highest
reader version asked for — and writes it as ONE durable ``save_transition``. Each write is a
consistent state (the state after its last transition), written in apply order.

Limits: at most ``pending_max`` transitions wait; beyond that the apply hook blocks until the
writer catches up (backpressure on the Raft driver, never unbounded memory). A write that fails
is fatal: ``on_fatal`` is called and every later ``put`` raises, so the driver stops too —
never a replica that goes on applying what it can no longer record.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

PENDING_TRANSITIONS_MAX: Final = 1024


class CheckpointStore(Protocol):
    def save_transition(
        self,
        applied_index: int,
        upserts: Mapping[str, bytes],
        deletes: Iterable[str] = (),
        *,
        min_reader_version: int | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class Transition:
    index: int
    upserts: Mapping[str, bytes]
    deletes: frozenset[str]
    min_reader_version: int | None


def merge(transitions: list[Transition]) -> Transition:
    """One transition equal to applying ``transitions`` in order (non-empty, ascending indexes)."""
    upserts: dict[str, bytes] = {}
    deletes: set[str] = set()
    versions = [t.min_reader_version for t in transitions if t.min_reader_version is not None]
    for t in transitions:
        for name in t.deletes:
            upserts.pop(name, None)
            deletes.add(name)
        for name, data in t.upserts.items():
            deletes.discard(name)
            upserts[name] = data
    return Transition(
        transitions[-1].index, upserts, frozenset(deletes), max(versions, default=None)
    )


class CheckpointWriter:
    def __init__(
        self,
        store: CheckpointStore,
        on_fatal: Callable[[BaseException], None] | None = None,
        *,
        pending_max: int = PENDING_TRANSITIONS_MAX,
    ) -> None:
        if pending_max < 1:
            raise ValueError("pending_max must be >= 1")
        self._store = store
        self._on_fatal = on_fatal
        self._pending_max = pending_max
        self._pending: list[Transition] = []
        self._put_index = 0  # the last index handed over
        self._durable_index = 0  # the last index written
        self._failed: BaseException | None = None
        self._closing = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
        self._thread.start()

    def put(
        self,
        index: int,
        upserts: Mapping[str, bytes],
        deletes: Iterable[str],
        min_reader_version: int | None,
    ) -> None:
        """Queue one applied transition (blocks while ``pending_max`` are waiting)."""
        transition = Transition(index, upserts, frozenset(deletes), min_reader_version)
        with self._cond:
            while len(self._pending) >= self._pending_max and self._failed is None:
                self._cond.wait()
            if self._failed is not None:
                raise RuntimeError(f"the checkpoint can no longer be written: {self._failed!r}")
            if self._closing:
                raise RuntimeError("the checkpoint writer is closed")
            self._pending.append(transition)
            self._put_index = index
            self._cond.notify_all()

    def flush(self, timeout_s: float) -> bool:
        """Wait until every transition queued so far is durable; False on timeout or failure."""
        with self._cond:
            target = self._put_index
            self._cond.wait_for(
                lambda: self._durable_index >= target or self._failed is not None, timeout_s
            )
            return self._durable_index >= target and self._failed is None

    def close(self, timeout_s: float = 10.0) -> bool:
        """Write what is queued, then stop the thread; True when all of it is durable."""
        flushed = self.flush(timeout_s)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout_s)
        return flushed

    @property
    def durable_index(self) -> int:
        with self._cond:
            return self._durable_index

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return  # closing, nothing left
                batch, self._pending = self._pending, []
                self._cond.notify_all()  # room for blocked puts
            merged = merge(batch)
            try:
                self._store.save_transition(
                    merged.index,
                    merged.upserts,
                    merged.deletes,
                    min_reader_version=merged.min_reader_version,
                )
            except BaseException as exc:  # the checkpoint can no longer follow the state
                with self._cond:
                    self._failed = exc
                    self._cond.notify_all()
                if self._on_fatal is not None:
                    self._on_fatal(exc)
                return
            with self._cond:
                self._durable_index = merged.index
                self._cond.notify_all()
