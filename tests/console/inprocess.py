"""The console app on the real listener (takeover server, pusher, live source on a real change
feed) over a real ``Machine`` in memory: for tests of the listener itself (TLS, streams)
without processes."""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from typing import Any

from appliance.config.credentials import RunnerCredentials
from appliance.console.app import ConsoleParts, create_console_app
from appliance.console.feed import ChangeFeedSource, EventHub
from appliance.console.pusher import Pusher
from appliance.console.service import credential_table
from appliance.console.sessions import SessionBook
from appliance.console.takeover import TakeoverServer
from appliance.core.limits import Limits
from appliance.http import HttpServer
from appliance.metrics.feed import ChangeFeed
from appliance.owner.worker_answers import ObserveResult
from appliance.runner.machine import Machine, encode_command
from appliance.secret import Secret

TOKEN = "in-process-console-token"


class View:
    """The console's reads of an in-memory machine (no worker: nothing is dispatched here)."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.worker = self
        # execution id -> the worker's document, for the occurrence page (``observe``)
        self.documents: dict[str, dict[str, Any]] = {}

    def read(self, fn: Any) -> Any:
        return self.machine.read(fn)

    def now_s(self) -> float:
        return time.time()

    def observe(self, execution_id: str) -> Any:
        document = self.documents.get(execution_id)
        return ("completed", document) if document is not None else (None, "no such execution")

    def health(self) -> dict[str, Any]:
        counts = {"records": 0, "outstanding": 0, "running": 0, "by_state": {}}
        return {"warnings": [], "voters": [], "ownership": {}, "grant": {}, "counts": counts}

    def limits(self) -> Any:
        return self.machine.read(lambda st: st.limits)


class NoWorker:
    """The live source's worker client here: nothing is dispatched, so nothing is found."""

    def observe(self, execution_id: str) -> ObserveResult:
        return ObserveResult(None, detail="no worker in process")


@dataclass
class Served:
    machine: Machine
    parts: ConsoleParts
    server: HttpServer
    source: ChangeFeedSource
    index: int = 0

    @property
    def port(self) -> int:
        return self.server.port

    def commit(self, command: Any) -> None:
        self.index += 1
        self.machine.apply(self.index, encode_command(command))

    def stop(self) -> None:
        self.server.stop()
        self.source.stop()
        self.parts.pusher.stop()


def serve(*, tls: ssl.SSLContext | None = None, **pusher_limits: Any) -> Served:
    machine = Machine(None, Limits())
    view = View(machine)
    credentials = RunnerCredentials(
        admission=Secret("admission-x"), cluster=Secret("cluster-x"), worker=Secret("worker-x"),
        operator=Secret("operator-x"), console=Secret(TOKEN),
    )  # fmt: skip
    sessions = SessionBook()
    source = ChangeFeedSource(ChangeFeed(machine), machine.read, NoWorker())
    pusher = Pusher(on_close=lambda s: None, **pusher_limits).start()
    hub = EventHub(pusher.publish)
    parts = ConsoleParts(
        node_id="v1",
        view=view,
        sessions=sessions,
        credentials=credential_table(credentials),
        pusher=pusher,
        hub=hub,
        source=source,
        gateway=None,
        tls=tls is not None,
    )
    server = HttpServer(
        create_console_app(parts),
        host="127.0.0.1",
        port=0,
        name="console",
        body_bytes_max=8192,
        server_class=TakeoverServer,
        ssl_context=tls,
    ).start()
    source.start(hub.publish)
    return Served(machine, parts, server, source)
