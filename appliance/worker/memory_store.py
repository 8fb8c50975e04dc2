"""The worker store's rules in memory, with a disk that can lose unsynced writes.

Theory of operation. ``MemoryWorkerStore`` keeps every rule of ``WorkerStore``
(appliance/store/worker_store.py: reserve -> record_permit -> consume at most once, the fence,
the receipt, execution records that never change once finished, a new incarnation at every
open) over dictionaries, so the launch core runs the same decisions in the system simulator.
``tests/store/test_worker_store_contract.py`` runs one suite against both stores.

Durability is modelled as the SQLite store has it: a durable write is "fsynced" — it and every
earlier write survive; a ``durable=False`` write (the receipt, engine progress and outcomes)
survives a process crash (``reopen``) but not a power loss (``reopen(power_loss=True)``) unless a
later durable write or a read of it covered it, as the next fsync of the WAL covers every
earlier frame and a read waits for the fsync that covers what it read.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from appliance.core.canonical import canonical_json
from appliance.protocol.v1 import ID_MAX, Invocation, check_invocation_key
from appliance.store import worker_records as rules
from appliance.store.errors import WorkerRecordRefused
from appliance.store.worker_records import (
    PRUNE_LOOKAHEAD_FACTOR,
    ExecutionRecord,
    InvocationRecord,
    Pruned,
    Reserved,
)


@dataclass
class MemoryDisk:
    """What survives: the synced image, and the image with the unsynced writes on top."""

    synced: dict[str, Any] = field(default_factory=lambda: _empty_image())
    current: dict[str, Any] = field(default_factory=lambda: _empty_image())

    def lose_unsynced(self) -> None:
        self.current = copy.deepcopy(self.synced)


def _empty_image() -> dict[str, Any]:
    return {"invocations": {}, "executions": {}, "incarnations": [], "retained_through": 0}


class MemoryWorkerStore:
    """A worker store on a ``MemoryDisk``; open a new one per incarnation (``open``)."""

    def __init__(self, disk: MemoryDisk, namespace: str, incarnation_id: str) -> None:
        self._disk = disk
        self.namespace = namespace
        self._incarnation_id = incarnation_id

    @property
    def incarnation_id(self) -> str:
        return self._incarnation_id

    def close(self) -> None:
        return None

    def __enter__(self) -> MemoryWorkerStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def open(
        cls, disk: MemoryDisk, *, namespace: str, incarnation_id: str, now_ms: int
    ) -> MemoryWorkerStore:
        if any(i == incarnation_id for i, _ in disk.current["incarnations"]):
            raise ValueError(f"incarnation id {incarnation_id!r} was already used")
        store = cls(disk, namespace, incarnation_id)
        store._commit(lambda image: image["incarnations"].append((incarnation_id, now_ms)))
        return store

    # -- transactions --

    def _commit(self, change: Any, durable: bool = True) -> None:
        change(self._disk.current)
        if durable:
            self._disk.synced = copy.deepcopy(self._disk.current)

    @property
    def _invocations(self) -> dict[tuple[str, int, int, int], dict[str, Any]]:
        return self._disk.current["invocations"]

    @property
    def _executions(self) -> dict[str, ExecutionRecord]:
        return self._disk.current["executions"]

    def incarnations(self) -> list[tuple[str, int]]:
        return list(self._disk.current["incarnations"])

    def _check_namespace(self, invocation: Invocation) -> None:
        check_invocation_key(invocation)
        if invocation.namespace != self.namespace:
            raise WorkerRecordRefused(
                "namespace_mismatch",
                f"invocation namespace {invocation.namespace!r} is not this worker's "
                f"{self.namespace!r}",
            )

    def _load(self, invocation: Invocation) -> InvocationRecord | None:
        body = self._invocations.get(invocation.key())
        return None if body is None else InvocationRecord(invocation, **copy.deepcopy(body))

    def _save(self, record: InvocationRecord, durable: bool = True) -> None:
        body = json.loads(canonical_json(record.body()))
        self._commit(
            lambda image: image["invocations"].__setitem__(record.invocation.key(), body), durable
        )

    # -- invocation records --

    def get(self, invocation: Invocation) -> InvocationRecord | None:
        self._read_barrier("invocations", invocation.key())
        return self._load(invocation)

    def _read_barrier(self, table: str, key: Any) -> None:
        """A read returns only once what it read is durable (WorkerStore's group commit waits
        for the fsync that covers it): reading an unsynced record syncs the disk."""
        if self._disk.current[table].get(key) != self._disk.synced[table].get(key):
            self._disk.synced = copy.deepcopy(self._disk.current)

    def reserve(self, invocation: Invocation, binding: dict[str, Any], *, now_ms: int) -> Reserved:
        self._check_namespace(invocation)
        existing = self._load(invocation)
        reserved = rules.reserve(
            existing,
            invocation,
            rules.canonical(binding),
            incarnation_id=self._incarnation_id,
            now_ms=now_ms,
        )
        if reserved.record is not existing:
            self._save(reserved.record)
        return reserved

    def record_permit(
        self, invocation: Invocation, permit: dict[str, Any], *, now_ms: int
    ) -> InvocationRecord:
        self._check_namespace(invocation)
        change = rules.record_permit(
            self._load(invocation),
            invocation,
            rules.canonical(permit),
            incarnation_id=self._incarnation_id,
            now_ms=now_ms,
        )
        if change.changed:
            self._save(change.record)
        return change.record

    def consume(self, invocation: Invocation, *, execution_id: str, now_ms: int) -> ExecutionRecord:
        self._check_namespace(invocation)
        record, execution = rules.consume(
            self._load(invocation),
            invocation,
            execution_id=execution_id,
            incarnation_id=self._incarnation_id,
            now_ms=now_ms,
        )
        if execution_id in self._executions:
            raise ValueError(f"execution id {execution_id!r} is already used")
        body = json.loads(canonical_json(record.body()))

        def change(image: dict[str, Any]) -> None:  # one transaction: both rows or neither
            image["invocations"][invocation.key()] = body
            image["executions"][execution_id] = execution

        self._commit(change)
        return execution

    def fence(self, invocation: Invocation, *, reason: str, now_ms: int) -> InvocationRecord:
        self._check_namespace(invocation)
        change = rules.fence(
            self._load(invocation),
            invocation,
            reason=reason,
            incarnation_id=self._incarnation_id,
            now_ms=now_ms,
        )
        if change.changed:
            self._save(change.record)
        return change.record

    def record_receipt(
        self,
        invocation: Invocation,
        receipt: dict[str, Any],
        *,
        now_ms: int,
        durable: bool = True,
    ) -> InvocationRecord:
        self._check_namespace(invocation)
        change = rules.record_receipt(
            self._load(invocation), invocation, rules.canonical(receipt), now_ms=now_ms
        )
        if change.changed:
            self._save(change.record, durable)
        return change.record

    # -- retention --

    def retained_through(self) -> int:
        return int(self._disk.current.get("retained_through", 0))

    def prune_through(self, retained_through: int, *, rows_max: int) -> Pruned:
        """``WorkerStore.prune_through``: W and the deletions in one write without an fsync."""
        if type(retained_through) is not int or not 0 <= retained_through <= ID_MAX:
            raise ValueError(f"retained_through must be an integer in [0, {ID_MAX}]")
        if type(rows_max) is not int or rows_max < 1:
            raise ValueError(f"rows_max must be a positive integer, got {rows_max!r}")
        limit = rows_max * PRUNE_LOOKAHEAD_FACTOR
        floor = max(self.retained_through(), retained_through)
        candidates = [key for key in self._invocations if key[2] <= floor][:limit]
        doomed: list[tuple[tuple[str, int, int, int], str | None]] = []
        for key in candidates:
            if len(doomed) == rows_max:
                break
            consumed = self._invocations[key].get("consumed")
            eid = None if consumed is None else consumed.get("execution_id")
            execution = None if eid is None else self._executions.get(str(eid))
            if execution is not None and not execution.finished:
                continue
            doomed.append((key, None if eid is None else str(eid)))

        def change(image: dict[str, Any]) -> None:
            image["retained_through"] = floor
            for key, eid in doomed:
                del image["invocations"][key]
                if eid is not None:
                    image["executions"].pop(eid, None)

        self._commit(change, durable=False)
        deleted = len(doomed)
        return Pruned(deleted, deleted > 0 and (deleted == rows_max or len(candidates) == limit))

    def counts(self) -> dict[str, int]:
        return {"invocations": len(self._invocations), "executions": len(self._executions)}

    # -- execution records --

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        self._read_barrier("executions", execution_id)
        return self._executions.get(execution_id)

    def update_execution(
        self,
        execution_id: str,
        *,
        status: str,
        now_ms: int,
        output: bytes | None = None,
        result: Any = None,
        error: str | None = None,
        durable: bool = True,
    ) -> ExecutionRecord:
        progress = rules.checked_progress(status, output, result, error)
        # The result as a read from disk gives it back (SQLite stores canonical JSON).
        progress = progress._replace(result=json.loads(canonical_json(progress.result)))
        updated = rules.progressed(
            self._executions.get(execution_id), execution_id, progress, now_ms=now_ms
        )
        self._commit(lambda image: image["executions"].__setitem__(execution_id, updated), durable)
        return updated

    def unfinished_from_previous_incarnations(self) -> list[ExecutionRecord]:
        return sorted(
            (
                e
                for e in self._executions.values()
                if e.status in ("submitted", "running") and e.incarnation_id != self._incarnation_id
            ),
            key=lambda e: e.execution_id,
        )


class MemoryStores:
    """Opens memory stores by directory name, as ``WorkerStore.create_or_open`` opens files:
    each open is a new incarnation on the same disk (the contract suite uses it)."""

    def __init__(self) -> None:
        self.disks: dict[str, MemoryDisk] = {}
        self._opened = 0

    def open(self, data_dir: object, *, namespace: str, now_ms: int) -> MemoryWorkerStore:
        disk = self.disks.setdefault(str(data_dir), MemoryDisk())
        self._opened += 1
        return MemoryWorkerStore.open(
            disk, namespace=namespace, incarnation_id=f"mem-{self._opened}", now_ms=now_ms
        )
