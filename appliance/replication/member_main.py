"""Run a voter's Raft membership from its runner config until SIGTERM / SIGINT.

    python -m appliance.replication.member_main CONFIG.json

This is what ``appliance runner CONFIG.json`` starts before the runner's own features exist:
the store is opened (and sealed on first start) by migrations_guard's rules, the cluster
listener, transport and Raft node start, and the process serves until it is told to stop. The
apply hook is empty: there is no state machine yet, so every start applies from index 1. Exit
status: 0 after a clean stop, 2 for a refused config or store, 3 if the Raft driver died.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence

from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.credentials import resolve_runner_credentials
from appliance.config.runner import load_runner_config
from appliance.core.errors import InvalidConfig
from appliance.replication.raft_member import RaftMember
from appliance.signal_wait import wait_for_stop
from appliance.store.errors import StoreRefused
from appliance.store.runner_store import RunnerStore

log = logging.getLogger("appliance.raft.member")


def serve(config_path: str, environ: Mapping[str, str], stop: threading.Event) -> int:
    try:
        cfg = load_runner_config(config_path)
        credentials = resolve_runner_credentials(cfg, environ)
        digest = contract_digest(cfg)
        store = RunnerStore.create_or_open(
            cfg.data_dir, contract=sealed_contract(cfg), contract_digest=digest
        )
    except (InvalidConfig, StoreRefused, OSError, ValueError) as exc:
        print(f"appliance runner: refused: {exc}", file=sys.stderr)
        return 2
    died: list[BaseException] = []

    def on_fatal(exc: BaseException) -> None:
        died.append(exc)
        stop.set()

    member = RaftMember(
        cfg,
        credentials,
        store,
        lambda index, command: None,
        contract_digest=digest,
        on_fatal=on_fatal,
    )
    try:
        member.start()
        print(
            f"raft member {cfg.node_id} listening on {cfg.own_addr}, "
            f"voters {', '.join(cfg.voters)}",
            flush=True,
        )
        wait_for_stop(stop)
    finally:
        member.stop()
        store.close()
    if died:
        print(f"appliance runner: raft driver stopped: {died[0]!r}", file=sys.stderr)
        return 3
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m appliance.replication.member_main CONFIG.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return serve(args[0], os.environ, stop)


if __name__ == "__main__":
    sys.exit(main())
