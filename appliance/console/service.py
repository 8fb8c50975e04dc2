"""``ConsoleService``: the web console of one voter — its listener, live view and actions.

Wiring (the runner process builds it when the config has a ``console`` section):

- the listener: the shared waitress server (appliance/http) on the loopback ``console.addr``,
  with the takeover subclasses (appliance/console/takeover.py) and, with ``console.tls``, this
  voter's certificate; it refuses a non-loopback address at construction too;
- the live view: the runner's change feed (``runner.changes``, the one ``GET
  /scheduler/v1/events`` and ``appliance admin watch`` read) → ``ChangeFeedSource`` (one reader
  for every page) → ``EventHub`` → ``Pusher``;
- the actions (``console.actions``): their own bounded queue (``ACTION_QUEUE_SLOTS``) and one
  forwarding thread into ``Runner.operator``, exactly like management's (``runner_handler``),
  so commands reach the one runner loop; without ``actions`` no queue exists at all;
- the reads: the voter's machine (local view), its clock, its worker client (reports and
  output) and its observability (the overview's health document and warnings).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from appliance.config.addresses import is_loopback_host
from appliance.config.credentials import RunnerCredentials
from appliance.config.runner import RunnerConfig
from appliance.console.app import FORM_BYTES_MAX, ConsoleParts, create_console_app
from appliance.console.feed import ChangeFeedSource, EventHub, LiveSource
from appliance.console.pusher import Pusher, Stream
from appliance.console.sessions import SessionBook
from appliance.console.takeover import TakeoverServer
from appliance.http import HttpServer
from appliance.http.auth import CredentialTable
from appliance.http.tls import plain_listener_context
from appliance.management.gateway import BoundedCommandQueue, ThreadedConsumer
from appliance.management.wiring import runner_handler, voter_observability
from appliance.metrics.voter import observe_execution

ACTION_QUEUE_SLOTS: Final = 16
HTTP_THREADS: Final = 8


class NotLoopback(ValueError):
    """The console address is not a loopback IP literal."""


class LiveRunnerView:
    """The console's reads of a live ``Runner`` (no round trip through its loop)."""

    def __init__(self, runner: Any, observability: Any) -> None:
        self._runner = runner
        self._observability = observability

    def read(self, fn: Any) -> Any:
        return self._runner.machine.read(fn)

    def now_s(self) -> float:
        return float(self._runner.clock.now_s())

    def observe(self, execution_id: str) -> tuple[str | None, Any]:
        observed = observe_execution(self._runner, execution_id)  # a fleet: its worker
        return observed.status, (observed.document if observed.status else observed.detail)

    def health(self) -> dict[str, Any]:
        return dict(self._observability.health().body)

    def limits(self) -> Any:
        return self._runner.machine.read(lambda st: st.limits)


def _feed_source(runner: Any) -> ChangeFeedSource:
    feed = getattr(runner, "changes", None)
    if feed is None:
        raise ValueError("the runner keeps no change feed: the console's live view reads it")
    return ChangeFeedSource(feed, runner.machine.read, runner.worker)


def credential_table(credentials: RunnerCredentials) -> CredentialTable:
    """Every credential the voter knows, so another role's token is refused like a wrong one."""
    return CredentialTable(
        {
            "console": credentials.console,
            "operator": credentials.operator,
            "recovery": credentials.recovery,
            "admin": credentials.admin,
            "worker": credentials.worker,
            "admission": credentials.admission,
            "cluster": credentials.cluster,
        }
    )


class ConsoleService:
    def __init__(
        self,
        cfg: RunnerConfig,
        credentials: RunnerCredentials,
        runner: Any,
        *,
        observability: Any = None,
        store: Any = None,
        source: LiveSource | None = None,
        pusher: Pusher | None = None,
        management_addrs: Callable[[str], str | None] | None = None,
    ) -> None:
        console = cfg.console
        if console is None:
            raise ValueError("the config has no console section")
        if credentials.console is None:
            raise ValueError("console.bearer_env was not resolved")
        if not is_loopback_host(console.addr.host):
            raise NotLoopback(f"console.addr must be a loopback address, got {console.addr}")
        self._own_observability = observability is None
        self.observability = observability or voter_observability(
            cfg, credentials, runner, store=store
        )
        self.sessions = SessionBook()
        self.source = source or _feed_source(runner)
        self.pusher = pusher or Pusher(
            session_alive=lambda sid: self.sessions.alive(sid, time.time()),
            on_close=self._stream_closed,
        )
        self.hub = EventHub(self.pusher.publish)
        self.gateway: BoundedCommandQueue | None = None
        self.consumer: ThreadedConsumer | None = None
        if console.actions:
            self.gateway = BoundedCommandQueue(ACTION_QUEUE_SLOTS)
            self.consumer = ThreadedConsumer(
                self.gateway, runner_handler(runner, cfg.voters, management_addrs)
            )
        self.parts = ConsoleParts(
            node_id=cfg.node_id,
            view=LiveRunnerView(runner, self.observability),
            sessions=self.sessions,
            credentials=credential_table(credentials),
            pusher=self.pusher,
            hub=self.hub,
            source=self.source,
            gateway=self.gateway,
            tls=console.tls,
        )
        self.server = HttpServer(
            create_console_app(self.parts),
            host=console.addr.host,
            port=console.addr.port,
            name="console",
            body_bytes_max=FORM_BYTES_MAX,
            threads=HTTP_THREADS,
            server_class=TakeoverServer,
            ssl_context=plain_listener_context(cfg.tls) if console.tls else None,
        )
        self.scheme = "https" if console.tls else "http"

    def _stream_closed(self, stream: Stream) -> None:
        if stream.follow is not None:
            self.source.unfollow(stream.follow)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        host = self.server.host
        return f"{self.scheme}://{'[' + host + ']' if ':' in host else host}:{self.port}/"

    def login_link(self, now_s: float | None = None) -> str:
        """A one-time login link (single use, 10 minutes): print it, never log it."""
        nonce = self.sessions.issue_nonce(time.time() if now_s is None else now_s)
        return f"{self.url}login?nonce={nonce}"

    def start(self) -> ConsoleService:
        self.pusher.start()
        self.source.start(self.hub.publish)
        if self.consumer is not None:
            self.consumer.start()
        try:
            self.server.start()
        except Exception:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.server.stop()
        self.source.stop()
        self.pusher.stop()
        if self.consumer is not None:
            self.consumer.stop()
        if self._own_observability:
            self.observability.close()
