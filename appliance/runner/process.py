"""``appliance runner CONFIG.json``: start-up, the stdin command reader, and graceful shutdown.

Start-up, in this order, each step failing closed with a message that names the problem:

1. ``--time-scale`` (and the chaos suite's ``--clock-offset-seconds`` and
   ``--peer-route``) are refused unless ``APPLIANCE_TESTING=1`` (exit 2);
2. the config is loaded and validated (every problem printed with its field path, exit 2), the
   credentials are resolved from the named variables (missing or reused: exit 2), and a grant
   expiry that is past or near is warned about;
3. the store is opened with the sealed contract (``migrations_guard`` refusal: exit 1);
4. the Raft member (cluster listener, peer transport, replication — single voter without peers),
   the admission listener and the runner loop start; a ``started`` log line names the addresses.

Operator commands are read from stdin, one JSON object per line, each answered with one JSON
line on stdout; EOF stops reading and leaves scheduling running. SIGINT/SIGTERM drain: scheduling
stops, admission stays available while observation and cancellation tasks finish (bounded by
``DRAIN_S``), then the listeners and the store close and the process exits 0. A fatal error of
the Raft driver stops the process with exit 1.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, TextIO

from appliance.capabilities import promotion_refusal
from appliance.clock import OffsetClock, RunnerClock, ScaledClock, SystemClock
from appliance.commands.operator import OperatorError, parse_operator
from appliance.config.addresses import HostPort
from appliance.config.contract import contract_digest
from appliance.config.credentials import (
    RunnerCredentials,
    credential_problem,
    resolve_runner_credentials,
)
from appliance.config.replication import EtcdBackend
from appliance.config.rfc3339 import format_utc
from appliance.config.runner import Peer, RunnerConfig, load_runner_config
from appliance.core import state as core
from appliance.core.errors import InvalidConfig
from appliance.http.tls import listener_context, origin_client_context
from appliance.logs import log_stream
from appliance.metrics import DecisionLogTee, RunnerMetrics, TimedReplication
from appliance.owner.contract_state import remote_in_force
from appliance.replication.etcd_member import EtcdMember
from appliance.replication.raft_member import RaftMember
from appliance.runner.admission import ADMISSION_ROLE_PREFIX, admission_server
from appliance.runner.contract_startup import ContractConflict, genesis_config, startup_contract
from appliance.runner.drain_notice import drain_notice, open_occurrences
from appliance.runner.logs import DecisionLog
from appliance.runner.loop import Runner
from appliance.runner.machine import Accepted, Machine
from appliance.runner.worker_pool import WorkerPool
from appliance.secret import Secret
from appliance.signal_wait import wait_for_stop
from appliance.store.errors import StoreError
from appliance.store.runner_store import RunnerStore

DRAIN_S: Final = 10.0
EXPIRY_WARNING_S: Final = 24 * 3600
TESTING_ENV: Final = "APPLIANCE_TESTING"


def _fail(stream: TextIO, message: str) -> None:
    print(f"appliance runner: {message}", file=stream, flush=True)


def make_clock(
    time_scale: float | None, environ: Mapping[str, str], *, offset_s: float | None = None
) -> RunnerClock:
    """The injected wall clock; ``ValueError`` when scaling or an offset is asked for outside
    testing."""
    if offset_s is not None and environ.get(TESTING_ENV) != "1":
        raise ValueError(f"--clock-offset-seconds is for tests only: it needs {TESTING_ENV}=1")
    if time_scale is None:
        clock: RunnerClock = SystemClock()
    elif environ.get(TESTING_ENV) != "1":
        raise ValueError(f"--time-scale is for tests only: it needs {TESTING_ENV}=1")
    else:
        clock = ScaledClock(time_scale)
    return clock if offset_s is None else OffsetClock(clock, offset_s)


@dataclasses.dataclass(frozen=True)
class NetworkOverride:
    """Tests only (the chaos suite's fault-injecting proxies): peers are dialled at
    ``peer_routes`` (id → address) instead of their configured addresses, so each directed link
    can go through its own proxy. The sealed contract, and so the digest every message carries,
    stays the one of the configuration file."""

    peer_routes: Mapping[str, HostPort] = dataclasses.field(default_factory=dict)

    def member_config(self, cfg: RunnerConfig) -> RunnerConfig:
        unknown = set(self.peer_routes) - {peer.node_id for peer in cfg.peers}
        if unknown:
            raise ValueError(f"--peer-route names no configured peer: {sorted(unknown)}")
        peers = tuple(Peer(p.node_id, self.peer_routes.get(p.node_id, p.addr)) for p in cfg.peers)
        return dataclasses.replace(cfg, peers=peers)


def expiry_warning(cfg: RunnerConfig, now_s: float) -> str | None:
    left_s = cfg.remote.expires_at.timestamp() - now_s
    when = format_utc(cfg.remote.expires_at)
    if left_s <= 0:
        return f"remote.expires_at ({when}) has passed: no permit will be granted"
    if left_s <= EXPIRY_WARNING_S:
        return f"remote.expires_at ({when}) is less than 24 hours away"
    return None


class RunnerProcess:
    """Everything one voter runs; ``start()`` then ``stop()``."""

    def __init__(
        self,
        cfg: RunnerConfig,
        credentials: RunnerCredentials,
        store: RunnerStore,
        clock: RunnerClock,
        log: DecisionLog,
        *,
        network: NetworkOverride | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        environ = {} if environ is None else environ
        self.cfg = cfg
        self.store = store
        self.log = log
        self.fatal: BaseException | None = None
        self.stopping = threading.Event()
        self.machine = Machine(store, cfg.limits, on_fatal=self._on_fatal)
        member_cls = EtcdMember if isinstance(cfg.replication, EtcdBackend) else RaftMember
        # Both backends install a snapshot through the machine (issue 19).
        self.member = member_cls(
            cfg if network is None else network.member_config(cfg),
            credentials,
            store,
            self.machine.apply,
            contract_digest=contract_digest(cfg),
            applied_index=self.machine.applied_index,
            on_fatal=self._on_fatal,
            restore=self.machine.restore,
        )
        # One client per worker of the fleet in force (issue 33), each at the URL in force (an
        # ``amend_remote`` or ``add_worker`` takes effect for the next call).
        self.worker = WorkerPool(
            lambda: self.machine.read(lambda st: remote_in_force(cfg.remote, st)),
            credentials,
            environ,
            ssl_context=origin_client_context(cfg.tls),
        )
        # Event metrics (docs/operations.md): the loop's log and replication seams, wrapped.
        self.metrics = RunnerMetrics()
        self.runner = Runner(
            cfg=cfg,
            machine=self.machine,
            replication=TimedReplication(self.member.replication, self.metrics),
            worker=self.worker,
            clock=clock,
            log=DecisionLogTee(log, self.metrics),
            gate=self.member.capabilities.refusal,
            gate_refresh=self.member.capabilities.refresh,
            promotion_check=self._promotion_refusal,
            # add_worker names credential variables every voter must hold (owner/fleet_args.py).
            check_env=lambda name: credential_problem(name, environ, credentials.known_roles()),
        )
        self._environ = environ
        self._credentials = credentials
        self.admission = admission_server(
            self.runner.admit,
            self._admission_roles(),
            host=cfg.admission_addr.host,
            port=cfg.admission_addr.port,
            name=f"admission {cfg.node_id}",
            ssl_context=listener_context(cfg.tls),
        )
        self.machine.on_applied(self._fleet_changed)
        self.management: Any = None
        if cfg.management is not None:
            from appliance.management.wiring import ManagementService

            self.management = ManagementService(
                cfg,
                credentials,
                self.runner,
                metrics=self.metrics,
                store=store,
                limits=lambda: self.machine.read(lambda st: st.limits),  # amend_limits
                # A 409 names the owner's listener as the owner reports it (issue 35, item 4).
                management_addrs=self.member.capabilities.management_addr,
            )
        self.console: Any = None
        if cfg.console is not None:  # extension (issue 34): the web console
            from appliance.console import ConsoleService

            self.console = ConsoleService(
                cfg,
                credentials,
                self.runner,
                observability=None if self.management is None else self.management.observability,
                store=store,
                management_addrs=self.member.capabilities.management_addr,
            )

    def _promotion_refusal(self, learner: str) -> str | None:
        """Why ``learner`` may not be promoted yet: it is asked for its report now, which must
        name every kind the log committed (appliance/runner/committed_kinds.py)."""
        report = self.member.capabilities.report_of(learner, ask=True)
        return promotion_refusal(learner, report, self.machine.committed_kinds.required())

    def _admission_roles(self) -> dict[str, Any]:
        """Every credential this voter knows, with the own admission credential of each fleet
        worker in force (a worker added since the start resolves it from this environment)."""
        roles: dict[str, Any] = dict(self._credentials.known_roles())
        remote = self.machine.read(lambda st: remote_in_force(self.cfg.remote, st))
        for spec in remote.fleet:
            role = f"{ADMISSION_ROLE_PREFIX}{spec.worker_id}"
            if spec.admission_bearer_env is None or role in roles:
                continue
            value = self._environ.get(spec.admission_bearer_env)
            if value:
                roles[role] = Secret(value)
        return roles

    def _fleet_changed(self, _index: int, command: Any, result: Any) -> None:
        """A committed fleet amendment: the admission route accepts the credentials of the
        fleet in force from the next request on (``Machine.on_applied``, the applying thread)."""
        if not isinstance(command, core.AddWorker | core.RemoveWorker):
            return
        if not isinstance(result, Accepted):
            return
        gate = getattr(self.admission.app, "bearer_gate", None)
        if gate is None:
            return
        try:
            roles = self._admission_roles()
            accepted = {"admission"} | {r for r in roles if r.startswith(ADMISSION_ROLE_PREFIX)}
            gate.replace_credentials(roles, accepted)
        except ValueError as exc:  # a reused credential: keep the old table, say why
            self.log.emit("admission_credentials_kept", error=str(exc))

    def _on_fatal(self, exc: BaseException) -> None:
        self.fatal = exc
        self.log.emit("fatal", error=repr(exc))
        self.stopping.set()

    def start(self) -> None:
        self.member.start()
        self.admission.start()
        self.runner.start()
        if self.management is not None:
            self.management.start()
        if self.console is not None:
            self.console.start()
        self.log.emit(
            "started",
            management_addr=None if self.management is None else str(self.cfg.management.addr),
            console_url=None if self.console is None else self.console.url,
            cluster_addr=str(self.cfg.own_addr),
            admission_addr=f"{self.admission.host}:{self.admission.port}",
            voters=sorted(self.cfg.voters),
            time_scale=self.runner.clock.time_scale,
        )

    def stop(self, drain_s: float = DRAIN_S) -> None:
        # No new operator commands; admission stays up while the loop drains its tasks.
        if self.console is not None:
            self.console.stop()
        if self.management is not None:
            self.management.stop()
        self.runner.drain_and_stop(drain_s)
        self.admission.stop()
        self.member.stop()
        if not self.machine.close():  # the applied transitions still queued for the checkpoint
            self.log.emit("checkpoint_not_flushed", applied_index=self.machine.applied_index)
        self.worker.close()
        self.store.close()
        self.log.emit("stopped")


def answer_line(runner: Runner, line: str) -> dict[str, Any]:
    """One operator command line in, one reply out (parse errors are replies too)."""
    try:
        return runner.operator(parse_operator(line))
    except OperatorError as err:
        return err.reply()


def read_commands(process: RunnerProcess, stdin: TextIO, stdout: TextIO) -> None:
    """One JSON command per line in, one JSON reply per line out; EOF just returns."""
    lock = threading.Lock()
    for line in stdin:
        if process.stopping.is_set():
            return
        if not line.strip():
            continue
        reply = answer_line(process.runner, line)
        text = json.dumps(reply, separators=(",", ":"), ensure_ascii=False, default=str)
        with lock:
            try:
                stdout.write(text + "\n")
                stdout.flush()
            except (OSError, ValueError):
                return


def run_runner(
    config_path: str,
    *,
    time_scale: float | None,
    environ: Mapping[str, str],
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
    clock_offset_s: float | None = None,
    network: NetworkOverride | None = None,
    log_format: str = "json",
) -> int:
    try:
        clock = make_clock(time_scale, environ, offset_s=clock_offset_s)
        if network is not None and environ.get(TESTING_ENV) != "1":
            raise ValueError(f"--peer-route is for tests only: it needs {TESTING_ENV}=1")
    except ValueError as err:
        _fail(stderr, str(err))
        return 2
    try:
        cfg = load_runner_config(config_path)
        credentials = resolve_runner_credentials(cfg, environ)
    except InvalidConfig as exc:
        for path, message in exc.problems:
            _fail(stderr, f"config: {path}: {message}")
        return 2
    log = DecisionLog(cfg.node_id, log_stream(stderr, log_format))  # appliance.logs schema
    # The genesis contract or any committed amendment of it (appliance/runner/contract_startup.py):
    # the store is opened with the genesis, the owner runs the amendment in force.
    try:
        startup = startup_contract(cfg)
    except ContractConflict as exc:
        _fail(stderr, f"cannot open the store in {cfg.data_dir}: {exc}")
        return 1
    cfg = genesis_config(cfg, startup.contract)
    try:
        store = RunnerStore.create_or_open(
            cfg.data_dir, contract=startup.contract, contract_digest=startup.digest
        )
    except StoreError as exc:
        _fail(stderr, f"cannot open the store in {cfg.data_dir}: {exc}")
        return 1
    try:
        process = RunnerProcess(
            cfg, credentials, store, clock, log, network=network, environ=environ
        )
        in_force = process.machine.read(lambda st: remote_in_force(cfg.remote, st))
        amendment = process.machine.read(core.amendment_index)
        log.emit(
            "contract_in_force",
            amendment=amendment,
            config_amendment=startup.config_amendment,
            grant_expires_at=format_utc(in_force.expires_at),
            message=startup.message(),
        )
        warning = expiry_warning(dataclasses.replace(cfg, remote=in_force), clock.now_s())
        if warning is not None:
            log.emit("grant_expiry_warning", message=warning)
        process.start()
    except Exception as exc:
        store.close()
        _fail(stderr, f"cannot start: {exc}")
        return 1
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: process.stopping.set())
    reader = threading.Thread(
        target=read_commands, args=(process, stdin, stdout), name="stdin", daemon=True
    )
    reader.start()
    wait_for_stop(process.stopping)
    log.emit("shutdown", at=format_utc(datetime.fromtimestamp(int(clock.now_s()), UTC)))
    # Said to the operator in words (stderr), not only as a log event: what the drain waits for.
    print(
        f"appliance runner: {drain_notice(open_occurrences(process.runner), DRAIN_S)}",
        file=stderr,
        flush=True,
    )
    process.stop()
    return 1 if process.fatal is not None else 0


def main_stdio(
    config_path: str,
    time_scale: float | None,
    environ: Mapping[str, str],
    *,
    clock_offset_s: float | None = None,
    network: NetworkOverride | None = None,
    log_format: str = "json",
) -> int:
    return run_runner(
        config_path,
        time_scale=time_scale,
        environ=environ,
        stdin=sys.stdin,
        stdout=sys.stdout,
        stderr=sys.stderr,
        clock_offset_s=clock_offset_s,
        network=network,
        log_format=log_format,
    )
