"""The worker store: admissions evidence keyed by invocation, and engine execution records.

Theory of operation. The worker's promise is "submitted at most once" (SPEC §1, §7). Each step of
an exec request is made durable before the next one starts, each in ONE transaction:

    reserve (binding fixed) -> record_permit (the quorum permit) -> consume (+ execution record)
    -> update_execution ... (engine progress) ; fence (cancel) may come at any point.

``consume`` is the single point of no return: it refuses a second consume, a fenced invocation,
and a permit recorded by an earlier incarnation (the runner's permit names the incarnation that
asked, SPEC §6). Records are never deleted on restart, so a restart can never turn a consumed
reservation into permission to replay. The one deletion is retention (``prune_through``): only
invocations at or below the floor W the runner committed (every such occurrence left its
checkpoint), after W itself is recorded in the same transaction (meta row
``retained_through``), so the worker can refuse them from then on — docs/worker.md "Retention"
gives the argument. A new incarnation id is recorded at every open (previous
ones kept); executions that were unfinished when an earlier incarnation died are listed by
``unfinished_from_previous_incarnations`` so that the worker can report them as lost.

Time is injected: every method that records an instant takes ``now_ms`` (Unix milliseconds).
Every read verifies the row checksum (``StoreCorrupt`` on failure). One connection, one lock.

Two writes may be made with ``durable=False``: the receipt and engine progress (``running``).
Neither protects a decision — ``consume`` (durable, before the submission) is what makes a
restart report the execution instead of relaunching it, with or without them — so they skip
their own fsync (WAL with ``synchronous=NORMAL`` for that one commit): a process crash keeps
them (the OS has the pages), a power loss may drop them but keeps the order, because the next
durable commit's fsync covers every earlier frame of the WAL. Terminal outcomes stay durable:
the runner records what ``observe`` answered.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw

from appliance.core.canonical import canonical_digest, canonical_json
from appliance.protocol.v1 import ID_MAX, Invocation, check_invocation_key
from appliance.store import schema
from appliance.store import worker_records as rules
from appliance.store.checksum import checksum, matches
from appliance.store.errors import StoreCorrupt, WorkerRecordRefused
from appliance.store.group_sync import GroupSync
from appliance.store.opened import OpenedStore
from appliance.store.opening import open_guarded
from appliance.store.sqlite import DataDirLock, transaction
from appliance.store.versions import KIND_WORKER, WORKER_FILE_NAME
from appliance.store.worker_records import (
    EXECUTION_OUTPUT_BYTES_MAX,
    EXECUTION_STATUSES,
    PRUNE_LOOKAHEAD_FACTOR,
    TERMINAL_STATUSES,
    ExecutionRecord,
    InvocationRecord,
    Pruned,
    Reserved,
)

__all__ = [  # the records and their constants live in worker_records.py; re-exported here
    "EXECUTION_OUTPUT_BYTES_MAX",
    "EXECUTION_STATUSES",
    "PRUNE_LOOKAHEAD_FACTOR",
    "TERMINAL_STATUSES",
    "ExecutionRecord",
    "Invocation",
    "InvocationRecord",
    "Pruned",
    "Reserved",
    "WorkerStore",
]

WRITTEN_KEYS_MAX = 4096  # entries kept for the read barrier before the durable ones are dropped
META_RETAINED_THROUGH = "retained_through"  # W: the highest occurrence id pruning may reach


class WorkerStore(OpenedStore):
    """The worker's durable admissions store in ``data_dir/worker.sqlite3``."""

    store_name = "worker store"

    def __init__(
        self,
        conn: apsw.Connection,
        lock: DataDirLock,
        path: Path,
        namespace: str,
        incarnation_id: str,
        created: bool,
    ):
        super().__init__(conn, lock, path, created)
        self.namespace = namespace
        self.incarnation_id = incarnation_id
        # Group commit (module doc): commits write the -wal without an fsync of their own and
        # wait for a shared one; opening was FULL, so every earlier commit is durable already.
        self._sync = GroupSync(path.with_name(path.name + "-wal"))
        self._written_by: dict[Any, int] = {}  # record key -> the commit that last wrote it
        self._keys: list[Any] = []  # the keys the transaction in progress writes
        conn.execute("PRAGMA synchronous=NORMAL")

    @classmethod
    def create_or_open(
        cls,
        data_dir: str | Path,
        *,
        namespace: str,
        worker_id: str,
        now_ms: int,
        incarnation_id: str | None = None,
    ) -> WorkerStore:
        """Open (or create and seal) the store and record a new incarnation.

        The sealed contract is ``{"namespace", "worker_id"}``: a data_dir cannot be reused by
        another worker identity. ``incarnation_id`` defaults to a fresh random UUID; a value
        already recorded is refused (an incarnation is new at every start).
        """
        contract = {"namespace": namespace, "worker_id": worker_id}
        conn, lock, created = open_guarded(
            data_dir,
            kind=KIND_WORKER,
            contract=contract,
            contract_digest=canonical_digest(contract),
            ddl=schema.WORKER_DDL,
            seed=lambda _conn: None,
        )
        incarnation = incarnation_id or uuid.uuid4().hex
        try:
            with transaction(conn):
                seq = conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM incarnation").fetchall()
                seq_value = seq[0][0]
                if conn.execute(
                    "SELECT 1 FROM incarnation WHERE incarnation_id = ?", (incarnation,)
                ).fetchall():
                    raise ValueError(f"incarnation id {incarnation!r} was already used")
                conn.execute(
                    "INSERT INTO incarnation (seq, incarnation_id, opened_at_ms, checksum) "
                    "VALUES (?, ?, ?, ?)",
                    (
                        seq_value,
                        incarnation,
                        now_ms,
                        checksum(schema.TAG_INCARNATION, seq_value, incarnation, now_ms),
                    ),
                )
            return cls(
                conn, lock, Path(data_dir) / WORKER_FILE_NAME, namespace, incarnation, created
            )
        except BaseException:
            conn.close()
            lock.release()
            raise

    @contextmanager
    def _write(self, durable: bool) -> Iterator[apsw.Connection]:
        """One transaction under the store lock; when ``durable``, returns only once it is
        durable — its fsync shared with the concurrent commits (group commit, module doc)."""
        with self._lock:
            self._keys = []
            with transaction(self._db) as db:
                yield db
            seq = self._sync.committed()
            for key in self._keys:  # what this commit wrote: a reader of it waits for it
                self._written_by[key] = seq
            self._forget_durable_keys()
        if durable:
            self._sync.wait(seq)

    @contextmanager
    def _read(self, key: Any = None) -> Iterator[apsw.Connection]:
        """A read under the store lock that returns only once what it read is durable: the
        commit that last wrote ``key`` (every commit so far when ``key`` is None). So nothing a
        caller committed leaves the process in another caller's answer before its fsync, and a
        read of a record nobody is writing never waits."""
        with self._lock:
            yield self._db
            seq = self._sync.latest() if key is None else self._written_by.get(key, 0)
        self._sync.wait(seq)

    def _forget_durable_keys(self) -> None:
        """Bound ``_written_by``: an entry whose commit is durable can never make a read wait."""
        if len(self._written_by) > WRITTEN_KEYS_MAX:
            durable = self._sync.durable()
            self._written_by = {k: v for k, v in self._written_by.items() if v > durable}

    def close(self) -> None:
        super().close()
        self._sync.close()

    # ----------------------------------------------------------------- incarnations
    def incarnations(self) -> list[tuple[str, int]]:
        """Every (incarnation_id, opened_at_ms), oldest first; the last one is this process."""
        result = []
        with self._read():
            for seq, incarnation_id, opened_at_ms, stored in self._db.execute(
                "SELECT seq, incarnation_id, opened_at_ms, checksum FROM incarnation ORDER BY seq"
            ):
                if not matches(stored, schema.TAG_INCARNATION, seq, incarnation_id, opened_at_ms):
                    raise StoreCorrupt(f"{self.path}: incarnation record {seq} fails its checksum")
                result.append((incarnation_id, opened_at_ms))
        return result

    # ----------------------------------------------------------------- invocation records
    def _check_namespace(self, invocation: Invocation) -> None:
        check_invocation_key(invocation)
        if invocation.namespace != self.namespace:
            raise WorkerRecordRefused(
                "namespace_mismatch",
                f"invocation namespace {invocation.namespace!r} is not this worker's "
                f"{self.namespace!r}",
            )

    def _load(self, invocation: Invocation) -> InvocationRecord | None:
        rows = self._db.execute(
            "SELECT record, checksum FROM invocation WHERE namespace = ? AND schedule_id = ? "
            "AND occurrence_id = ? AND attempt = ?",
            invocation.key(),
        ).fetchall()
        if not rows:
            return None
        record, stored = rows[0]
        if not isinstance(record, bytes) or not matches(
            stored, schema.TAG_INVOCATION, *invocation.key(), record
        ):
            raise StoreCorrupt(
                f"{self.path}: invocation record {invocation.key()} fails its checksum"
            )
        return InvocationRecord(invocation=invocation, **json.loads(record))

    def _save(self, record: InvocationRecord) -> None:
        body = canonical_json(record.body())
        key = record.invocation.key()
        self._keys.append(key)
        self._db.execute(
            "INSERT INTO invocation (namespace, schedule_id, occurrence_id, attempt, record, "
            "checksum) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, schedule_id, "
            "occurrence_id, attempt) DO UPDATE SET record = excluded.record, "
            "checksum = excluded.checksum",
            (*key, body, checksum(schema.TAG_INVOCATION, *key, body)),
        )

    def get(self, invocation: Invocation) -> InvocationRecord | None:
        """The durable record of ``invocation``, ``None`` if nothing was ever recorded for it."""
        with self._read(invocation.key()):
            return self._load(invocation)

    def reserve(self, invocation: Invocation, binding: dict[str, Any], *, now_ms: int) -> Reserved:
        """Reserve ``invocation`` with its ``binding`` (first call), or return what exists.

        A repeated reservation with the same binding returns the existing record (which may be
        permitted, consumed or fenced: the caller must look). A different binding for the same
        invocation is refused (``binding_mismatch``). A fence that arrived first leaves a record
        without binding: the binding is filled in, and the record stays fenced.
        """
        self._check_namespace(invocation)
        canonical_binding = rules.canonical(binding)
        with self._write(True):
            existing = self._load(invocation)
            reserved = rules.reserve(
                existing,
                invocation,
                canonical_binding,
                incarnation_id=self.incarnation_id,
                now_ms=now_ms,
            )
            if reserved.record is not existing:
                self._save(reserved.record)
            return reserved

    def record_permit(
        self, invocation: Invocation, permit: dict[str, Any], *, now_ms: int
    ) -> InvocationRecord:
        """Record the quorum permit for a reserved invocation (idempotent for the same permit).

        Refused: ``not_reserved``; ``permit_mismatch`` when a different permit is recorded.
        """
        self._check_namespace(invocation)
        canonical_permit = rules.canonical(permit)
        with self._write(True):
            change = rules.record_permit(
                self._load(invocation),
                invocation,
                canonical_permit,
                incarnation_id=self.incarnation_id,
                now_ms=now_ms,
            )
            if change.changed:
                self._save(change.record)
            return change.record

    def consume(self, invocation: Invocation, *, execution_id: str, now_ms: int) -> ExecutionRecord:
        """Consume the permit and create the execution record (status ``submitted``), atomically.

        This is the point of no return before submission. Refused: ``not_reserved``,
        ``no_permit``, ``stale_permit`` (recorded by an earlier incarnation), ``fenced``,
        ``already_consumed`` (a second consume, also across restarts).
        """
        self._check_namespace(invocation)
        with self._write(True):
            record, execution = rules.consume(
                self._load(invocation),
                invocation,
                execution_id=execution_id,
                incarnation_id=self.incarnation_id,
                now_ms=now_ms,
            )
            if self._load_execution(execution_id) is not None:
                raise ValueError(f"execution id {execution_id!r} is already used")
            self._save(record)
            self._save_execution(execution)
            return execution

    def fence(self, invocation: Invocation, *, reason: str, now_ms: int) -> InvocationRecord:
        """Record a cancellation fence; ``record.fence["before_consume"]`` says if it won.

        Idempotent: a second fence returns the first one unchanged. A fence before any
        reservation creates a record, so a later reserve finds it fenced and consume refuses.
        """
        self._check_namespace(invocation)
        with self._write(True):
            change = rules.fence(
                self._load(invocation),
                invocation,
                reason=reason,
                incarnation_id=self.incarnation_id,
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
        """Record the receipt for a consumed invocation (idempotent for the same receipt).

        Refused: ``not_reserved``, ``not_consumed``, ``receipt_mismatch``. ``durable=False``:
        see the module doc.
        """
        self._check_namespace(invocation)
        canonical_receipt = rules.canonical(receipt)
        with self._write(durable):
            change = rules.record_receipt(
                self._load(invocation), invocation, canonical_receipt, now_ms=now_ms
            )
            if change.changed:
                self._save(change.record)
            return change.record

    # ----------------------------------------------------------------- retention
    def retained_through(self) -> int:
        """The recorded retention floor W (0 when nothing was ever pruned)."""
        with self._lock:
            return self._retained_through()

    def _retained_through(self) -> int:
        rows = self._db.execute(
            "SELECT value, checksum FROM meta WHERE key = ?", (META_RETAINED_THROUGH,)
        ).fetchall()
        if not rows:
            return 0
        value, stored = rows[0]
        if not isinstance(value, str) or stored != schema.meta_checksum(
            META_RETAINED_THROUGH, value
        ):
            raise StoreCorrupt(
                f"{self.path}: metadata {META_RETAINED_THROUGH!r} fails its checksum"
            )
        return int(value)

    def prune_through(self, retained_through: int, *, rows_max: int) -> Pruned:
        """Record W = max(recorded, ``retained_through``) and delete up to ``rows_max``
        invocation records (with their execution records) of occurrences at or below it, in ONE
        transaction. An invocation whose execution is unfinished is kept until it finishes (its
        engine report must find its record). No fsync of its own, like ``reclaim`` of the runner
        store: a crash that loses the transaction loses W and the deletions together (the WAL
        keeps commit order), and the records it would have deleted are simply still there."""
        if type(retained_through) is not int or not 0 <= retained_through <= ID_MAX:
            raise ValueError(f"retained_through must be an integer in [0, {ID_MAX}]")
        if type(rows_max) is not int or rows_max < 1:
            raise ValueError(f"rows_max must be a positive integer, got {rows_max!r}")
        limit = rows_max * PRUNE_LOOKAHEAD_FACTOR
        with self._write(durable=False) as db:
            floor = max(self._retained_through(), retained_through)
            schema.write_meta(db, META_RETAINED_THROUGH, str(floor))
            candidates = db.execute(
                "SELECT schedule_id, occurrence_id, attempt FROM invocation "
                "WHERE namespace = ? AND occurrence_id <= ? LIMIT ?",
                (self.namespace, floor, limit),
            ).fetchall()
            deleted = 0
            for schedule_id, occurrence_id, attempt in candidates:
                if deleted == rows_max:
                    break
                invocation = Invocation(self.namespace, schedule_id, occurrence_id, attempt)
                record = self._load(invocation)
                eid = (
                    None
                    if record is None or record.consumed is None
                    else record.consumed.get("execution_id")
                )
                if eid is not None:
                    execution = self._load_execution(str(eid))
                    if execution is not None and not execution.finished:
                        continue  # running in this incarnation: pruned once it finishes
                    db.execute("DELETE FROM execution WHERE execution_id = ?", (str(eid),))
                db.execute(
                    "DELETE FROM invocation WHERE namespace = ? AND schedule_id = ? "
                    "AND occurrence_id = ? AND attempt = ?",
                    invocation.key(),
                )
                deleted += 1
            more = deleted > 0 and (deleted == rows_max or len(candidates) == limit)
            return Pruned(deleted, more)

    def counts(self) -> dict[str, int]:
        """Invocation and execution records held now (for the logs and the benchmark)."""
        with self._lock:
            invocations = self._db.execute("SELECT count(*) FROM invocation").fetchall()[0][0]
            executions = self._db.execute("SELECT count(*) FROM execution").fetchall()[0][0]
        return {"invocations": int(invocations), "executions": int(executions)}

    # ----------------------------------------------------------------- execution records
    def _load_execution(self, execution_id: str) -> ExecutionRecord | None:
        rows = self._db.execute(
            "SELECT execution_id, namespace, schedule_id, occurrence_id, attempt, incarnation_id, "
            "status, record, output, checksum FROM execution WHERE execution_id = ?",
            (execution_id,),
        ).fetchall()
        return _execution_from_row(self.path, rows[0]) if rows else None

    def _save_execution(self, execution: ExecutionRecord) -> None:
        self._keys.append(execution.execution_id)
        body = canonical_json(
            {
                "created_at_ms": execution.created_at_ms,
                "updated_at_ms": execution.updated_at_ms,
                "finished_at_ms": execution.finished_at_ms,
                "result": execution.result,
                "error": execution.error,
            }
        )
        columns = (
            execution.execution_id,
            *execution.invocation.key(),
            execution.incarnation_id,
            execution.status,
            body,
            execution.output,
        )
        self._db.execute(
            "INSERT INTO execution (execution_id, namespace, schedule_id, occurrence_id, attempt, "
            "incarnation_id, status, record, output, checksum) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (execution_id) DO UPDATE SET status = excluded.status, "
            "record = excluded.record, output = excluded.output, checksum = excluded.checksum",
            (*columns, checksum(schema.TAG_EXECUTION, *columns)),
        )

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        with self._read(execution_id):
            return self._load_execution(execution_id)

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
        """Record engine progress. A finished execution never changes again
        (``execution_finished``); ``output`` (whole captured output so far) is at most
        ``EXECUTION_OUTPUT_BYTES_MAX`` bytes, else ``ValueError``. ``durable=False`` only for
        ``running`` (see the module doc); a terminal status is always written durably. Strings in
        ``result`` and ``error`` get the engine's encoding rule (lone surrogates become U+FFFD);
        a result nested deeper than ``STORED_JSON_DEPTH_MAX`` raises ``TooDeep`` (a ValueError)."""
        progress = rules.checked_progress(status, output, result, error)
        with self._write(durable):
            updated = rules.progressed(
                self._load_execution(execution_id), execution_id, progress, now_ms=now_ms
            )
            self._save_execution(updated)
            return updated

    def unfinished_from_previous_incarnations(self) -> list[ExecutionRecord]:
        """Executions not finished whose incarnation is not this one: they were running when an
        earlier incarnation died (the worker should record them as ``lost``)."""
        with self._read():
            rows = self._db.execute(
                "SELECT execution_id, namespace, schedule_id, occurrence_id, attempt, "
                "incarnation_id, status, record, output, checksum FROM execution "
                "WHERE status IN ('submitted', 'running') AND incarnation_id != ? "
                "ORDER BY execution_id",
                (self.incarnation_id,),
            ).fetchall()
            return [_execution_from_row(self.path, row) for row in rows]


def _execution_from_row(path: Path, row: tuple) -> ExecutionRecord:
    if not matches(row[9], schema.TAG_EXECUTION, *row[:9]):
        raise StoreCorrupt(f"{path}: execution record {row[0]!r} fails its checksum")
    body = json.loads(row[7])
    return ExecutionRecord(
        execution_id=row[0],
        invocation=Invocation(row[1], row[2], row[3], row[4]),
        incarnation_id=row[5],
        status=row[6],
        created_at_ms=body["created_at_ms"],
        updated_at_ms=body["updated_at_ms"],
        finished_at_ms=body["finished_at_ms"],
        output=row[8],
        result=body["result"],
        error=body["error"],
    )
