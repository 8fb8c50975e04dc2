"""``appliance admin store``: offline, read-only tools for runner and worker stores.

``check DATA_DIR`` verifies every checksum, the schema and reader versions and the sealed
contract (exit 0 healthy, 1 with a report otherwise). ``inspect DATA_DIR [--json]`` shows schema,
versions, contract digest and a summary (runner: term, vote, log range, applied index, checkpoint
parts and bytes; worker: incarnations, invocations, executions). Both take ``data_dir/LOCK`` for
the duration, so they refuse a store that a live process holds, and neither changes a byte.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from appliance.store.errors import StoreRefused
from appliance.store.sqlite import DataDirLock
from appliance.store.versions import BINARY_READER_VERSION
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


def _facts(data_dir: Path) -> StoreFacts | None:
    """Facts under the data_dir lock; prints why and returns ``None`` when it cannot look."""
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
        return inspect_store(path)
    finally:
        if lock is not None:
            lock.release()


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
