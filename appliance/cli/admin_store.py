"""``appliance admin store``: offline tools for runner and worker stores.

``check DATA_DIR`` verifies every checksum, the schema and reader versions and the sealed
contract (exit 0 healthy, 1 with a report otherwise). ``inspect DATA_DIR [--json]`` shows schema,
versions, contract digest and a summary (runner: term, vote, log range, applied index, checkpoint
parts and bytes; worker: incarnations, invocations, executions). Both take ``data_dir/LOCK`` for
the duration, so they refuse a store that a live process holds, and neither changes a byte.

``recover --config CONFIG.json [--data-dir DIR]`` is the one tool that writes: for a voter whose
store was lost, it creates a fresh runner store sealed with the cluster's contract and marked
*recovering*; the voter, once started, neither votes nor campaigns until it has caught up from a
leader (docs/voter-recovery.md). It refuses a data_dir that still holds a store (move the damaged
one aside first), a single-voter config (there is no one to recover from) and an etcd-replicated
one (etcd recovers its own members).

``backup DATA_DIR --out FILE`` copies a runner store — of a running voter too — into a new file:
one SQLite read transaction (the online backup API in a single step), so the copy is one
consistent state (a checkpoint, the log after its compaction point, the hard state). It does not
take the lock and changes nothing; the copy is verified (every checksum) before it is kept.
``restore --config CONFIG.json --from FILE [--data-dir DIR]`` puts such a copy in place for a
voter whose store is gone: it refuses a data_dir that still holds a store, a copy that fails
the guard, or one sealed with another contract; in a cluster of 3 or more voters it marks the
restored store *recovering* (the copy's vote is stale: the voter must not vote before it has
caught up — by log or by snapshot — exactly as after ``recover``), docs/voter-recovery.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path

import apsw

from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.replication import EtcdBackend
from appliance.config.rfc3339 import format_utc
from appliance.config.runner import load_runner_config
from appliance.core.errors import InvalidConfig
from appliance.store import schema
from appliance.store.errors import StoreError, StoreRefused
from appliance.store.readonly import open_readonly
from appliance.store.runner_store import META_RECOVERING_SINCE, RunnerStore
from appliance.store.sqlite import DataDirLock
from appliance.store.versions import BINARY_READER_VERSION, KIND_RUNNER, RUNNER_FILE_NAME
from migrations_guard import StoreFacts, decide, inspect_store, locate_store

EXIT_OK = 0
EXIT_FAILURE = 1


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("store", help="check or inspect a runner/worker store offline")
    tools = parser.add_subparsers(dest="store_command", metavar="ACTION")
    tools.required = True
    check = tools.add_parser("check", help="verify every checksum, schema and contract")
    check.add_argument("data_dir", metavar="DATA_DIR", type=Path)
    check.set_defaults(func=run_check)
    inspect = tools.add_parser("inspect", help="show schema, versions, Raft state, checkpoint")
    inspect.add_argument("data_dir", metavar="DATA_DIR", type=Path)
    inspect.add_argument("--json", action="store_true", help="one JSON object on stdout")
    inspect.set_defaults(func=run_inspect)
    recover = tools.add_parser(
        "recover",
        help="create a fresh store, marked recovering, for a voter whose store was lost",
    )
    recover.add_argument("--config", required=True, type=Path, help="the voter's runner config")
    recover.add_argument(
        "--data-dir",
        type=Path,
        help="must be the config's data_dir (default); given, it guards against a wrong config",
    )
    recover.set_defaults(func=run_recover)
    backup = tools.add_parser("backup", help="copy a (running) runner store to a file")
    backup.add_argument("data_dir", metavar="DATA_DIR", type=Path)
    backup.add_argument("--out", required=True, type=Path, help="a new file (never overwritten)")
    backup.set_defaults(func=run_backup)
    restore = tools.add_parser(
        "restore", help="put a backup in place of a lost voter store (marked recovering)"
    )
    restore.add_argument("--config", required=True, type=Path, help="the voter's runner config")
    restore.add_argument("--from", dest="source", required=True, type=Path, help="the backup")
    restore.add_argument("--data-dir", type=Path, help="must be the config's data_dir")
    restore.set_defaults(func=run_restore)


def _facts(data_dir: Path) -> StoreFacts | None:
    """Facts under the data_dir lock; prints why and returns ``None`` when it cannot look.

    For a healthy runner store the summary also says whether it is still recovering a lost
    store (``recovering_since``: the time ``recover`` made it, or ``null``)."""
    if not data_dir.is_dir():
        print(f"appliance: {data_dir} is not a directory", file=sys.stderr)
        return None
    try:
        path = locate_store(data_dir)
    except ValueError as exc:
        print(f"appliance: {exc}", file=sys.stderr)
        return None
    if path is None:
        print(f"appliance: {data_dir} holds no runner or worker store", file=sys.stderr)
        return None
    try:
        lock = DataDirLock.acquire(data_dir, create=False)
    except StoreRefused as exc:
        print(f"appliance: {exc.message}", file=sys.stderr)
        return None
    try:
        facts = inspect_store(path)
        if facts.kind == KIND_RUNNER and not facts.problems:
            facts.summary[META_RECOVERING_SINCE] = _recovering_since(path)
        return facts
    finally:
        if lock is not None:
            lock.release()


def _recovering_since(path: Path) -> str | None:
    conn = open_readonly(path)
    try:
        meta, _problems = schema.read_meta(conn)  # already verified by inspect_store
    finally:
        conn.close()
    return meta.get(META_RECOVERING_SINCE)


def run_check(args: argparse.Namespace) -> int:
    facts = _facts(args.data_dir)
    if facts is None:
        return EXIT_FAILURE
    decision = decide(facts, None, BINARY_READER_VERSION)
    if decision.allowed:
        print(
            f"healthy: {facts.kind} store {facts.path}, schema {facts.schema_version}, "
            f"contract {facts.contract_digest}, every checksum verified"
        )
        return EXIT_OK
    print(f"NOT healthy: {facts.path}")
    for reason in decision.reasons:
        print(f"- {reason}")
    return EXIT_FAILURE


def run_inspect(args: argparse.Namespace) -> int:
    facts = _facts(args.data_dir)
    if facts is None:
        return EXIT_FAILURE
    document = facts.as_json()
    if args.json:
        print(json.dumps(document, sort_keys=True))
        return EXIT_OK
    for key, value in document.items():
        if key == "problems":
            continue
        print(f"{key}: {json.dumps(value) if isinstance(value, dict) else value}")
    print(f"problems: {len(facts.problems)}")
    for problem in facts.problems:
        print(f"- {problem}")
    return EXIT_OK


def run_recover(args: argparse.Namespace) -> int:
    try:
        cfg = load_runner_config(args.config)
    except InvalidConfig as exc:
        for path, message in exc.problems:
            print(f"appliance: config: {path}: {message}", file=sys.stderr)
        return EXIT_FAILURE
    data_dir = Path(cfg.data_dir)
    if args.data_dir is not None and args.data_dir.resolve() != data_dir.resolve():
        print(
            f"appliance: --data-dir {args.data_dir} is not the config's data_dir {data_dir}; "
            "recover the store this voter will open",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    if isinstance(cfg.replication, EtcdBackend):
        print(
            "appliance: this voter replicates through etcd, which recovers its own members; "
            "start the runner on an empty data_dir instead",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    if len(cfg.voters) < 3:
        print(
            f"appliance: {cfg.node_id} has {len(cfg.voters)} voter(s): a lost store can only be "
            "recovered from a majority of other voters that still hold the log (3 or more "
            "voters); restore a backup instead",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    created_at = format_utc(datetime.now(UTC))
    try:
        store = RunnerStore.create_recovering(
            data_dir,
            contract=sealed_contract(cfg),
            contract_digest=contract_digest(cfg),
            created_at=created_at,
        )
    except StoreError as exc:
        print(f"appliance: cannot recover: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    with store:
        digest = contract_digest(cfg)
    print(
        f"created {store.path}: an empty runner store for voter {cfg.node_id}, sealed with "
        f"contract {digest}, RECOVERING since {created_at}.\n"
        "Start the voter now; it neither votes nor campaigns until it has caught up from the "
        "leader. Watch `appliance admin status` (or the cluster status route) until its "
        '"recovering" is false.'
    )
    return EXIT_OK


def _copy_consistent(source: Path, target: Path) -> None:
    """Copy the database ``source`` into the new file ``target`` in one read transaction."""
    uri = "file:" + urllib.parse.quote(str(source.resolve())) + "?mode=ro"
    src = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    try:
        src.setbusytimeout(5_000)
        dest = apsw.Connection(str(target))
        try:
            with dest.backup("main", src, "main") as copy:
                copy.step(-1)  # every page at once: one consistent state
            dest.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            dest.close()
    finally:
        src.close()


def run_backup(args: argparse.Namespace) -> int:
    data_dir, out = Path(args.data_dir), Path(args.out)
    source = data_dir / RUNNER_FILE_NAME
    if not source.is_file():
        print(f"appliance: {data_dir} holds no runner store", file=sys.stderr)
        return EXIT_FAILURE
    if out.exists():
        print(f"appliance: {out} exists; a backup never overwrites a file", file=sys.stderr)
        return EXIT_FAILURE
    staging = out.with_name(out.name + ".partial")
    staging.unlink(missing_ok=True)
    try:
        _copy_consistent(source, staging)
        facts = inspect_store(staging)
    except (apsw.Error, OSError) as exc:
        staging.unlink(missing_ok=True)
        print(f"appliance: backup of {source} failed: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    if facts.problems or facts.kind != KIND_RUNNER:
        staging.unlink(missing_ok=True)
        problems = "; ".join(facts.problems) or f"a {facts.kind} store"
        print(f"appliance: the copy does not verify, not kept: {problems}", file=sys.stderr)
        return EXIT_FAILURE
    staging.rename(out)
    summary = facts.summary
    print(
        f"wrote {out}: runner store, contract {facts.contract_digest}, checkpoint at applied "
        f"index {summary['applied_index']}, log {summary['log_first_index']}.."
        f"{summary['log_last_index']} (compacted up to {summary['snapshot_index']}), "
        f"{out.stat().st_size} bytes, every checksum verified"
    )
    return EXIT_OK


def run_restore(args: argparse.Namespace) -> int:
    try:
        cfg = load_runner_config(args.config)
    except InvalidConfig as exc:
        for path, message in exc.problems:
            print(f"appliance: config: {path}: {message}", file=sys.stderr)
        return EXIT_FAILURE
    data_dir = Path(cfg.data_dir)
    if args.data_dir is not None and args.data_dir.resolve() != data_dir.resolve():
        print(
            f"appliance: --data-dir {args.data_dir} is not the config's data_dir {data_dir}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    if isinstance(cfg.replication, EtcdBackend):
        print("appliance: an etcd-replicated runner keeps no log to restore", file=sys.stderr)
        return EXIT_FAILURE
    source = Path(args.source)
    if not source.is_file():
        print(f"appliance: {source} does not exist", file=sys.stderr)
        return EXIT_FAILURE
    digest = contract_digest(cfg)
    facts = inspect_store(source)
    decision = decide(
        facts,
        digest,
        BINARY_READER_VERSION,
        expected_kind=KIND_RUNNER,
        expected_contract=sealed_contract(cfg),
    )
    if not decision.allowed:
        print(f"appliance: cannot restore {source}: {decision.message}", file=sys.stderr)
        return EXIT_FAILURE
    recovering = len(cfg.voters) >= 3
    created_at = format_utc(datetime.now(UTC))
    try:
        target = RunnerStore.place_restored(
            data_dir, source, recovering_since=created_at if recovering else None
        )
    except StoreError as exc:
        print(f"appliance: cannot restore: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    state = f"RECOVERING since {created_at}" if recovering else "a single voter's whole state"
    print(
        f"restored {target} from {source} (checkpoint at applied index "
        f"{facts.summary['applied_index']}): {state}.\n"
        + (
            "Start the voter now; it neither votes nor campaigns until it has caught up from "
            "the leader (by log, or by snapshot when the leader has compacted past it)."
            if recovering
            else "Everything committed after the backup was taken is lost."
        )
    )
    return EXIT_OK
