"""``appliance quickstart``: one voter, its worker and a demo schedule on loopback, one command.

Theory of operation, in this order (each step fails closed with a message that says what to do):

1. ``--time-scale`` is refused unless ``APPLIANCE_TESTING=1`` (exit 2);
2. the data directory is prepared (``quickstart_files``): the first run writes fresh distinct
   credentials (``credentials.env``, mode 0600), ``runner.json`` and ``worker.json`` on free
   loopback ports with the demo schedule as the initial schedule; later runs reuse them and resume
   the same stores (a sealed port that is taken is an error, exit 1);
3. SIGINT/SIGTERM handlers are installed before anything starts, so Ctrl-C at any moment leads
   to the same clean shutdown;
4. the worker starts as a child process (``python -m appliance worker``) with the credentials in
   its environment only; it is ready when it prints its ``ready`` line;
5. the voter (``RunnerProcess``: Raft member with ``single`` replication, admission route,
   management listener, runner loop) starts in this process, its decision log going to
   ``runner.log`` through the ``Console``, which shows outcomes and their output on stdout;
6. a banner names every address, the credentials file, and the exact shell lines that run
   ``appliance admin status`` against the management listener, the web console's URL and a
   one-time login link (a single-use nonce that expires in 10 minutes, exchanged by POST; never
   the console credential, and never written to a log); no credential is ever printed.

Shutdown (Ctrl-C, SIGTERM or a fatal Raft error): the voter drains while admission stays up, the
worker child is terminated and reaped (it reaps its engine children), the store and logs close;
exit 0 (1 after a fatal error). Operator commands can also be typed on stdin, one JSON object per
line; EOF on stdin leaves scheduling running.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, TextIO

from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.credentials import resolve_runner_credentials
from appliance.config.runner import RunnerConfig, load_runner_config
from appliance.core.errors import InvalidConfig
from appliance.engine.pdeathsig import set_parent_death_signal
from appliance.quickstart.console import Console, LockedStream
from appliance.quickstart.files import (
    RUNNER_FILE,
    Layout,
    QuickstartError,
    default_data_dir,
    prepare,
)
from appliance.quickstart.log_file import RotatingLogFile
from appliance.runner.drain_notice import drain_notice, open_occurrences
from appliance.runner.logs import DecisionLog
from appliance.runner.process import DRAIN_S, RunnerProcess, make_clock, read_commands
from appliance.runner.worker_client import WorkerClient
from appliance.signal_wait import wait_for_stop
from appliance.store.errors import StoreError
from appliance.store.runner_store import RunnerStore

DEFAULT_DATA_DIR: Final = None  # without --data-dir: default_data_dir (per-user, or legacy ./)
WORKER_READY_TIMEOUT_S: Final = 60.0
WORKER_STOP_TIMEOUT_S: Final = 30.0
WORKER_LOG_TAIL_LINES: Final = 15
# runner.log and worker.log each start again past this, keeping one predecessor (<name>.1):
# at most 64 MiB each. The voter logs ~1 KB per occurrence (measured on the quickstart's own
# schedule), so runner.log keeps the last ~45 days of one every-minute schedule.
LOG_FILE_BYTES: Final = 32 * 1024 * 1024
WORKER_PUMP_JOIN_S: Final = 2.0
PREFIX: Final = "appliance quickstart"


class _Stop:
    """A stop request that may arrive before the voter exists (Ctrl-C during start-up)."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.process: RunnerProcess | None = None

    def __call__(self, *_: object) -> None:
        self.requested.set()
        if self.process is not None:
            self.process.stopping.set()


