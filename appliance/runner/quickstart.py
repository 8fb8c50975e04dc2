"""``appliance quickstart``: one voter and one worker on loopback, from one command.

Theory of operation: the first run writes everything into the data directory — fresh distinct
credentials (``credentials.json``, mode 0600), a runner config and a worker config on free
loopback ports, with a demo schedule (``* * * * *``, JavaScript that logs a line) as the initial
schedule — and later runs reuse those files, because the ports, the worker URL and the grant
expiry are part of the sealed contract the store was created with. The worker is a child process
(``python -m appliance worker``); the voter runs in this process. Decisions go to
``runner.log`` in the data directory; the terminal shows where things listen and one line per
occurrence outcome. Operator commands can be typed on stdin (one JSON object per line). Ctrl-C
stops both.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TextIO

from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.credentials import resolve_runner_credentials
from appliance.config.rfc3339 import format_utc
from appliance.config.runner import load_runner_config
from appliance.core.errors import InvalidConfig
from appliance.runner.logs import DecisionLog
from appliance.runner.process import RunnerProcess, make_clock, read_commands
from appliance.store.errors import StoreError
from appliance.store.runner_store import RunnerStore

DEFAULT_DATA_DIR: Final = "appliance-quickstart"
WORKER_READY_TIMEOUT_S: Final = 60.0
ENV_NAMES: Final = {
    "admission": "QUICKSTART_ADMISSION_TOKEN",
    "cluster": "QUICKSTART_CLUSTER_TOKEN",
    "worker": "QUICKSTART_WORKER_TOKEN",
}
DEMO_SCHEDULE: Final = {
    "name": "hello",
    "code": "console.log('hello from the appliance at ' + scheduled.due_time)",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def prepare(data_dir: Path) -> dict[str, str]:
    """Create (first run) or reuse the configs and credentials; return the credential env."""
    data_dir.mkdir(parents=True, exist_ok=True)
    credentials_path = data_dir / "credentials.json"
    if credentials_path.exists():
        tokens = json.loads(credentials_path.read_text())
    else:
        tokens = {name: secrets.token_urlsafe(32) for name in ENV_NAMES.values()}
        _write_private(credentials_path, json.dumps(tokens, indent=2) + "\n")
    runner_path, worker_path = data_dir / "runner.json", data_dir / "worker.json"
    if not runner_path.exists() or not worker_path.exists():
        cluster_port, admission_port, worker_port = _free_ports(3)
        expires = datetime.now(UTC).replace(microsecond=0) + timedelta(days=365)
        runner = {
            "node_id": "quickstart",
            "advertise_addr": "127.0.0.1",
            "cluster_port": cluster_port,
            "peers": [],
            "data_dir": str(data_dir / "runner"),
            "admission_addr": f"127.0.0.1:{admission_port}",
            "admission_bearer_env": ENV_NAMES["admission"],
            "cluster_bearer_env": ENV_NAMES["cluster"],
            "schedules": [DEMO_SCHEDULE],
            "remote": {
                "url": f"http://127.0.0.1:{worker_port}",
                "bearer_env": ENV_NAMES["worker"],
                "expires_at": format_utc(expires),
                "session": "quickstart",
                "timeout_seconds": 60,
                "heap_mb": 64,
                "namespace": "quickstart",
                "worker_id": "worker-1",
            },
        }
        worker = {
            "namespace": "quickstart",
            "worker_id": "worker-1",
            "data_dir": str(data_dir / "worker"),
            "bearer_env": ENV_NAMES["worker"],
            "admission_bearer_env": ENV_NAMES["admission"],
            "admission_urls": [f"http://127.0.0.1:{admission_port}"],
            "listen_addr": f"127.0.0.1:{worker_port}",
        }
        runner_path.write_text(json.dumps(runner, indent=2) + "\n")
        worker_path.write_text(json.dumps(worker, indent=2) + "\n")
    return {str(k): str(v) for k, v in tokens.items()}


class _Console:
    """The decision log's stream: every line to ``runner.log``; outcomes also to the terminal."""

    def __init__(self, log_file: TextIO, out: TextIO) -> None:
        self._file = log_file
        self._out = out

    def write(self, text: str) -> int:
        self._file.write(text)
        for line in text.splitlines():
            self._show(line)
        return len(text)

    def flush(self) -> None:
        self._file.flush()
        self._out.flush()

    def _show(self, line: str) -> None:
        try:
            event: dict[str, Any] = json.loads(line)
        except ValueError:
            return
        kind = event.get("event")
        if kind == "outcome":
            reason = f" ({event['reason']})" if event.get("reason") else ""
            self._out.write(
                f"occurrence {event.get('occurrence')} attempt {event.get('attempt')}: "
                f"{event.get('state')}{reason}\n"
            )
        elif kind == "claim":
            self._out.write(f"occurrence {event.get('occurrence')} dispatched\n")
        elif kind in ("fatal", "ownership_acquired"):
            self._out.write(f"{kind}: {json.dumps(event)}\n")


