"""The durable-log seam: what the Raft core needs from a store, and an in-memory store.

The interface uses primitive types only (``(index, term, payload)`` tuples) so a store need not
import the Raft package; the SQLite ``RunnerStore`` satisfies the same Protocol. Contract:

- ``persist`` is one atomic, durable step: hard state, then suffix truncation (every index
  ``>= truncate_from`` removed), then appends. Entries must be contiguous after the truncation.
- ``entries(lo, hi, max_bytes)`` returns ``lo <= index < hi`` in order, stopping early once
  ``max_bytes`` of payload would be exceeded, but always at least one entry when any exists.
- ``term_at(i)`` is ``None`` outside ``[first_index, last_index]``; both indexes are 0 when empty.
  The log is never compacted, so ``first_index`` is 1 once anything was stored.
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


class MemoryLogStorage:
    """An in-memory ``LogStorage``: durable for as long as the object lives.

    ``recovering=True`` stands for a store made by ``admin store recover`` (a lost disk)."""

    def __init__(self, *, recovering: bool = False) -> None:
        self._term = 0
        self._voted_for: str | None = None
        self._log: list[StoredEntry] = []
        self._recovering = recovering
        self.persist_calls = 0

    def recovering(self) -> bool:
        return self._recovering

    def clear_recovering(self) -> None:
        self._recovering = False
        self.persist_calls += 1

    def hard_state(self) -> tuple[int, str | None]:
        return self._term, self._voted_for

    def first_index(self) -> int:
        return 1 if self._log else 0

    def last_index(self) -> int:
        return len(self._log)

    def term_at(self, index: int) -> int | None:
        if 1 <= index <= len(self._log):
            return self._log[index - 1][1]
        return None

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[StoredEntry]:
        out: list[StoredEntry] = []
        total_bytes = 0
        for index in range(max(lo, 1), min(hi, len(self._log) + 1)):
            entry = self._log[index - 1]
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
        base = len(self._log)
        if truncate_from is not None:
            if truncate_from < 1:
                raise RaftInvariantError(f"truncate_from must be >= 1, got {truncate_from}")
            base = min(base, truncate_from - 1)
        for offset, (index, _term, _payload) in enumerate(entries):
            if index != base + 1 + offset:
                raise RaftInvariantError(
                    f"non-contiguous append: entry {index} where {base + 1 + offset} was due"
                )
        # Validated first, applied second: a refused persist changes nothing.
        del self._log[base:]
        self._log.extend((i, t, bytes(p)) for i, t, p in entries)
        self._term, self._voted_for = term, voted_for
        self.persist_calls += 1
