"""Helpers shared by the store and guard tests: contracts, raw SQLite edits, file fingerprints."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import apsw

from appliance.core.canonical import canonical_digest
from appliance.store.runner_store import RunnerStore
from appliance.store.worker_store import WorkerStore

CONTRACT: dict[str, Any] = {
    "voters": {"n1": "127.0.0.1:4401", "n2": "127.0.0.1:4402", "n3": "127.0.0.1:4403"},
    "limits": {"schedules": 64, "records": 4096, "outstanding": 128, "running": 16},
    "schedules": [],
    "remote": {"url": "http://127.0.0.1:4500", "namespace": "ns", "worker_id": "w1"},
}
DIGEST = canonical_digest(CONTRACT)


def open_runner(data_dir: Path, contract: dict[str, Any] | None = None) -> RunnerStore:
    contract = CONTRACT if contract is None else contract
    return RunnerStore.create_or_open(
        data_dir, contract=contract, contract_digest=canonical_digest(contract)
    )


def open_worker(data_dir: Path, *, now_ms: int = 1_000, worker_id: str = "w1") -> WorkerStore:
    return WorkerStore.create_or_open(data_dir, namespace="ns", worker_id=worker_id, now_ms=now_ms)


def populated_runner(data_dir: Path) -> None:
    """A closed runner store with three log entries, a vote and a two-part checkpoint."""
    with open_runner(data_dir) as store:
        store.persist(
            term=2,
            voted_for="n1",
            entries=[(1, 1, b'{"cmd":"a"}'), (2, 2, b'{"cmd":"b"}'), (3, 2, b'{"cmd":"c"}')],
        )
        store.save_transition(2, {"meta": b'{"epoch":1}', "schedule/1": b'{"name":"s"}'})


def fingerprint(directory: Path) -> dict[str, str]:
    """SHA-256 of every file in ``directory`` (names show new or vanished files too)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


def raw_execute(db_path: Path, sql: str, params: tuple = ()) -> None:
    """Change the store behind its back, through SQLite itself (the file stays a valid db)."""
    conn = apsw.Connection(str(db_path))
    conn.setbusytimeout(5_000)
    conn.execute(sql, params)
    conn.close()


def raw_query(db_path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.setbusytimeout(5_000)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def flip_first_byte(data: bytes) -> bytes:
    return bytes([data[0] ^ 0x01]) + data[1:]