def _start_worker(data_dir: Path, env: dict[str, str], log: TextIO) -> subprocess.Popen[str]:
    worker = subprocess.Popen(
        [sys.executable, "-m", "appliance", "worker", "--config", str(data_dir / "worker.json")],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    ready: list[str] = []
    reader = threading.Thread(
        target=lambda: ready.append(worker.stdout.readline() if worker.stdout else ""),
        daemon=True,
    )
    reader.start()
    reader.join(WORKER_READY_TIMEOUT_S)
    if not ready or '"ready"' not in ready[0]:
        worker.kill()
        worker.wait(10)
        raise RuntimeError(f"the worker did not start; see {data_dir / 'worker.log'}")
    return worker


def run_quickstart(
    data_dir_text: str | None,
    stdin: TextIO,
    stdout: TextIO,
    *,
    time_scale: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    try:
        clock = make_clock(time_scale, os.environ if environ is None else environ)
    except ValueError as err:
        print(f"appliance quickstart: {err}", file=sys.stderr)
        return 2
    data_dir = Path(data_dir_text or DEFAULT_DATA_DIR).resolve()
    env = prepare(data_dir)
    try:
        cfg = load_runner_config(data_dir / "runner.json")
        credentials = resolve_runner_credentials(cfg, env)
    except InvalidConfig as exc:
        for path, message in exc.problems:
            print(f"appliance quickstart: config: {path}: {message}", file=sys.stderr)
        return 2
    worker_log = open(data_dir / "worker.log", "a")  # noqa: SIM115 - closed at the end
    runner_log = open(data_dir / "runner.log", "a")  # noqa: SIM115
    try:
        try:
            worker = _start_worker(data_dir, env, worker_log)
        except RuntimeError as exc:
            print(f"appliance quickstart: {exc}", file=sys.stderr)
            return 1
        try:
            store = RunnerStore.create_or_open(
                cfg.data_dir, contract=sealed_contract(cfg), contract_digest=contract_digest(cfg)
            )
        except StoreError as exc:
            worker.terminate()
            worker.wait(20)
            print(f"appliance quickstart: cannot open the store: {exc}", file=sys.stderr)
            return 1
        log = DecisionLog(cfg.node_id, _Console(runner_log, stdout))  # type: ignore[arg-type]
        process = RunnerProcess(cfg, credentials, store, clock, log)
        process.start()
        print(
            f"appliance quickstart: data in {data_dir} (credentials.json is private, 0600)\n"
            f"  voter: raft on {cfg.own_addr}, admission on {cfg.admission_addr}\n"
            f"  worker: {cfg.remote.url.url}\n"
            f"  logs: {data_dir / 'runner.log'}, {data_dir / 'worker.log'}\n"
            "  demo schedule: * * * * * (a line of JavaScript every minute)\n"
            '  type {"action":"list"} for the state; Ctrl-C stops both',
            file=stdout,
            flush=True,
        )
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: process.stopping.set())
        threading.Thread(
            target=read_commands, args=(process, stdin, stdout), name="stdin", daemon=True
        ).start()
        process.stopping.wait()
        process.stop()
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)
        print("appliance quickstart: stopped", file=stdout, flush=True)
        return 1 if process.fatal is not None else 0
    finally:
        worker_log.close()
        runner_log.close()
