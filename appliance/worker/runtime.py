"""Running the worker process: start-up order, the listener, and shutdown.

Theory of operation, start-up in this order (each step fails closed with a clear message):

1. config (``--config PATH`` or ``MCP_SCHEDULED_WORKER_CONFIG``), credentials from the named
   environment variables, the testing-only crash hook (refused without ``APPLIANCE_TESTING=1``);
2. open the worker store: this records a NEW incarnation id;
3. kill the engine children recorded by earlier incarnations (they normally died with their
   parent; this is the backstop), then forget them;
4. mark executions that earlier incarnations left unfinished as ``lost``;
5. start the engine (children are recorded durably before they can run anything), the service
   and the HTTP listener; print one JSON line ``{"event": "ready", ...}`` on stdout.

SIGHUP reads the config file again and takes a changed ``admission_urls``
(appliance.worker.reload: only that field; a file that changes another, does not validate, or is
not a regular file is refused and logged, and the worker keeps the list it had). The reload runs
on a thread of its own, so a file that blocks its reader never keeps SIGTERM from stopping the
worker. The egress policy is read once, at start-up (step 1: a policy that does not load stops the
worker with its file and line); SIGHUP does not read it again, and a changed ``egress`` section is
refused like any other field. SIGTERM/SIGINT stop the listener first
(no new work), then the engine (running executions are cancelled and their children reaped,
recorded as ``cancelled``/"engine shutdown"), then the store. With ``metrics_addr`` a second
loopback listener serves ``GET /metrics`` (worker bearer; appliance.worker.metrics_routes): engine
outcomes, pool pressure and store sizes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, TextIO

from appliance.config.credentials import WorkerCredentials, resolve_worker_credentials
from appliance.config.urls import Origin
from appliance.config.worker import WORKER_CONFIG_ENV, WorkerConfig, load_worker_config
from appliance.core.errors import InvalidConfig
from appliance.egress.handoff import EgressHandoff, prepare_egress
from appliance.engine import Engine, SystemClock, kill_recorded_children
from appliance.engine.clock import Clock
from appliance.engine.model import OUTPUT_LIMIT_BYTES_MAX
from appliance.http import HttpClient, HttpServer
from appliance.http.direct_server import DirectServer
from appliance.http.tls import listener_context, origin_client_context, plain_listener_context
from appliance.metrics.worker import WorkerMetrics
from appliance.signal_wait import wait_for_stop
from appliance.store.worker_store import WorkerStore
from appliance.worker.admission import AdmissionClient
from appliance.worker.child_pids import ChildPidFile
from appliance.worker.crash import CrashHook
from appliance.worker.metrics_routes import METRICS_BODY_BYTES_MAX, create_worker_metrics_app
from appliance.worker.reload import BackgroundReload, reloaded_admission_urls
from appliance.worker.routes import BODY_BYTES_MAX, create_worker_app
from appliance.worker.service import WorkerService, now_ms_of

log = logging.getLogger("appliance.worker")

ENGINE_SHUTDOWN_SECONDS: Final = 10.0
# The listener serves each connection on its own thread (appliance/http/direct_server.py): an
# exec holds its connection through its permit request and its fsyncs, and the owner sends up to
# its task pool's 64 at once (runner/loop.py TASK_THREADS), each with its observations. This is
# the bound on connections (and threads), with room for a connection flood to compete for.
WORKER_CONNECTIONS_MAX: Final = 512


@dataclass(frozen=True)
class Settings:
    config: WorkerConfig
    credentials: WorkerCredentials
    crash: CrashHook
    # The egress section loaded and checked (policy, CA, credential values), for the engine's
    # children; None without an ``egress`` section (scripts have no fetch).
    egress: EgressHandoff | None = None


def load_settings(
    environ: Mapping[str, str], config_path: str | None, *, with_egress: bool = True
) -> Settings:
    """Everything the worker needs from outside, validated; ``InvalidConfig`` lists problems.

    ``with_egress=False`` (SIGHUP) leaves the egress policy alone: it is loaded once, at start.
    """
    config = load_worker_config(environ, config_path)
    if config.engine.output_limit_bytes > OUTPUT_LIMIT_BYTES_MAX:
        raise InvalidConfig(
            [
                (
                    "engine.output_limit_bytes",
                    f"the engine captures at most {OUTPUT_LIMIT_BYTES_MAX} bytes of output",
                )
            ]
        )
    credentials = resolve_worker_credentials(config, environ)
    egress = None
    if config.egress is not None and with_egress:
        egress = prepare_egress(
            config.egress, environ, own_credentials=(credentials.bearer, credentials.admission)
        )
    return Settings(config, credentials, CrashHook.from_environ(environ), egress)


class Worker:
    """A started worker: store, engine, service and listener. ``stop()`` undoes ``start()``."""

    def __init__(self, settings: Settings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.store: WorkerStore | None = None
        self.engine: Engine | None = None
        self.server: DirectServer | None = None
        self.metrics = WorkerMetrics()
        self.metrics_server: HttpServer | None = None
        self._client: HttpClient | None = None
        self._admission: AdmissionClient | None = None
        self.lost: list[str] = []
        self.killed_children: list[int] = []
        self._stopping = False

    def start(self) -> Worker:
        config = self.settings.config
        self.store = WorkerStore.create_or_open(
            config.data_dir,
            namespace=config.namespace,
            worker_id=config.worker_id,
            now_ms=now_ms_of(self.clock),
        )
        try:
            self._start_rest(config, self.store)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_rest(self, config: WorkerConfig, store: WorkerStore) -> None:
        holder: dict[str, Engine] = {}
        pid_file = ChildPidFile(
            config.data_dir, lambda: holder["engine"].child_pids() if holder else None
        )
        self.killed_children = kill_recorded_children(pid_file.read())
        if self.killed_children:
            log.warning(
                "killed engine children left by an earlier incarnation: %s", self.killed_children
            )
        pid_file.replace([])
        # Only with an egress section: the engine hands it to its children (over their stdin).
        egress_option = {} if self.settings.egress is None else {"egress": self.settings.egress}
        self.engine = Engine(
            max_concurrent=config.engine.max_concurrent,
            max_queued=config.engine.max_queued,
            output_limit_bytes=config.engine.output_limit_bytes,
            clock=self.clock,
            on_child_spawned=pid_file.record,
            executions_per_child=config.engine.executions_per_child,
            **egress_option,
        )
        holder["engine"] = self.engine
        self.metrics.attach(self.engine, store.path)
        self._client = HttpClient(
            idle_connections_per_origin_max=0, ssl_context=origin_client_context(config.tls)
        )
        admission = self._admission = AdmissionClient(
            config.admission_urls,
            self.settings.credentials.admission,
            store.incarnation_id,
            self._client,
        )
        service = WorkerService(
            config=config,
            store=store,
            engine=self.engine,
            admission=admission,
            clock=self.clock,
            crash=self.settings.crash,
        )
        self.lost = service.mark_lost_executions()
        self.metrics.record_lost(self.lost)
        app = create_worker_app(service, config.namespace, self.settings.credentials.bearer)
        self.server = DirectServer.for_app(
            app,
            host=config.listen_addr.host,
            port=config.listen_addr.port,
            name="worker",
            body_bytes_max=BODY_BYTES_MAX,
            connection_limit=WORKER_CONNECTIONS_MAX,
            error_extra={"protocol": 1},
            ssl_context=listener_context(config.tls),
        ).start()
        if config.metrics_addr is not None:
            self.metrics_server = HttpServer(
                create_worker_metrics_app(self.metrics.registry, self.settings.credentials.bearer),
                host=config.metrics_addr.host,
                port=config.metrics_addr.port,
                name="worker metrics",
                body_bytes_max=METRICS_BODY_BYTES_MAX,
                ssl_context=plain_listener_context(config.tls),
            ).start()

    def reload(self, environ: Mapping[str, str], config_path: str | None) -> bool:
        """SIGHUP: take ``admission_urls`` from the config file again; True when it was taken
        (changed or not). Anything else is logged and changes nothing."""
        if config_path is None:
            log.warning(
                "SIGHUP: the config came from %s, not from a file: nothing to reload",
                WORKER_CONFIG_ENV,
            )
            return False
        if self._admission is None:
            return False
        try:
            fresh = load_settings(environ, config_path, with_egress=False)
            urls = reloaded_admission_urls(self.settings.config, fresh.config)
        except InvalidConfig as exc:
            for path, message in exc.problems:
                log.warning("SIGHUP: config not reloaded: %s: %s", path, message)
            return False
        if self._stopping:  # the file took longer to read than the worker took to stop
            return False
        before = self._admission.urls
        self._admission.replace_urls(urls)
        self.settings = dataclasses.replace(self.settings, config=fresh.config)
        if urls == before:
            log.info("SIGHUP: config reloaded, admission_urls unchanged")
        else:
            log.info(
                "SIGHUP: admission_urls reloaded: %s (were %s)",
                _urls_text(urls),
                _urls_text(before),
            )
        return True

    def stop(self) -> None:
        """Listener, engine, admission client, store, in that order. A step that fails is logged
        and the next ones still run: a listener that would not stop must not leave the engine's
        threads running (they would keep the process alive) or the data_dir locked."""
        self._stopping = True
        if self.metrics_server is not None:
            server, self.metrics_server = self.metrics_server, None
            _stop_step("the metrics listener", server.stop)
        if self.server is not None:
            server, self.server = self.server, None
            _stop_step("the listener", server.stop)
        if self.engine is not None:
            engine, self.engine = self.engine, None
            _stop_step("the engine", lambda: _shut_engine_down(engine))
        if self._client is not None:
            client, self._client = self._client, None
            _stop_step("the admission client", client.close)
        if self.store is not None:
            store, self.store = self.store, None
            _stop_step("the store", store.close)


def _urls_text(urls: tuple[Origin, ...]) -> str:
    return ", ".join(origin.url for origin in urls)


def _shut_engine_down(engine: Engine) -> None:
    if not engine.shutdown(ENGINE_SHUTDOWN_SECONDS):
        log.error("engine shutdown left work behind")


def _stop_step(what: str, step: Callable[[], object]) -> None:
    try:
        step()
    except Exception:
        log.exception("stopping %s failed; stopping the rest anyway", what)


def run_worker(environ: Mapping[str, str], config_path: str | None, out: TextIO) -> int:
    """The ``appliance worker`` process body; returns the exit code."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        settings = load_settings(environ, config_path)
    except InvalidConfig as exc:
        for path, message in exc.problems:
            print(f"appliance worker: config: {path}: {message}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # The handler only asks; between its waits the main thread starts the reload on a thread of
    # its own (BackgroundReload), so a file that blocks its reader never holds up a stop.
    reload_asked = threading.Event()
    signal.signal(signal.SIGHUP, lambda *_: reload_asked.set())
    worker = Worker(settings)
    reloads = BackgroundReload(lambda: worker.reload(environ, config_path))
    try:
        worker.start()
    except Exception as exc:
        print(f"appliance worker: cannot start: {exc}", file=sys.stderr)
        return 1
    try:
        store, server = worker.store, worker.server
        if store is None or server is None:
            raise RuntimeError("the worker did not start")
        ready = {
            "event": "ready",
            "addr": f"{server.host}:{server.port}",
            "metrics_addr": None
            if worker.metrics_server is None
            else f"{worker.metrics_server.host}:{worker.metrics_server.port}",
            "incarnation": store.incarnation_id,
            "lost": worker.lost,
            "killed_children": worker.killed_children,
        }
        print(json.dumps(ready), file=out, flush=True)

        def between_waits() -> None:
            if reload_asked.is_set():
                reload_asked.clear()
                reloads.request()

        wait_for_stop(stop, between=between_waits)
        print(stop_notice(worker.engine), file=sys.stderr, flush=True)
    finally:
        worker.stop()
    return 0


def stop_notice(engine: Engine | None) -> str:
    """What a stopping worker says on Ctrl-C/SIGTERM: what it stops, and how long it may take."""
    if engine is None:
        return "appliance worker: stopping"
    stats = engine.stats()
    if stats.running == 0 and stats.queued == 0:
        return "appliance worker: stopping: no execution is running"
    return (
        f"appliance worker: stopping: {stats.running} running and {stats.queued} queued "
        f'execution(s) are cancelled (recorded cancelled, "engine shutdown"); waiting up to '
        f"{ENGINE_SHUTDOWN_SECONDS:g} s for their engine children to be reaped"
    )
