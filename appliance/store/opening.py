"""Opening a store: lock the data_dir, create and seal on first start, else ask the guard.

First start: the file is built under a temporary name in one transaction (tables, metadata,
contract, initial rows), closed (which checkpoints and removes its -wal), then renamed into place
and the directory fsynced, so a crash during creation never leaves a half-sealed store under the
real name. Later starts: ``migrations_guard`` inspects the file read-only and decides; only an
accepted store is opened read-write (which is when SQLite may recover a -wal left by a crash).

Every open also makes the data_dir 0700 and the store's files 0600 (appliance.store.permissions)
and starts a numbered session that catches a store which lost committed transactions
(appliance.store.session).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw

from appliance import __version__
from appliance.core.canonical import canonical_digest, canonical_json
from appliance.store import permissions, schema, session
from appliance.store.errors import StoreRefused
from appliance.store.sqlite import DataDirLock, fsync_dir, open_writable, transaction
from appliance.store.versions import (
    BINARY_READER_VERSION,
    CURRENT_SCHEMA_VERSION,
    READER_VERSION_BASELINE,
    STORE_FILE_NAMES,
)
from migrations_guard import decide, inspect_store

SIDE_SUFFIXES = permissions.SIDE_SUFFIXES


def _side_files(path: Path) -> list[Path]:
    return [path.with_name(path.name + s) for s in SIDE_SUFFIXES]


def open_guarded(
    data_dir: str | Path,
    *,
    kind: str,
    contract: dict[str, Any],
    contract_digest: str,
    ddl: tuple[str, ...],
    seed: Callable[[apsw.Connection], None],
    create_pragmas: tuple[str, ...] = (),
) -> tuple[apsw.Connection, DataDirLock, bool]:
    """(read-write connection, held lock, created-now) for the ``kind`` store in ``data_dir``.

    ``create_pragmas`` run first on a store being created (e.g. ``auto_vacuum``), never on an
    existing one: there is no automatic migration."""
    if canonical_digest(contract) != contract_digest:
        raise ValueError("contract_digest is not the SHA-256 of the contract's canonical JSON")
    data_dir = Path(data_dir)
    data_dir.mkdir(mode=permissions.DIR_MODE, parents=True, exist_ok=True)
    permissions.tighten(data_dir, data_dir / STORE_FILE_NAMES[kind])  # before LOCK is created
    lock = DataDirLock.acquire(data_dir, create=True)
    if lock is None:  # create=True always yields a lock; keep the type checker and reader honest
        raise StoreRefused(f"could not create the lock file in {data_dir}")
    conn: apsw.Connection | None = None
    try:
        path = data_dir / STORE_FILE_NAMES[kind]
        permissions.tighten(data_dir, path, extra=(lock.path,))
        for other_kind, name in STORE_FILE_NAMES.items():
            if other_kind != kind and (data_dir / name).exists():
                raise StoreRefused(
                    f"{data_dir} holds a {other_kind} store ({name}); a {kind} needs its own "
                    "data_dir"
                )
        created = not path.exists()
        if created:
            strays = [p for p in _side_files(path) if p.exists()]
            if strays:
                raise StoreRefused(
                    f"{data_dir} has {', '.join(p.name for p in strays)} but no {path.name}: the "
                    "store file is missing; restore it from a backup or move the data_dir aside"
                )
            _create(path, kind, contract, ddl, seed, create_pragmas)
        else:
            facts = inspect_store(path)
            decision = decide(
                facts,
                contract_digest,
                BINARY_READER_VERSION,
                expected_kind=kind,
                expected_contract=contract,
            )
            if not decision.allowed:
                raise StoreRefused(decision.message)
            session.check_before_open(path)
        conn = open_writable(path, create=False)
        permissions.tighten(data_dir, path, extra=(lock.path,))  # the -wal/-shm just made
        number = session.begin(conn, path)
        lock.on_release = lambda: session.end(path, number)
        return conn, lock, created
    except BaseException:
        if conn is not None:
            conn.close()
        lock.release()
        raise


def _create(
    path: Path,
    kind: str,
    contract: dict[str, Any],
    ddl: tuple[str, ...],
    seed: Callable[[apsw.Connection], None],
    create_pragmas: tuple[str, ...] = (),
) -> None:
    staging = path.with_name(path.name + ".creating")
    for leftover in [staging, *_side_files(staging)]:  # a creation that crashed; we hold the lock
        leftover.unlink(missing_ok=True)
    permissions.create_private_file(staging)  # SQLite's -wal/-shm take its mode: all 0600
    conn = open_writable(staging, create=True, first_pragmas=create_pragmas)
    try:
        with transaction(conn):
            for statement in (*schema.FROZEN_DDL, *ddl):
                conn.execute(statement)
            schema.write_meta(conn, schema.META_KIND, kind)
            schema.write_meta(conn, schema.META_SCHEMA_VERSION, str(CURRENT_SCHEMA_VERSION[kind]))
            schema.write_meta(conn, schema.META_MIN_READER_VERSION, str(READER_VERSION_BASELINE))
            schema.write_meta(conn, schema.META_CREATED_BY_VERSION, __version__)
            canonical = canonical_json(contract)
            schema.write_contract(conn, canonical, canonical_digest(contract))
            seed(conn)
    finally:
        conn.close()
    leftovers = [p.name for p in _side_files(staging) if p.exists() and p.stat().st_size > 0]
    if leftovers:
        raise StoreRefused(f"creating {path} left {', '.join(leftovers)} behind; not sealing it")
    for side in _side_files(staging):
        side.unlink(missing_ok=True)
    staging.rename(path)
    fsync_dir(path.parent)
