"""Table layouts of both stores, the checksum tags, and the frozen meta/contract tables.

The ``meta`` and ``contract`` tables are frozen forever (every future schema keeps them exactly),
so any binary can read the schema version and the sealed contract of any store before it decides
whether it understands the rest.

``log.idx`` is an ``INTEGER PRIMARY KEY`` (the rowid): range reads for replication batches and
suffix truncation on conflict are B-tree range operations, never scans.
"""

from __future__ import annotations

import hashlib
import json

import apsw

from appliance.core.canonical import canonical_json
from appliance.store.checksum import checksum

TAG_META = b"appliance-meta"
TAG_HARD_STATE = b"appliance-hard"
TAG_LOG = b"appliance-log"
TAG_CHECKPOINT = b"appliance-ckpt"
TAG_PART = b"appliance-part"
TAG_INCARNATION = b"appliance-incarn"
TAG_INVOCATION = b"appliance-invoc"
TAG_EXECUTION = b"appliance-exec"

META_KIND = "kind"
META_SCHEMA_VERSION = "schema_version"
META_MIN_READER_VERSION = "min_reader_version"
META_CREATED_BY_VERSION = "created_by_version"

FROZEN_DDL = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL, checksum BLOB NOT NULL)",
    "CREATE TABLE contract (id INTEGER PRIMARY KEY CHECK (id = 1), canonical BLOB NOT NULL, "
    "digest TEXT NOT NULL)",
)

RUNNER_DDL = (
    "CREATE TABLE hard_state (id INTEGER PRIMARY KEY CHECK (id = 1), term INTEGER NOT NULL, "
    "voted_for TEXT, checksum BLOB NOT NULL)",
    "CREATE TABLE log (idx INTEGER PRIMARY KEY, term INTEGER NOT NULL, payload BLOB NOT NULL, "
    "checksum BLOB NOT NULL)",
    "CREATE TABLE checkpoint (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "applied_index INTEGER NOT NULL, checksum BLOB NOT NULL)",
    "CREATE TABLE checkpoint_part (name TEXT PRIMARY KEY, data BLOB NOT NULL, "
    "checksum BLOB NOT NULL)",
)

WORKER_DDL = (
    "CREATE TABLE incarnation (seq INTEGER PRIMARY KEY, incarnation_id TEXT NOT NULL UNIQUE, "
    "opened_at_ms INTEGER NOT NULL, checksum BLOB NOT NULL)",
    "CREATE TABLE invocation (namespace TEXT NOT NULL, schedule_id INTEGER NOT NULL, "
    "occurrence_id INTEGER NOT NULL, attempt INTEGER NOT NULL, record BLOB NOT NULL, "
    "checksum BLOB NOT NULL, PRIMARY KEY (namespace, schedule_id, occurrence_id, attempt))",
    "CREATE TABLE execution (execution_id TEXT PRIMARY KEY, namespace TEXT NOT NULL, "
    "schedule_id INTEGER NOT NULL, occurrence_id INTEGER NOT NULL, attempt INTEGER NOT NULL, "
    "incarnation_id TEXT NOT NULL, status TEXT NOT NULL, record BLOB NOT NULL, "
    "output BLOB NOT NULL, checksum BLOB NOT NULL)",
    "CREATE INDEX execution_by_status ON execution (status)",
)


def meta_checksum(key: str, value: str) -> bytes:
    return checksum(TAG_META, key, value)


def write_meta(conn: apsw.Connection, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO meta (key, value, checksum) VALUES (?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value, checksum = excluded.checksum",
        (key, value, meta_checksum(key, value)),
    )


def write_contract(conn: apsw.Connection, canonical: bytes, digest: str) -> None:
    conn.execute(
        "INSERT INTO contract (id, canonical, digest) VALUES (1, ?, ?)", (canonical, digest)
    )


def read_meta(conn: apsw.Connection) -> tuple[dict[str, str], list[str]]:
    """All meta rows that verify, and a problem line for each one that does not."""
    values: dict[str, str] = {}
    problems: list[str] = []
    for key, value, stored in conn.execute("SELECT key, value, checksum FROM meta"):
        if not isinstance(key, str) or not isinstance(value, str):
            problems.append(f"metadata row {key!r} has a wrong type")
        elif stored != meta_checksum(key, value):
            problems.append(f"metadata {key!r} fails its checksum")
        else:
            values[key] = value
    return values, problems


def read_contract(conn: apsw.Connection) -> tuple[bytes | None, str | None, dict | None, list[str]]:
    """(canonical bytes, stored digest, parsed contract, problems).

    The stored SHA-256 digest is the contract's checksum: the bytes must hash to it, and must be
    the canonical form of the JSON they hold.
    """
    rows = conn.execute("SELECT canonical, digest FROM contract WHERE id = 1").fetchall()
    if not rows:
        return None, None, None, ["the sealed contract is missing"]
    canonical, digest = rows[0]
    if not isinstance(canonical, bytes) or not isinstance(digest, str):
        return None, None, None, ["the sealed contract row has a wrong type"]
    if hashlib.sha256(canonical).hexdigest() != digest:
        return (
            canonical,
            digest,
            None,
            ["the sealed contract fails its checksum (its bytes do not hash to the stored digest)"],
        )
    try:
        parsed = json.loads(canonical.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return canonical, digest, None, ["the sealed contract is not valid UTF-8 JSON"]
    if not isinstance(parsed, dict) or canonical_json(parsed) != canonical:
        return canonical, digest, None, ["the sealed contract is not a canonical JSON object"]
    return canonical, digest, parsed, []


def table_names(conn: apsw.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
