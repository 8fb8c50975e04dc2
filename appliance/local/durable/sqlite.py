"""SQLite state provider (apsw): one row per durable task, each row checksummed.

Read-modify-write transitions run inside ``BEGIN IMMEDIATE`` so concurrent processes serialize on
SQLite's own lock; ``synchronous=FULL`` makes a committed claim or receipt durable.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

import apsw

from ..errors import SnapshotCorrupt, StateProviderError
from .provider import TransitionProvider
from .records import DurableTaskRecord, record_from_json, record_to_json
from .snapshot import encode_json

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 5_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS local_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS local_tasks (
    task_key TEXT PRIMARY KEY,
    body BLOB NOT NULL,
    sha256 TEXT NOT NULL
);
INSERT OR IGNORE INTO local_meta (key, value) VALUES ('schema_version', 1);
INSERT OR IGNORE INTO local_meta (key, value) VALUES ('epoch', 0);
"""


class SqliteStateProvider(TransitionProvider):
    def __init__(self, path: str | os.PathLike[str]):
        super().__init__()
        self._conn = apsw.Connection(os.fspath(path))
        self._conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        with self._transaction():
            self._conn.execute(_SCHEMA)
            (version,) = self._conn.execute(
                "SELECT value FROM local_meta WHERE key = 'schema_version'"
            ).fetchone()
        if version != SCHEMA_VERSION:
            self._conn.close()
            raise StateProviderError(f"{path}: schema version {version}, expected 1; refused")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
            except apsw.Error as exc:
                raise StateProviderError(f"sqlite state provider: {exc}") from exc

    def _read(self, task_key: str) -> DurableTaskRecord | None:
        row = self._conn.execute(
            "SELECT body, sha256 FROM local_tasks WHERE task_key = ?", (task_key,)
        ).fetchone()
        return None if row is None else _decode(task_key, row[0], row[1])

    def _write(self, record: DurableTaskRecord) -> None:
        body = encode_json(record_to_json(record))
        self._conn.execute(
            "INSERT OR REPLACE INTO local_tasks (task_key, body, sha256) VALUES (?, ?, ?)",
            (record.task_key, body, hashlib.sha256(body).hexdigest()),
        )

    def _count(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM local_tasks").fetchone()[0]

    def _bump_epoch(self) -> int:
        self._conn.execute("UPDATE local_meta SET value = value + 1 WHERE key = 'epoch'")
        return self._conn.execute("SELECT value FROM local_meta WHERE key = 'epoch'").fetchone()[0]

    def records(self) -> list[DurableTaskRecord]:
        with self._transaction():
            rows = self._conn.execute(
                "SELECT task_key, body, sha256 FROM local_tasks ORDER BY task_key"
            ).fetchall()
        return [_decode(key, body, digest) for key, body, digest in rows]

    def close(self) -> None:
        self._conn.close()


def _decode(task_key: str, body: bytes, digest: str) -> DurableTaskRecord:
    if not isinstance(body, bytes):
        raise SnapshotCorrupt(f"local_tasks[{task_key}]: body is not a BLOB; row refused")
    if hashlib.sha256(body).hexdigest() != digest:
        raise SnapshotCorrupt(f"local_tasks[{task_key}]: checksum mismatch; row refused")
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise SnapshotCorrupt(f"local_tasks[{task_key}]: not JSON ({exc})") from None
    record = record_from_json(doc, f"local_tasks[{task_key}]")
    if record.task_key != task_key:
        raise SnapshotCorrupt(f"local_tasks[{task_key}]: row names task {record.task_key!r}")
    return record
