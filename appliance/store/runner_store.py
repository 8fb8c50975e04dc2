"""The runner (voter) store: sealed contract, Raft hard state and log, incremental checkpoint.

Theory of operation. Raft requires that the hard state and the log entries a node answers for
are durable before it answers (Raft thesis §3.8; etcd-io/raft's Ready: persist, then send).
``persist`` therefore writes hard state, suffix truncation and appends in ONE transaction that is
fsynced (WAL, synchronous=FULL) before it returns. The checkpoint is kept as named parts, each a
canonical-JSON blob with its own checksum, so that persisting one applied transition writes only
the parts it touched: the cost of ``save_transition`` follows the size of the change, not the
size of the state (the 4 MiB cap itself is enforced by the state aggregate at apply time).

Every read from disk verifies the checksum of what it returns; a failure raises ``StoreCorrupt``
and the process should stop instead of acting on damaged data. One connection, one lock: every
public method holds ``self._lock``.

The log's recent tail (terms and payloads of the last ``log_tail_entries_max`` entries, at most
``log_tail_bytes_max`` bytes of payload) is also kept in memory, because a leader reads it back
for every append it sends (the previous entry's term, the entries themselves): reading those rows
from SQLite and re-checking their checksums cost a sixth of a busy leader's Raft thread
(docs/bench-raft.md). The tail is loaded (and verified) at open and changed only by ``persist``,
after its transaction committed and in the same locked call, so it always equals the last entries
on disk; it always ends at ``last_index`` and may be empty. Reads below it go to SQLite as before.

A store made by ``create_recovering`` (``appliance admin store recover``, for a voter whose store
was lost) carries the metadata row ``recovering_since`` (the UTC time of the recovery). While it
is there, ``recovering()`` is True and the Raft node neither votes nor campaigns; the driver calls
``clear_recovering`` (one durable commit that deletes the row) once the node has caught up
(docs/voter-recovery.md).

Compaction (docs/store.md, "Compaction"). The metadata row ``snapshot`` (canonical JSON: index,
term, voters) records the last compaction point: every entry at or below it is covered by the
checkpoint (whose applied index is never below it) and is never read again — ``first_index`` is
``index + 1``, ``term_at(index)`` is that term. ``compact`` writes that row (and raises the
minimum reader version to ``READER_VERSION_COMPACTED``) in one small durable commit; the rows
themselves go later, ``reclaim(rows_max)`` rows per transaction, each followed by an
incremental vacuum on stores created with ``auto_vacuum=INCREMENTAL``, so the file shrinks.
``install_snapshot`` replaces the checkpoint with a leader's snapshot and drops the log above it
in one transaction (rows below are reclaimed the same way). ``snapshot()`` is the checkpoint
encoded by ``snapshot_format``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import apsw

from appliance.core.canonical import canonical_json
from appliance.store import schema
from appliance.store.checksum import checksum, matches
from appliance.store.errors import StoreCorrupt, StoreRefused
from appliance.store.opened import OpenedStore
from appliance.store.opening import open_guarded
from appliance.store.snapshot_format import (
    META_SNAPSHOT,
    SnapshotFormatError,
    decode_parts,
    encode_parts,
    parse_snapshot_meta,
)
from appliance.store.sqlite import DataDirLock, fsync_dir, transaction
from appliance.store.versions import (
    BINARY_READER_VERSION,
    KIND_RUNNER,
    READER_VERSION_BASELINE,
    READER_VERSION_COMPACTED,
    RUNNER_FILE_NAME,
    WORKER_FILE_NAME,
)

PART_NAME_BYTES_MAX = 256
LOG_TAIL_ENTRIES_MAX = 4096  # recent log entries kept in memory (term and payload)
LOG_TAIL_BYTES_MAX = 4 * 1024 * 1024  # ... and at most this many payload bytes of them
META_RECOVERING_SINCE = "recovering_since"  # present only while a recovered voter catches up
# New runner stores give deleted pages back to the file system (docs/store.md, "Compaction").
RUNNER_CREATE_PRAGMAS = ("PRAGMA auto_vacuum=INCREMENTAL",)
VACUUM_STEP_PAGES = 256  # pages given back per reclaim step (1 MiB)
VACUUM_FREE_PAGES_MIN = 256  # ... once at least this many, and over half the file, are free


def _seed(conn: apsw.Connection) -> None:
    conn.execute(
        "INSERT INTO hard_state (id, term, voted_for, checksum) VALUES (1, 0, NULL, ?)",
        (checksum(schema.TAG_HARD_STATE, 0, None),),
    )
    conn.execute(
        "INSERT INTO checkpoint (id, applied_index, checksum) VALUES (1, 0, ?)",
        (checksum(schema.TAG_CHECKPOINT, 0),),
    )


class RunnerStore(OpenedStore):
    """One voter's durable state in ``data_dir/runner.sqlite3`` (see module docstring)."""

    store_name = "runner store"

    def __init__(
        self,
        conn: apsw.Connection,
        lock: DataDirLock,
        path: Path,
        created: bool,
        *,
        log_tail_entries_max: int = LOG_TAIL_ENTRIES_MAX,
        log_tail_bytes_max: int = LOG_TAIL_BYTES_MAX,
    ):
        if log_tail_entries_max < 0 or log_tail_bytes_max < 0:
            raise ValueError("log tail bounds must be >= 0")
        super().__init__(conn, lock, path, created)
        self._tail_entries_max = log_tail_entries_max
        self._tail_bytes_max = log_tail_bytes_max
        self._term, self._voted_for = self._read_hard_state()
        self._snap_index, self._snap_term, self._snap_voters = self._read_snapshot_meta()
        self._first, self._last = self._read_log_range()
        self._log_bytes = self._read_log_bytes()
        # The in-memory tail: entries last-len+1 .. last (see module docstring).
        self._tail_terms: list[int] = []
        self._tail_payloads: list[bytes] = []
        self._tail_bytes = 0
        self._load_tail()
        self._recovering_since = self._read_recovering_since()

    @classmethod
    def create_or_open(
        cls,
        data_dir: str | Path,
        *,
        contract: dict,
        contract_digest: str,
        log_tail_entries_max: int = LOG_TAIL_ENTRIES_MAX,
        log_tail_bytes_max: int = LOG_TAIL_BYTES_MAX,
    ) -> RunnerStore:
        """Create and seal on first start; otherwise open only what migrations_guard accepts.

        Raises ``StoreRefused`` (files unchanged) for a locked, damaged or incompatible store, and
        ``ValueError`` when ``contract_digest`` is not the digest of ``contract``. The log tail
        bounds size the in-memory tail (0 keeps none: every read goes to disk).
        """
        conn, lock, created = open_guarded(
            data_dir,
            kind=KIND_RUNNER,
            contract=contract,
            contract_digest=contract_digest,
            ddl=schema.RUNNER_DDL,
            seed=_seed,
            create_pragmas=RUNNER_CREATE_PRAGMAS,
        )
        try:
            return cls(
                conn,
                lock,
                Path(data_dir) / RUNNER_FILE_NAME,
                created,
                log_tail_entries_max=log_tail_entries_max,
                log_tail_bytes_max=log_tail_bytes_max,
            )
        except BaseException:
            conn.close()
            lock.release()
            raise

    @classmethod
    def create_recovering(
        cls, data_dir: str | Path, *, contract: dict, contract_digest: str, created_at: str
    ) -> RunnerStore:
        """Create a fresh store, sealed with ``contract``, marked recovering since
        ``created_at`` (in the same transaction that creates it).

        Refuses (``StoreRefused``, nothing changed) when ``data_dir`` already holds a store or
        what is left of one: the damaged store must be moved aside first, never overwritten.
        """
        data_dir = Path(data_dir)
        leftovers = sorted(p.name for p in _store_files(data_dir))
        if leftovers:
            raise StoreRefused(
                f"{data_dir} already holds {', '.join(leftovers)}: move the damaged store aside "
                f"first (for example: mv {data_dir} {data_dir}.lost), then run recover again"
            )
        if not created_at:
            raise ValueError("created_at must name the time of the recovery")

        def seed_recovering(conn: apsw.Connection) -> None:
            _seed(conn)
            schema.write_meta(conn, META_RECOVERING_SINCE, created_at)

        conn, lock, created = open_guarded(
            data_dir,
            kind=KIND_RUNNER,
            contract=contract,
            contract_digest=contract_digest,
            ddl=schema.RUNNER_DDL,
            seed=seed_recovering,
            create_pragmas=RUNNER_CREATE_PRAGMAS,
        )
        try:
            if not created:  # another process created it between our look and our lock
                raise StoreRefused(f"{data_dir} got a store while recovering; nothing changed")
            return cls(conn, lock, Path(data_dir) / RUNNER_FILE_NAME, created)
        except BaseException:
            conn.close()
            lock.release()
            raise

    @classmethod
    def place_restored(
        cls, data_dir: str | Path, backup: Path, *, recovering_since: str | None
    ) -> Path:
        """Put a verified backup file in place as ``data_dir``'s store (``admin store
        restore``): copied aside, marked recovering (when ``recovering_since`` is given) in one
        commit, fsynced, then renamed into place. Refuses a data_dir holding any store files."""
        data_dir = Path(data_dir)
        leftovers = sorted(p.name for p in _store_files(data_dir))
        if leftovers:
            raise StoreRefused(
                f"{data_dir} already holds {', '.join(leftovers)}: move it aside first "
                f"(for example: mv {data_dir} {data_dir}.lost)"
            )
        data_dir.mkdir(parents=True, exist_ok=True)
        lock = DataDirLock.acquire(data_dir, create=True)
        if lock is None:
            raise StoreRefused(f"could not create the lock file in {data_dir}")
        try:
            target = data_dir / RUNNER_FILE_NAME
            staging = data_dir / (RUNNER_FILE_NAME + ".restoring")
            staging.unlink(missing_ok=True)
            shutil.copyfile(backup, staging)
            conn = apsw.Connection(str(staging))
            try:
                if recovering_since is not None:
                    with transaction(conn) as db:
                        schema.write_meta(db, META_RECOVERING_SINCE, recovering_since)
                conn.execute("PRAGMA journal_mode=DELETE")
            finally:
                conn.close()
            with open(staging, "rb+") as handle:
                os.fsync(handle.fileno())
            staging.rename(target)
            fsync_dir(data_dir)
            return target
        finally:
            lock.release()

    # ----------------------------------------------------------------- Raft hard state and log
    def _read_hard_state(self) -> tuple[int, str | None]:
        rows = self._db.execute(
            "SELECT term, voted_for, checksum FROM hard_state WHERE id = 1"
        ).fetchall()
        if len(rows) != 1 or not matches(rows[0][2], schema.TAG_HARD_STATE, rows[0][0], rows[0][1]):
            raise StoreCorrupt(f"{self.path}: the Raft hard state fails its checksum")
        return rows[0][0], rows[0][1]

    def _read_log_range(self) -> tuple[int, int]:
        """(first, last) as the log reads: rows at or below the snapshot do not count."""
        snap = self._snap_index
        first, last = self._db.execute(
            "SELECT min(idx), max(idx) FROM log WHERE idx > ?", (snap,)
        ).fetchall()[0]
        if snap:
            return snap + 1, max(last or 0, snap)
        return (first or 0), (last or 0)

    def _read_log_bytes(self) -> int:
        rows = self._db.execute(
            "SELECT coalesce(sum(length(payload)), 0) FROM log WHERE idx > ?", (self._snap_index,)
        ).fetchall()
        return int(rows[0][0])

    def _read_snapshot_meta(self) -> tuple[int, int, tuple[str, ...]]:
        meta, problems = schema.read_meta(self._db)
        if problems:
            raise StoreCorrupt(f"{self.path}: metadata fails its checksum: {'; '.join(problems)}")
        try:
            parsed = parse_snapshot_meta(meta.get(META_SNAPSHOT))
        except ValueError as exc:
            raise StoreCorrupt(f"{self.path}: {exc}") from None
        return parsed if parsed is not None else (0, 0, ())

    def hard_state(self) -> tuple[int, str | None]:
        """(current_term, voted_for) as last persisted."""
        with self._lock:
            return self._term, self._voted_for

    def first_index(self) -> int:
        """Index of the first stored log entry; 0 when the log is empty."""
        with self._lock:
            return self._first

    def last_index(self) -> int:
        """Index of the last stored log entry; 0 when the log is empty."""
        with self._lock:
            return self._last

    def term_at(self, index: int) -> int | None:
        """Term of the entry at ``index``; ``None`` when there is no such entry."""
        with self._lock:
            return self._term_at_unlocked(index)

    def _term_at_unlocked(self, index: int) -> int | None:
        if 0 < index <= self._snap_index:  # compacted: only the snapshot's own term is known
            return self._snap_term if index == self._snap_index else None
        if index < 1:
            return None
        tail_first = self._last - len(self._tail_terms) + 1
        if tail_first <= index <= self._last:
            return self._tail_terms[index - tail_first]
        if index > self._last:
            return None
        return self._term_at_on_disk(index)

    def _term_at_on_disk(self, index: int) -> int | None:
        rows = self._db.execute(
            "SELECT term, payload, checksum FROM log WHERE idx = ?", (index,)
        ).fetchall()
        if not rows:
            return None
        term, payload, stored = rows[0]
        self._verify_entry(index, term, payload, stored)
        return term

    def _verify_entry(self, index: int, term: int, payload: object, stored: object) -> None:
        if not isinstance(payload, bytes) or not matches(
            stored, schema.TAG_LOG, index, term, payload
        ):
            raise StoreCorrupt(f"{self.path}: log entry {index} fails its checksum")

    def entries(
        self, lo: int, hi: int, max_bytes: int | None = None
    ) -> list[tuple[int, int, bytes]]:
        """(index, term, payload) for ``lo <= index < hi`` in order.

        Stops before the entry that would take the total payload size over ``max_bytes``, but
        always returns at least one entry when the range holds any (a batch must make progress).
        """
        result: list[tuple[int, int, bytes]] = []
        total_bytes = 0
        with self._lock:
            lo = max(lo, self._snap_index + 1)  # compacted rows may linger until reclaimed
            tail_first = self._last - len(self._tail_terms) + 1
            if lo >= tail_first:
                terms, payloads = self._tail_terms, self._tail_payloads
                for index in range(lo, min(hi, self._last + 1)):
                    payload = payloads[index - tail_first]
                    if max_bytes is not None and result and total_bytes + len(payload) > max_bytes:
                        break
                    result.append((index, terms[index - tail_first], payload))
                    total_bytes += len(payload)
                return result
            cursor = self._db.execute(
                "SELECT idx, term, payload, checksum FROM log WHERE idx >= ? AND idx < ? "
                "ORDER BY idx",
                (lo, hi),
            )
            for index, term, payload, stored in cursor:
                self._verify_entry(index, term, payload, stored)
                if max_bytes is not None and result and total_bytes + len(payload) > max_bytes:
                    break
                result.append((index, term, payload))
                total_bytes += len(payload)
        return result

    def persist(
        self,
        *,
        term: int,
        voted_for: str | None,
        truncate_from: int | None = None,
        entries: Sequence[tuple[int, int, bytes]] = (),
    ) -> None:
        """Hard state, suffix truncation (index >= truncate_from) and appends: ONE durable commit.

        Appended entries must be contiguous and continue the log left after truncation; their
        terms never decrease along the log and never exceed ``term``; the persisted term never
        decreases. A violation raises ``ValueError`` before anything is written.
        """
        with self._lock:
            if term < self._term:
                raise ValueError(f"term {term} is below the persisted term {self._term}")
            last = self._last
            if truncate_from is not None:
                if truncate_from <= self._snap_index:
                    raise ValueError(
                        f"truncate_from {truncate_from} is at or below the compacted index "
                        f"{self._snap_index}"
                    )
                last = min(last, truncate_from - 1)
            expected = last + 1
            previous_term = self._term_at_unlocked(last) if (entries and last) else 0
            rows = []
            for index, entry_term, payload in entries:
                if index != expected:
                    raise ValueError(f"entry index {index} does not continue the log at {expected}")
                if not previous_term <= entry_term <= term:
                    raise ValueError(
                        f"entry {index} has term {entry_term}: log terms never decrease "
                        f"(previous {previous_term}) and never exceed the current term {term}"
                    )
                previous_term = entry_term
                if not isinstance(payload, bytes):
                    raise TypeError(f"entry {index}: payload must be bytes")
                rows.append(
                    (
                        index,
                        entry_term,
                        payload,
                        checksum(schema.TAG_LOG, index, entry_term, payload),
                    )
                )
                expected += 1
            hard_changed = (term, voted_for) != (self._term, self._voted_for)
            with transaction(self._db) as db:
                if hard_changed:
                    db.execute(
                        "UPDATE hard_state SET term = ?, voted_for = ?, checksum = ? WHERE id = 1",
                        (term, voted_for, checksum(schema.TAG_HARD_STATE, term, voted_for)),
                    )
                if truncate_from is not None and truncate_from <= self._last:
                    db.execute("DELETE FROM log WHERE idx >= ?", (truncate_from,))
                if rows:
                    db.executemany(
                        "INSERT INTO log (idx, term, payload, checksum) VALUES (?, ?, ?, ?)", rows
                    )
            self._term, self._voted_for = term, voted_for
            # Committed: now (and only now) the in-memory tail follows what is on disk.
            if truncate_from is not None and truncate_from <= self._last:
                self._drop_tail_from(truncate_from)
            for _index, entry_term, payload, _stored in rows:
                self._tail_terms.append(entry_term)
                self._tail_payloads.append(payload)
                self._tail_bytes += len(payload)
                self._log_bytes += len(payload)
            if truncate_from is not None or self._first == 0:
                self._first, self._last = self._read_log_range()
                if truncate_from is not None:
                    self._log_bytes = self._read_log_bytes()
            else:
                self._last = expected - 1
            self._trim_tail()
            if self._last != expected - 1:
                raise StoreCorrupt(
                    f"{self.path}: the log ends at {self._last} after persisting up to "
                    f"{expected - 1}"
                )

    # ----------------------------------------------------------------- in-memory log tail
    def _load_tail(self) -> None:
        """Read (and verify) the newest entries, within both bounds, into the tail."""
        if self._tail_entries_max == 0 or self._last <= self._snap_index:
            return
        newest_first: list[tuple[int, bytes]] = []
        total_bytes = 0
        expected = self._last
        for index, term, payload, stored in self._db.execute(
            "SELECT idx, term, payload, checksum FROM log WHERE idx > ? ORDER BY idx DESC",
            (max(self._last - self._tail_entries_max, self._snap_index),),
        ):
            self._verify_entry(index, term, payload, stored)
            if index != expected:
                raise StoreCorrupt(f"{self.path}: log entry {expected} is missing")
            if total_bytes + len(payload) > self._tail_bytes_max:
                break
            newest_first.append((term, payload))
            total_bytes += len(payload)
            expected -= 1
        newest_first.reverse()
        self._tail_terms = [term for term, _ in newest_first]
        self._tail_payloads = [payload for _, payload in newest_first]
        self._tail_bytes = total_bytes

    def _drop_tail_from(self, truncate_from: int) -> None:
        """Forget cached entries ``>= truncate_from`` (called with ``self._last`` still old)."""
        drop = self._last - truncate_from + 1
        if drop >= len(self._tail_terms):
            self._tail_terms, self._tail_payloads, self._tail_bytes = [], [], 0
            return
        self._tail_bytes -= sum(len(p) for p in self._tail_payloads[-drop:])
        del self._tail_terms[-drop:]
        del self._tail_payloads[-drop:]

    def _trim_tail(self) -> None:
        """Drop the oldest cached entries until both bounds hold."""
        payloads = self._tail_payloads
        drop = max(0, len(payloads) - self._tail_entries_max)
        dropped_bytes = sum(len(p) for p in payloads[:drop])
        while drop < len(payloads) and self._tail_bytes - dropped_bytes > self._tail_bytes_max:
            dropped_bytes += len(payloads[drop])
            drop += 1
        if drop:
            self._tail_bytes -= dropped_bytes
            del self._tail_terms[:drop]
            del payloads[:drop]

    # ----------------------------------------------------------------- checkpoint
    def load_checkpoint(self) -> tuple[int, dict[str, bytes]]:
        """(applied_index, {part name: canonical-JSON bytes}); every part verified."""
        with self._lock:
            applied = self._applied_index()
            parts: dict[str, bytes] = {}
            for name, data, stored in self._db.execute(
                "SELECT name, data, checksum FROM checkpoint_part"
            ):
                if not isinstance(data, bytes) or not matches(stored, schema.TAG_PART, name, data):
                    raise StoreCorrupt(f"{self.path}: checkpoint part {name!r} fails its checksum")
                parts[name] = data
        return applied, parts

    def _applied_index(self) -> int:
        rows = self._db.execute(
            "SELECT applied_index, checksum FROM checkpoint WHERE id = 1"
        ).fetchall()
        if len(rows) != 1 or not matches(rows[0][1], schema.TAG_CHECKPOINT, rows[0][0]):
            raise StoreCorrupt(f"{self.path}: the checkpoint applied index fails its checksum")
        return rows[0][0]

    def applied_index(self) -> int:
        with self._lock:
            return self._applied_index()

    def save_transition(
        self,
        applied_index: int,
        upserts: Mapping[str, bytes],
        deletes: Iterable[str] = (),
        *,
        min_reader_version: int | None = None,
    ) -> None:
        """Persist one applied transition in ONE durable commit: only the parts it touched.

        ``applied_index`` never decreases. A name in both ``upserts`` and ``deletes`` is refused.
        ``min_reader_version``, when given, is recorded in the same commit (see
        ``set_min_reader_version``).
        """
        deletes = list(deletes)
        for name in (*upserts, *deletes):
            _check_part_name(name)
        both = set(upserts) & set(deletes)
        if both:
            raise ValueError(f"parts both upserted and deleted: {sorted(both)}")
        rows = []
        for name, data in upserts.items():
            if not isinstance(data, bytes):
                raise TypeError(f"checkpoint part {name!r} must be bytes")
            rows.append((name, data, checksum(schema.TAG_PART, name, data)))
        if min_reader_version is not None:
            _check_reader_version(min_reader_version)
        with self._lock:
            current = self._applied_index()
            if applied_index < current:
                raise ValueError(f"applied index {applied_index} is below the stored {current}")
            with transaction(self._db) as db:
                db.execute(
                    "UPDATE checkpoint SET applied_index = ?, checksum = ? WHERE id = 1",
                    (applied_index, checksum(schema.TAG_CHECKPOINT, applied_index)),
                )
                if rows:
                    db.executemany(
                        "INSERT INTO checkpoint_part (name, data, checksum) VALUES (?, ?, ?) "
                        "ON CONFLICT (name) DO UPDATE SET data = excluded.data, "
                        "checksum = excluded.checksum",
                        rows,
                    )
                if deletes:
                    db.executemany(
                        "DELETE FROM checkpoint_part WHERE name = ?", [(n,) for n in deletes]
                    )
                if min_reader_version is not None:
                    version = max(min_reader_version, self._reader_floor())
                    schema.write_meta(db, schema.META_MIN_READER_VERSION, str(version))

    def checkpoint_summary(self) -> tuple[int, int]:
        """(part count, total bytes of all parts), without reading the blobs."""
        with self._lock:
            count, total = self._db.execute(
                "SELECT count(*), coalesce(sum(length(data)), 0) FROM checkpoint_part"
            ).fetchall()[0]
        return int(count), int(total)

    # ----------------------------------------------------------------- recovering flag
    def _read_recovering_since(self) -> str | None:
        meta, problems = schema.read_meta(self._db)
        if problems:
            raise StoreCorrupt(f"{self.path}: metadata fails its checksum: {'; '.join(problems)}")
        return meta.get(META_RECOVERING_SINCE)

    def recovering(self) -> bool:
        """True while this voter's store is a recovered one that has not caught up yet."""
        with self._lock:
            return self._recovering_since is not None

    def recovering_since(self) -> str | None:
        """When ``admin store recover`` made this store, while it is still recovering."""
        with self._lock:
            return self._recovering_since

    def clear_recovering(self) -> None:
        """The node caught up: drop the flag in one durable commit (idempotent)."""
        with self._lock, transaction(self._db) as db:
            db.execute("DELETE FROM meta WHERE key = ?", (META_RECOVERING_SINCE,))
            self._recovering_since = None

    # ----------------------------------------------------------------- reader version
    def min_reader_version(self) -> int:
        with self._lock:
            meta, problems = schema.read_meta(self._db)
        if problems or schema.META_MIN_READER_VERSION not in meta:
            raise StoreCorrupt(f"{self.path}: metadata fails its checksum: {'; '.join(problems)}")
        return int(meta[schema.META_MIN_READER_VERSION])

    def set_min_reader_version(self, version: int) -> None:
        """Record the lowest reader version that may open this store (durable, one commit).

        Raise it to ``READER_VERSION_CANCELLING`` while the checkpoint holds an unresolved
        Cancelling, and lower it back to ``READER_VERSION_BASELINE`` once none remain. A version
        above what this binary reads is refused: a store must stay readable by its writer.
        """
        _check_reader_version(version)
        with self._lock, transaction(self._db) as db:
            version = max(version, self._reader_floor())
            schema.write_meta(db, schema.META_MIN_READER_VERSION, str(version))

    def _reader_floor(self) -> int:
        """A compacted store never goes below READER_VERSION_COMPACTED (versions.py)."""
        return READER_VERSION_COMPACTED if self._snap_index else READER_VERSION_BASELINE

    # ----------------------------------------------------------------- snapshots and compaction
    def snapshot_meta(self) -> tuple[int, int]:
        """(index, term) of the last compaction point; (0, 0) before any."""
        with self._lock:
            return self._snap_index, self._snap_term

    def snapshot_voters(self) -> tuple[str, ...]:
        with self._lock:
            return self._snap_voters

    def snapshot_index_available(self) -> int:
        """The durable checkpoint's applied index: the highest index a snapshot can stand for."""
        return self.applied_index()

    def log_bytes(self) -> int:
        """Payload bytes of the entries the log holds (above the compaction point)."""
        with self._lock:
            return self._log_bytes

    def log_entries(self) -> int:
        with self._lock:
            return self._last - self._snap_index if self._last else 0

    def snapshot(self) -> tuple[int, int, bytes]:
        """The durable checkpoint as a snapshot: (applied index, term there, encoded parts)."""
        with self._lock:
            applied = self._applied_index()
            term = self._term_at_unlocked(applied) if applied else 0
            if term is None:
                raise StoreCorrupt(
                    f"{self.path}: no log entry or snapshot at the checkpoint index {applied}"
                )
        _applied, parts = self.load_checkpoint()
        if _applied != applied:  # the writer moved on between the two reads: take it again
            return self.snapshot()
        return applied, term, encode_parts(parts)

    def compact(self, index: int, term: int, voters: Sequence[str]) -> None:
        """Record that entries up to ``index`` are gone (one durable commit); their rows are
        deleted later by ``reclaim``. ``index`` must be covered by the durable checkpoint."""
        voters = tuple(voters)
        with self._lock:
            if index <= self._snap_index:
                return
            applied = self._applied_index()
            if index > applied:
                raise ValueError(f"compacting to {index} beyond the checkpoint at {applied}")
            if index > self._last:
                raise ValueError(f"compacting to {index} beyond the log's end {self._last}")
            if self._term_at_unlocked(index) != term:
                raise ValueError(f"compaction term {term} is not the term of entry {index}")
            dropped_bytes = int(
                self._db.execute(
                    "SELECT coalesce(sum(length(payload)), 0) FROM log WHERE idx > ? AND idx <= ?",
                    (self._snap_index, index),
                ).fetchall()[0][0]
            )
            with transaction(self._db) as db:
                self._write_snapshot_meta(db, index, term, voters)
            self._snap_index, self._snap_term, self._snap_voters = index, term, voters
            self._first = index + 1
            self._log_bytes -= dropped_bytes
            self._drop_tail_through(index)

    def _write_snapshot_meta(
        self, db: apsw.Connection, index: int, term: int, voters: tuple[str, ...]
    ) -> None:
        value = canonical_json({"index": index, "term": term, "voters": list(voters)}).decode()
        schema.write_meta(db, META_SNAPSHOT, value)
        meta, _problems = schema.read_meta(db)
        current = int(meta.get(schema.META_MIN_READER_VERSION, READER_VERSION_BASELINE))
        version = max(current, READER_VERSION_COMPACTED)
        schema.write_meta(db, schema.META_MIN_READER_VERSION, str(version))

    def _drop_tail_through(self, index: int) -> None:
        """Forget cached entries at or below ``index`` (compacted)."""
        tail_first = self._last - len(self._tail_terms) + 1
        drop = max(0, min(len(self._tail_terms), index - tail_first + 1))
        if drop:
            self._tail_bytes -= sum(len(p) for p in self._tail_payloads[:drop])
            del self._tail_terms[:drop]
            del self._tail_payloads[:drop]

    def reclaim(self, rows_max: int) -> bool:
        """Delete up to ``rows_max`` rows at or below the compaction point (one transaction,
        then an incremental vacuum); True while more are left."""
        with self._lock:
            rows = self._db.execute("SELECT min(idx) FROM log").fetchall()
            low = rows[0][0]
            if low is None or low > self._snap_index:
                return False
            high = min(self._snap_index, low + rows_max - 1)
            # No fsync of its own: losing this deletion in a crash is harmless (the rows are
            # below the compaction point and the next start deletes them again), and the next
            # durable commit's fsync covers these WAL frames anyway. So a reclaim chunk never
            # adds an fsync in front of a commit waiting for the lock.
            self._db.execute("PRAGMA synchronous=NORMAL")
            try:
                with transaction(self._db) as db:
                    db.execute("DELETE FROM log WHERE idx >= ? AND idx <= ?", (low, high))
                    vacuum = self._vacuum_due()
                    if vacuum:
                        db.execute(f"PRAGMA incremental_vacuum({VACUUM_STEP_PAGES})").fetchall()
            finally:
                self._db.execute("PRAGMA synchronous=FULL")
            return high < self._snap_index or vacuum

    def _vacuum_due(self) -> bool:
        """Give pages back to the file system only when most of the file is free (a large
        one-off compaction): in the steady state the pages one compaction frees are reused by
        the appends until the next, so the file stays at its size without moving pages (each
        moved page is one more WAL frame written in front of the commits)."""
        if self._db.execute("PRAGMA auto_vacuum").fetchall()[0][0] != 2:
            return False  # a store created before issue 19: freed pages are reused, not returned
        free = int(self._db.execute("PRAGMA freelist_count").fetchall()[0][0])
        pages = int(self._db.execute("PRAGMA page_count").fetchall()[0][0])
        return free >= VACUUM_FREE_PAGES_MIN and 2 * free > pages

    def install_snapshot(self, snapshot: Any) -> None:
        """Replace the checkpoint with a leader's snapshot and drop the whole log above it, in
        ONE durable commit (rows below are reclaimed later). ``snapshot`` has ``index``,
        ``term``, ``voters`` and ``data`` (``snapshot_format`` bytes)."""
        try:
            parts = decode_parts(snapshot.data)
        except SnapshotFormatError as exc:
            raise ValueError(f"snapshot {snapshot.index} is malformed: {exc}") from None
        for name in parts:
            _check_part_name(name)
        rows = [(name, data, checksum(schema.TAG_PART, name, data)) for name, data in parts.items()]
        index, term, voters = snapshot.index, snapshot.term, tuple(snapshot.voters)
        with self._lock:
            applied = self._applied_index()
            if index < applied or index <= self._snap_index:
                raise ValueError(
                    f"snapshot {index} is not newer than the checkpoint ({applied}) and the "
                    f"compaction point ({self._snap_index})"
                )
            with transaction(self._db) as db:
                db.execute("DELETE FROM log WHERE idx > ?", (index,))
                db.execute("DELETE FROM checkpoint_part")
                db.executemany(
                    "INSERT INTO checkpoint_part (name, data, checksum) VALUES (?, ?, ?)", rows
                )
                db.execute(
                    "UPDATE checkpoint SET applied_index = ?, checksum = ? WHERE id = 1",
                    (index, checksum(schema.TAG_CHECKPOINT, index)),
                )
                self._write_snapshot_meta(db, index, term, voters)
            self._snap_index, self._snap_term, self._snap_voters = index, term, voters
            self._first, self._last = index + 1, index
            self._tail_terms, self._tail_payloads, self._tail_bytes = [], [], 0
            self._log_bytes = 0


def _store_files(data_dir: Path) -> list[Path]:
    """A store, or the remains of one, in ``data_dir`` (either kind, with its side files)."""
    if not data_dir.exists():
        return []
    names = {RUNNER_FILE_NAME, WORKER_FILE_NAME}
    return [
        p
        for p in data_dir.iterdir()
        if p.name in names or any(p.name.startswith(n + "-") for n in names)
    ]


def _check_reader_version(version: int) -> None:
    if not READER_VERSION_BASELINE <= version <= BINARY_READER_VERSION:
        raise ValueError(
            f"min reader version must be {READER_VERSION_BASELINE}..{BINARY_READER_VERSION}, "
            f"got {version}"
        )


def _check_part_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"checkpoint part name must be a non-empty string, got {name!r}")
    if len(name.encode("utf-8")) > PART_NAME_BYTES_MAX:
        raise ValueError(f"checkpoint part name is over {PART_NAME_BYTES_MAX} bytes: {name[:40]!r}")