def self_command() -> str:
    """How to invoke this same program again from a shell (for the printed admin command)."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if argv0.endswith("__main__.py") or argv0 in ("", "-c", "-m"):
        return f"{shlex.quote(sys.executable)} -m appliance"
    if argv0.endswith(".pyz"):
        return f"{shlex.quote(sys.executable)} {shlex.quote(os.path.abspath(argv0))}"
    return shlex.quote(os.path.abspath(argv0))


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    with contextlib.suppress(OSError):
        set_parent_death_signal(signal.SIGTERM)


class WorkerChild:
    """The worker process: started with the credentials in its environment, stopped and reaped."""

    def __init__(self, layout: Layout, log: RotatingLogFile) -> None:
        self._log_path = layout.data_dir / "worker.log"
        self._log = log
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "appliance", "worker", "--config", str(layout.worker_path)],
            env={**os.environ, **layout.credentials},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            # Its log (stderr) goes through the pipe too, so the quickstart's file can rotate.
            stderr=subprocess.STDOUT,
            text=True,
            # Its own process group: Ctrl-C reaches only the quickstart, which stops the worker
            # in order (after the voter has drained) instead of both racing to exit.
            start_new_session=True,
            # ...and if the quickstart dies without stopping it (SIGKILL), the kernel sends it
            # SIGTERM, so no orphan keeps the sealed worker port. Only the main thread runs yet.
            preexec_fn=_die_with_parent,
        )
        # Keep reading its stdout for its whole life: a full pipe would block the worker.
        stream = self.proc.stdout
        if stream is None:
            raise QuickstartError("the worker's stdout is not a pipe")
        self._pump_thread = threading.Thread(
            target=self._pump, args=(stream,), name="worker-out", daemon=True
        )
        self._pump_thread.start()

    def _pump(self, stream: TextIO) -> None:
        for line in stream:
            if line.startswith('{"event": "ready"'):  # not a log line that mentions "ready"
                self._ready.set()
            with contextlib.suppress(OSError, ValueError):
                self._log.write(line)
                self._log.flush()
        self._ready.set()  # EOF: the worker exited; wait_ready() looks at poll()

    def wait_ready(self, stop: threading.Event) -> None:
        """Return once the worker is listening; ``QuickstartError`` if it exits or hangs."""
        waited_s = 0.0
        while not self._ready.wait(0.2):
            waited_s += 0.2
            if stop.is_set():
                return
            if waited_s >= WORKER_READY_TIMEOUT_S:
                raise QuickstartError(f"the worker was not ready within {WORKER_READY_TIMEOUT_S}s")
        if self.proc.poll() is not None:
            self._log.flush()
            raise QuickstartError(
                f"the worker exited with {self.proc.returncode} during start-up; the end of "
                f"{self._log_path}:\n{_tail(self._log_path, WORKER_LOG_TAIL_LINES)}"
            )

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: the worker cancels and reaps its engine children
        try:
            code = self.proc.wait(WORKER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(WORKER_STOP_TIMEOUT_S)
        self._pump_thread.join(WORKER_PUMP_JOIN_S)  # its last lines reach worker.log
        return code


def banner(
    layout: Layout,
    cfg: RunnerConfig,
    worker_pid: int,
    resumed: bool,
    time_scale: float | None,
    where: str | None = None,
    console: tuple[str, str] | None = None,
) -> str:
    credentials = layout.credentials_path
    store = "resumed the store" if resumed else "created a new store"
    lines = [
        f"{PREFIX}: data in {layout.data_dir} ({store})",
        *([f"  data dir:    {where} (--data-dir DIR to choose another)"] if where else []),
        *(f"  note: {note}" for note in layout.notes),
        *([f"  time scale:  {time_scale}x (testing only)"] if time_scale is not None else []),
        f"  voter:       raft {cfg.own_addr} (single voter), admission {cfg.admission_addr}",
        f"  management:  {layout.management_addr} (loopback only; operator, recovery and admin "
        "bearer)",
        f"  worker:      {cfg.remote.url.url} (pid {worker_pid})",
        *(
            [
                f"  console:     {console[0]} (loopback; the token is "
                f"{cfg.console.bearer_env if cfg.console else 'console.bearer_env'} in the "
                "credentials file)",
                f"  log in:      {console[1]}",
                "               (one use, within 10 minutes; afterwards log in with the token)",
            ]
            if console is not None
            else []
        ),
        f"  credentials: {credentials} (mode 0600; never printed; it also exports "
        "APPLIANCE_MANAGEMENT_ADDR)",
        f"  logs:        {layout.data_dir / 'runner.log'}, {layout.data_dir / 'worker.log'}",
        "  demo schedule 'hello': every minute (* * * * * UTC), JavaScript that logs a line",
        "  status from another shell:",
        f"    . {shlex.quote(str(credentials))}",
        f"    {self_command()} admin status",
        '  type {"action":"list"} here for the state; Ctrl-C stops both',
    ]
    return "\n".join(lines)


def run_quickstart(
    data_dir_text: str | None,
    stdin: TextIO,
    stdout: TextIO,
    *,
    time_scale: float | None = None,
    environ: Mapping[str, str] | None = None,
    stderr: TextIO | None = None,
) -> int:
    err = stderr or sys.stderr

    def fail(message: str, code: int) -> int:
        print(f"{PREFIX}: {message}", file=err, flush=True)
        return code

    try:
        clock = make_clock(time_scale, os.environ if environ is None else environ)
    except ValueError as exc:
        return fail(str(exc), 2)
    where = None
    if data_dir_text:
        data_dir = Path(data_dir_text).resolve()
    else:
        found, where = default_data_dir(Path.cwd(), os.environ if environ is None else environ)
        data_dir = found.resolve()
    try:
        layout = prepare(data_dir, datetime.now(UTC))
        cfg = load_runner_config(layout.runner_path)
        credentials = resolve_runner_credentials(cfg, layout.credentials)
    except QuickstartError as exc:
        return fail(str(exc), 1)
    except InvalidConfig as exc:
        for path, message in exc.problems:
            print(f"{PREFIX}: {data_dir / RUNNER_FILE}: {path}: {message}", file=err)
        return fail(f"fix or remove {data_dir} and run again", 2)
    resumed = Path(cfg.data_dir).exists()
    stop = _Stop()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with contextlib.ExitStack() as stack:
            worker_log = stack.enter_context(
                RotatingLogFile(data_dir / "worker.log", LOG_FILE_BYTES)
            )
            runner_log = stack.enter_context(
                RotatingLogFile(data_dir / "runner.log", LOG_FILE_BYTES)
            )
            worker = WorkerChild(layout, worker_log)
            stack.callback(worker.stop)  # runs after the voter has stopped (LIFO)
            try:
                worker.wait_ready(stop.requested)
            except QuickstartError as exc:
                return fail(str(exc), 1)
            if stop.requested.is_set():
                return fail("stopped during start-up", 0)
            try:
                store = RunnerStore.create_or_open(
                    cfg.data_dir,
                    contract=sealed_contract(cfg),
                    contract_digest=contract_digest(cfg),
                )
            except StoreError as exc:
                return fail(f"cannot open the store in {cfg.data_dir}: {exc}", 1)
            observer = WorkerClient(cfg.remote.url.url, credentials.worker)
            stack.callback(observer.close)
            terminal = LockedStream(stdout)
            console = Console(runner_log, terminal, observer.observe)  # type: ignore[arg-type]
            stack.callback(console.close)  # after the voter: its last outcomes are printed
            log = DecisionLog(cfg.node_id, console)  # type: ignore[arg-type]
            process: RunnerProcess | None = None
            try:
                process = RunnerProcess(cfg, credentials, store, clock, log)
                process.start()
            except Exception as exc:
                if process is not None:  # undo what did start; parts that did not may complain
                    with contextlib.suppress(Exception):
                        process.stop(drain_s=0.0)
                store.close()
                return fail(f"cannot start the voter: {exc}", 1)
            stop.process = process
            if stop.requested.is_set():
                process.stopping.set()
            web = process.console
            # The login link's nonce is printed here, once, and never logged (docs/console.md).
            console_lines = None if web is None else (web.url, web.login_link())
            print(
                banner(layout, cfg, worker.proc.pid, resumed, time_scale, where, console_lines),
                file=stdout,
                flush=True,
            )
            console.release()
            threading.Thread(
                target=read_commands, args=(process, stdin, terminal), name="stdin", daemon=True
            ).start()
            wait_for_stop(process.stopping)
            notice = drain_notice(open_occurrences(process.runner), DRAIN_S)
            print(f"{PREFIX}: {notice}", file=stdout, flush=True)
            process.stop()
            print(
                f"{PREFIX}: the voter stopped; stopping the worker (a script still running is "
                f"cancelled; up to {WORKER_STOP_TIMEOUT_S:g} s)",
                file=stdout,
                flush=True,
            )
        print(f"{PREFIX}: stopped", file=stdout, flush=True)
        return 1 if process.fatal is not None else 0
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
