"""The durable-log seam: what the Raft core needs from a store, and an in-memory store.

The interface uses primitive types only (``(index, term, payload)`` tuples) so a store need not
import the Raft package; the SQLite ``RunnerStore`` satisfies the same Protocol. Contract:

- ``persist`` is one atomic, durable step: hard state, then suffix truncation (every index
  ``>= truncate_from`` removed), then appends. Entries must be contiguous after the truncation.
- ``entries(lo, hi, max_bytes)`` returns ``lo <= index < hi`` in order, stopping early once
  ``max_bytes`` of payload would be exceeded, but always at least one entry when any exists.
- ``term_at(i)`` is ``None`` outside ``[first_index - 1, last_index]``; both indexes are 0 when
  empty and nothing was ever compacted.
- Compaction (thesis §5): ``snapshot_meta()`` is ``(index, term)`` of the last compaction point
  (``(0, 0)`` before any). Once compacted, ``first_index`` is ``index + 1``, ``term_at(index)``
  is that term, ``last_index`` is at least ``index``, and no entry at or below it is ever read
  again. ``compact(index, term, voters)`` moves the point up (durably; the space may be reclaimed
  later, off the node's turn); it is only ever given an index at or below the storage's own
  ``snapshot_index_available()`` (the durable checkpoint), so the state the dropped entries
  produced is never lost. ``snapshot()`` is that checkpoint as ``(index, term, data)``;
  ``install_snapshot(snapshot)`` replaces the checkpoint AND the whole log with a snapshot from
  the leader in one atomic, durable step. ``log_bytes()`` is the payload bytes the log holds.
- ``recovering()`` is True for a store rebuilt after its voter lost its durable state (``admin
  store recover``): the node neither votes nor campaigns until it has caught up (node.py,
  docs/voter-recovery.md). ``clear_recovering`` clears that flag in one durable step; the driver
  calls it, after persisting the Ready that finished the catch-up and before sending its messages.

``MemoryLogStorage`` is what the simulator's fake disk is built on: it holds exactly what was
persisted, so a simulated crash keeps it and loses whatever the node had not yet handed over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from appliance.raft.errors import RaftInvariantError
from appliance.raft.snapshot import Snapshot

StoredEntry = tuple[int, int, bytes]


class LogStorage(Protocol):
    def hard_state(self) -> tuple[int, str | None]: ...

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def term_at(self, index: int) -> int | None: ...

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[StoredEntry]: ...

    def persist(
        self,
        *,
        term: int,
        voted_for: str | None,
        truncate_from: int | None = None,
        entries: Sequence[StoredEntry] = (),
    ) -> None: ...

    def recovering(self) -> bool: ...

    def clear_recovering(self) -> None: ...

    def snapshot_meta(self) -> tuple[int, int]: ...

    def snapshot_voters(self) -> tuple[str, ...]:
        """The configuration at the compaction point (``Membership.members()`` form; empty
        before any compaction)."""
        ...

    def snapshot_index_available(self) -> int: ...

    def snapshot(self) -> tuple[int, int, bytes]: ...

    def compact(self, index: int, term: int, voters: tuple[str, ...]) -> None: ...

    def install_snapshot(self, snapshot: Snapshot) -> None: ...

    def log_bytes(self) -> int: ...


class MemoryLogStorage:
    """An in-memory ``LogStorage``: durable for as long as the object lives.

    ``recovering=True`` stands for a store made by ``admin store recover`` (a lost disk). The
    "checkpoint" is whatever the application last gave ``save_checkpoint(index, data)``: what
    ``snapshot()`` hands out and what ``install_snapshot`` replaces."""

    def __init__(self, *, recovering: bool = False) -> None:
        self._term = 0
        self._voted_for: str | None = None
        self._log: list[StoredEntry] = []  # entries snap_index+1 ..
        self._snap_index = 0
        self._snap_term = 0
        self._snap_voters: tuple[str, ...] = ()
        self._checkpoint: tuple[int, bytes] = (0, b"")
        self._recovering = recovering
        self.persist_calls = 0
        self.installs = 0
        self.compactions = 0

    def recovering(self) -> bool:
        return self._recovering

    def clear_recovering(self) -> None:
        self._recovering = False
        self.persist_calls += 1

    def hard_state(self) -> tuple[int, str | None]:
        return self._term, self._voted_for

    def first_index(self) -> int:
        if self._snap_index:
            return self._snap_index + 1
        return 1 if self._log else 0

    def last_index(self) -> int:
        return self._snap_index + len(self._log)

    def term_at(self, index: int) -> int | None:
        if self._snap_index and index == self._snap_index:
            return self._snap_term
        offset = index - self._snap_index
        if 1 <= offset <= len(self._log):
            return self._log[offset - 1][1]
        return None

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[StoredEntry]:
        out: list[StoredEntry] = []
        total_bytes = 0
        first = self._snap_index + 1
        for index in range(max(lo, first), min(hi, self.last_index() + 1)):
            entry = self._log[index - first]
            total_bytes += len(entry[2])
            if out and max_bytes is not None and total_bytes > max_bytes:
                break
            out.append(entry)
        return out

    def persist(
        self,
        *,
        term: int,
        voted_for: str | None,
        truncate_from: int | None = None,
        entries: Sequence[StoredEntry] = (),
    ) -> None:
        if term < self._term:
            raise RaftInvariantError(f"persisted term would go back from {self._term} to {term}")
        base = self.last_index()
        if truncate_from is not None:
            if truncate_from <= self._snap_index:
                raise RaftInvariantError(
                    f"truncate_from {truncate_from} is at or below the snapshot {self._snap_index}"
                )
            base = min(base, truncate_from - 1)
        for offset, (index, _term, _payload) in enumerate(entries):
            if index != base + 1 + offset:
                raise RaftInvariantError(
                    f"non-contiguous append: entry {index} where {base + 1 + offset} was due"
                )
        # Validated first, applied second: a refused persist changes nothing.
        del self._log[base - self._snap_index :]
        self._log.extend((i, t, bytes(p)) for i, t, p in entries)
        self._term, self._voted_for = term, voted_for
        self.persist_calls += 1

    # -- snapshots and compaction ------------------------------------------------------------

    def save_checkpoint(self, index: int, data: bytes) -> None:
        """The application's durable state as of ``index`` (what a snapshot is made of)."""
        if index < self._checkpoint[0]:
            raise RaftInvariantError(f"checkpoint would go back from {self._checkpoint[0]}")
        if index > self.last_index():
            raise RaftInvariantError(f"checkpoint {index} beyond the log {self.last_index()}")
        self._checkpoint = (index, bytes(data))

    def checkpoint(self) -> tuple[int, bytes]:
        return self._checkpoint

    def snapshot_meta(self) -> tuple[int, int]:
        return self._snap_index, self._snap_term

    def snapshot_voters(self) -> tuple[str, ...]:
        return self._snap_voters

    def snapshot_index_available(self) -> int:
        return self._checkpoint[0]

    def snapshot(self) -> tuple[int, int, bytes]:
        index, data = self._checkpoint
        term = self.term_at(index) if index else 0
        if term is None:
            raise RaftInvariantError(f"no term for the checkpoint index {index}")
        return index, term, data

    def compact(self, index: int, term: int, voters: tuple[str, ...]) -> None:
        if index <= self._snap_index:
            return
        if index > self._checkpoint[0]:
            raise RaftInvariantError(
                f"compacting to {index} beyond the checkpoint {self._checkpoint[0]}"
            )
        if self.term_at(index) != term:
            raise RaftInvariantError(f"compaction term {term} is not the term at {index}")
        del self._log[: index - self._snap_index]
        self._snap_index, self._snap_term, self._snap_voters = index, term, tuple(voters)
        self.compactions += 1

    def install_snapshot(self, snapshot: Snapshot) -> None:
        if snapshot.index < self._checkpoint[0]:
            raise RaftInvariantError(
                f"snapshot {snapshot.index} is older than the checkpoint {self._checkpoint[0]}"
            )
        self._log = []
        self._snap_index, self._snap_term = snapshot.index, snapshot.term
        self._snap_voters = snapshot.voters
        self._checkpoint = (snapshot.index, bytes(snapshot.data))
        self.installs += 1

    def log_bytes(self) -> int:
        return sum(len(p) for _, _, p in self._log)
