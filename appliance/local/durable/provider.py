"""The ``SchedulerStateProvider`` contract and a base that applies the pure record transitions.

Contract (checked by one test suite against every provider):
- ``acquire_epoch`` returns a fencing epoch strictly greater than any it returned before, across
  restarts of the process (it is persisted before it is returned);
- ``claim`` succeeds only for the record's current ``next_run``/``attempt`` and only when no other
  owner holds an unexpired claim (an owner restarting under a newer epoch takes its own claim
  over at once); a newer epoch fences every older one;
- ``renew`` and ``commit_receipt`` succeed only while the exact claim is still held, and
  ``commit_receipt`` atomically closes the claim, appends the receipt and moves the cursor;
- every mutation is durable before the call returns.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Protocol

from ..config import MAX_DURABLE_TASKS
from ..errors import StateProviderError
from . import records as rec
from .records import Claim, DurableTaskRecord, Receipt


class SchedulerStateProvider(Protocol):
    def acquire_epoch(self) -> int: ...

    def load(self, task_key: str) -> DurableTaskRecord | None: ...

    def register(
        self, task_key: str, definition: str, next_run: datetime | None, attempt: int
    ) -> DurableTaskRecord: ...

    def claim(
        self,
        task_key: str,
        owner_id: str,
        epoch: int,
        due: datetime,
        attempt: int,
        now: datetime,
        ttl: timedelta,
    ) -> Claim: ...

    def renew(self, claim: Claim, now: datetime, ttl: timedelta) -> Claim: ...

    def commit_receipt(
        self,
        claim: Claim,
        receipt: Receipt,
        next_run: datetime | None,
        attempt: int,
        runs_completed: int,
    ) -> DurableTaskRecord: ...

    def records(self) -> list[DurableTaskRecord]: ...

    def close(self) -> None: ...


class TransitionProvider(abc.ABC):
    """Implements the contract over three storage primitives run inside ``_transaction``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # same-process serialization of read-modify-write

    # storage primitives -------------------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._lock:
            yield

    @abc.abstractmethod
    def _read(self, task_key: str) -> DurableTaskRecord | None: ...

    @abc.abstractmethod
    def _write(self, record: DurableTaskRecord) -> None: ...

    @abc.abstractmethod
    def _count(self) -> int: ...

    @abc.abstractmethod
    def _bump_epoch(self) -> int: ...

    @abc.abstractmethod
    def records(self) -> list[DurableTaskRecord]: ...

    def close(self) -> None:  # optional hook: providers without resources keep this one
        return None

    # contract -----------------------------------------------------------------------------------
    def acquire_epoch(self) -> int:
        with self._transaction():
            return self._bump_epoch()

    def load(self, task_key: str) -> DurableTaskRecord | None:
        with self._transaction():
            return self._read(task_key)

    def register(
        self, task_key: str, definition: str, next_run: datetime | None, attempt: int
    ) -> DurableTaskRecord:
        with self._transaction():
            existing = self._read(task_key)
            if existing is None and self._count() >= MAX_DURABLE_TASKS:
                raise StateProviderError(f"more than {MAX_DURABLE_TASKS} durable tasks")
            record = rec.registered(existing, task_key, definition, next_run, attempt)
            self._write(record)
            return record

    def claim(
        self,
        task_key: str,
        owner_id: str,
        epoch: int,
        due: datetime,
        attempt: int,
        now: datetime,
        ttl: timedelta,
    ) -> Claim:
        with self._transaction():
            record, claim = rec.claimed(
                self._read(task_key), task_key, owner_id, epoch, due, attempt, now, ttl
            )
            self._write(record)
            return claim

    def renew(self, claim: Claim, now: datetime, ttl: timedelta) -> Claim:
        with self._transaction():
            record, fresh = rec.renewed(self._read(claim.task_key), claim, now, ttl)
            self._write(record)
            return fresh

    def commit_receipt(
        self,
        claim: Claim,
        receipt: Receipt,
        next_run: datetime | None,
        attempt: int,
        runs_completed: int,
    ) -> DurableTaskRecord:
        with self._transaction():
            record = rec.receipted(
                self._read(claim.task_key), claim, receipt, next_run, attempt, runs_completed
            )
            self._write(record)
            return record


class MemoryStateProvider(TransitionProvider):
    """Durable only for the life of the process: for tests and for embedding code that wants
    claims and fencing between schedulers of one process."""

    def __init__(self) -> None:
        super().__init__()
        self._records: dict[str, DurableTaskRecord] = {}
        self._epoch = 0

    def _read(self, task_key: str) -> DurableTaskRecord | None:
        return self._records.get(task_key)

    def _write(self, record: DurableTaskRecord) -> None:
        self._records[record.task_key] = record

    def _count(self) -> int:
        return len(self._records)

    def _bump_epoch(self) -> int:
        self._epoch += 1
        return self._epoch

    def records(self) -> list[DurableTaskRecord]:
        with self._transaction():
            return [self._records[k] for k in sorted(self._records)]
