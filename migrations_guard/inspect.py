"""``inspect_store``: read every blob of a store and verify it, changing nothing on disk.

The file is opened through ``appliance.store.readonly`` (no -shm, no WAL recovery, no checkpoint,
writes refused by the VFS). Committed transactions still in a -wal file left by a crash are read
and verified too, from a private in-memory WAL index. The caller must hold ``data_dir/LOCK`` (or
have checked that no live process does): a live writer could checkpoint pages under this reader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw

from appliance.store import schema
from appliance.store.checksum import matches
from appliance.store.readonly import open_readonly, wal_path
from appliance.store.snapshot_format import META_SNAPSHOT, parse_snapshot_meta
from appliance.store.versions import (
    KIND_RUNNER,
    KNOWN_SCHEMA_VERSIONS,
    STORE_FILE_NAMES,
)
from migrations_guard.facts import StoreFacts


def locate_store(data_dir: Path) -> Path | None:
    """The store file in ``data_dir`` (runner or worker), ``None`` when there is none."""
    found = [data_dir / name for name in STORE_FILE_NAMES.values() if (data_dir / name).exists()]
    if len(found) > 1:
        raise ValueError(f"{data_dir} holds both a runner and a worker store; keep them apart")
    return found[0] if found else None


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def inspect_store(path: str | Path) -> StoreFacts:
    """Facts about the store at ``path`` (a store file, or a data_dir holding exactly one)."""
    path = Path(path)
    if path.is_dir():
        located = locate_store(path)
        if located is None:
            raise FileNotFoundError(f"{path} holds no appliance store")
        path = located
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    wal_present = wal_path(path).exists()
    base = {"path": str(path), "wal_present": wal_present}
    problems: list[str] = []
    if path.with_name(path.name + "-journal").exists():
        problems.append("an unexpected rollback journal (-journal) sits next to the store")
    try:
        conn = open_readonly(path)
    except apsw.Error as exc:
        return _empty_facts(base, [*problems, f"SQLite cannot open it ({exc})"])
    try:
        return _inspect_open(conn, base, problems)
    except apsw.Error as exc:
        return _empty_facts(base, [*problems, f"SQLite reports damage ({exc})"])
    finally:
        conn.close()


def _empty_facts(base: dict[str, Any], problems: list[str]) -> StoreFacts:
    return StoreFacts(
        **base,
        kind=None,
        schema_version=None,
        min_reader_version=None,
        created_by_version=None,
        contract_digest=None,
        contract=None,
        problems=tuple(problems),
    )


def _inspect_open(conn: apsw.Connection, base: dict[str, Any], problems: list[str]) -> StoreFacts:
    tables = schema.table_names(conn)
    if "meta" not in tables or "contract" not in tables:
        return _empty_facts(base, [*problems, "not an appliance store (no meta/contract table)"])
    meta, meta_problems = schema.read_meta(conn)
    problems.extend(meta_problems)
    kind = meta.get(schema.META_KIND)
    schema_version = _int_or_none(meta.get(schema.META_SCHEMA_VERSION))
    min_reader = _int_or_none(meta.get(schema.META_MIN_READER_VERSION))
    for key in (schema.META_KIND, schema.META_SCHEMA_VERSION, schema.META_MIN_READER_VERSION):
        if key not in meta and not any(repr(key) in p for p in meta_problems):
            problems.append(f"metadata {key!r} is missing")
    if kind is not None and kind not in KNOWN_SCHEMA_VERSIONS:
        problems.append(f"metadata kind {kind!r} is not a store kind this binary knows")
    _canonical, digest, contract, contract_problems = schema.read_contract(conn)
    problems.extend(contract_problems)
    summary: dict[str, Any] = {}
    if schema_version in KNOWN_SCHEMA_VERSIONS.get(kind or "", ()):
        check = list(conn.execute("PRAGMA quick_check"))
        if check != [("ok",)]:
            problems.append("SQLite quick_check: " + "; ".join(str(r[0]) for r in check[:5]))
        if kind == KIND_RUNNER:
            summary = _scan_runner(conn, problems, meta.get(META_SNAPSHOT))
        else:
            summary = _scan_worker(conn, problems)
    return StoreFacts(
        **base,
        kind=kind,
        schema_version=schema_version,
        min_reader_version=min_reader,
        created_by_version=meta.get(schema.META_CREATED_BY_VERSION),
        contract_digest=digest,
        contract=contract,
        problems=tuple(problems),
        summary=summary,
    )


def _scan_runner(
    conn: apsw.Connection, problems: list[str], snapshot_text: str | None
) -> dict[str, Any]:
    """Every runner row verified. A compacted log (``snapshot`` meta row) starts right after the
    snapshot index; rows at or below it are deleted rows not yet reclaimed (verified, counted,
    never part of the log)."""
    snap_index = snap_term = 0
    try:
        parsed = parse_snapshot_meta(snapshot_text)
    except ValueError as exc:
        problems.append(str(exc))
        parsed = None
    if parsed is not None:
        snap_index, snap_term, _voters = parsed
    term: int | None = None
    voted_for: str | None = None
    rows = conn.execute("SELECT term, voted_for, checksum FROM hard_state WHERE id = 1").fetchall()
    if not rows:
        problems.append("the Raft hard state is missing")
    elif not matches(rows[0][2], schema.TAG_HARD_STATE, rows[0][0], rows[0][1]):
        problems.append("the Raft hard state fails its checksum")
    else:
        term, voted_for = rows[0][0], rows[0][1]
    first = last = None
    count = log_bytes = reclaimable = 0
    previous_term = snap_term
    for idx, entry_term, payload, stored in conn.execute(
        "SELECT idx, term, payload, checksum FROM log ORDER BY idx"
    ):
        if not isinstance(payload, bytes) or not matches(
            stored, schema.TAG_LOG, idx, entry_term, payload
        ):
            problems.append(f"log entry {idx} fails its checksum")
            if idx <= snap_index:
                continue
        if idx <= snap_index:
            reclaimable += 1  # compacted, not yet deleted
            continue
        if first is None and snap_index and idx != snap_index + 1:
            problems.append(
                f"the log resumes at entry {idx}, not right after its snapshot at {snap_index}"
            )
        elif entry_term < previous_term:
            problems.append(f"log entry {idx} has term {entry_term} below the previous entry's")
        else:
            previous_term = entry_term
        if last is not None and idx != last + 1:
            problems.append(f"the log has a gap between entries {last} and {idx}")
        first = idx if first is None else first
        last = idx
        count += 1
        log_bytes += len(payload) if isinstance(payload, bytes) else 0
    applied: int | None = None
    rows = conn.execute("SELECT applied_index, checksum FROM checkpoint WHERE id = 1").fetchall()
    if not rows:
        problems.append("the checkpoint applied index is missing")
    elif not matches(rows[0][1], schema.TAG_CHECKPOINT, rows[0][0]):
        problems.append("the checkpoint applied index fails its checksum")
    else:
        applied = rows[0][0]
        if applied < snap_index:
            problems.append(
                f"the checkpoint (applied index {applied}) is below the snapshot index "
                f"{snap_index}: the entries between are gone"
            )
    parts = part_bytes = 0
    for name, data, stored in conn.execute(
        "SELECT name, data, checksum FROM checkpoint_part ORDER BY name"
    ):
        if not isinstance(data, bytes) or not matches(stored, schema.TAG_PART, name, data):
            problems.append(f"checkpoint part {name!r} fails its checksum")
        parts += 1
        part_bytes += len(data) if isinstance(data, bytes) else 0
    return {
        "term": term,
        "voted_for": voted_for,
        "log_first_index": snap_index + 1 if snap_index else (first or 0),
        "log_last_index": last or snap_index,
        "log_entries": count,
        "log_bytes": log_bytes,
        "snapshot_index": snap_index,
        "snapshot_term": snap_term,
        "log_reclaimable_entries": reclaimable,
        "applied_index": applied,
        "checkpoint_parts": parts,
        "checkpoint_bytes": part_bytes,
    }


def _scan_worker(conn: apsw.Connection, problems: list[str]) -> dict[str, Any]:
    incarnations: list[str] = []
    for seq, incarnation_id, opened_at_ms, stored in conn.execute(
        "SELECT seq, incarnation_id, opened_at_ms, checksum FROM incarnation ORDER BY seq"
    ):
        if not matches(stored, schema.TAG_INCARNATION, seq, incarnation_id, opened_at_ms):
            problems.append(f"incarnation record {seq} fails its checksum")
        else:
            incarnations.append(incarnation_id)
    counts = {"reserved": 0, "permitted": 0, "consumed": 0, "fenced": 0, "receipts": 0}
    invocations = 0
    for ns, schedule_id, occurrence_id, attempt, record, stored in conn.execute(
        "SELECT namespace, schedule_id, occurrence_id, attempt, record, checksum FROM invocation"
    ):
        invocations += 1
        key = f"({ns}, {schedule_id}, {occurrence_id}, {attempt})"
        if not isinstance(record, bytes) or not matches(
            stored, schema.TAG_INVOCATION, ns, schedule_id, occurrence_id, attempt, record
        ):
            problems.append(f"invocation record {key} fails its checksum")
            continue
        body = json.loads(record)
        counts["reserved"] += body.get("binding") is not None
        counts["permitted"] += body.get("permit") is not None
        counts["consumed"] += body.get("consumed") is not None
        counts["fenced"] += body.get("fence") is not None
        counts["receipts"] += body.get("receipt") is not None
    by_status: dict[str, int] = {}
    for row in conn.execute(
        "SELECT execution_id, namespace, schedule_id, occurrence_id, attempt, incarnation_id, "
        "status, record, output, checksum FROM execution"
    ):
        if not matches(row[9], schema.TAG_EXECUTION, *row[:9]):
            problems.append(f"execution record {row[0]!r} fails its checksum")
        by_status[row[6]] = by_status.get(row[6], 0) + 1
    return {
        "incarnations": len(incarnations),
        "latest_incarnation_id": incarnations[-1] if incarnations else None,
        "invocations": invocations,
        "invocation_counts": counts,
        "executions": sum(by_status.values()),
        "executions_by_status": dict(sorted(by_status.items())),
    }
