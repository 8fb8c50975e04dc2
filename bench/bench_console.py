"""The web console's pages and live view with 1,024 schedules and 10,000 occurrences (issue 34).

    .venv/bin/python bench/bench_console.py [REQUESTS]

Serves the real console app (appliance/console) from the real waitress listener with the
takeover server and pusher, over a replicated state held by a real ``Machine`` (no store):
1,024 schedules created with the core's own ``CreateSchedule``, then 10,000 retained records
(mostly finished, ~10 per schedule, a few running) placed in the applied state. Two seams are
fixed rather than live, and said so in the output: the overview's health document (peer and
worker probes are network calls of their own, cached or bounded elsewhere) and the worker's
execution documents on the occurrence page (a loopback GET each in a voter).

Page time: each page is fetched ``REQUESTS`` times, sequentially, over one kept-alive loopback
connection; the time is the client's whole round trip (an upper bound of the server's time).

SSE latency: one ``GET /events`` stream is open; a transition is applied to the machine (the
moment a voter applies a committed entry) and the time until the client has read its
``change`` event is measured, 100 times. The path is the product's: the machine's change
listener, the change feed (``ChangeFeed``), the console's one feed reader, the hub, the pusher.
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appliance.config.addresses import HostPort
from appliance.config.credentials import RunnerCredentials
from appliance.config.runner import ConsoleConfig
from appliance.console.app import ConsoleParts, create_console_app
from appliance.console.feed import ChangeFeedSource, EventHub
from appliance.console.pusher import Pusher
from appliance.console.service import credential_table
from appliance.console.sessions import SessionBook
from appliance.console.takeover import TakeoverServer
from appliance.core import state as core
from appliance.core.limits import Limits
from appliance.core.occurrence import Occurrence, OccurrenceState, TimelineEntry
from appliance.http import HttpServer
from appliance.metrics.feed import ChangeFeed
from appliance.runner.machine import Machine, encode_command
from appliance.secret import Secret
from tests.console.state_samples import definition

S = OccurrenceState
SCHEDULES = 1024
OCCURRENCES = 10_000
T0 = int(time.time()) - 3 * 86400
TOKEN = "bench-console-token-0123456789"
HEALTH: dict[str, Any] = {
    "node": "v1",
    "leader": "v1",
    "voters": [{"node": "v1", "reachable": True, "role": "leader", "term": 3,
                "commit_index": 12000, "applied_index": 12000, "lag_entries": 0, "self": True}],
    "ownership": {"node": "v1", "epoch": 3, "acquired_here": True},
    "grant": {"expires_at": "2099-01-01T00:00:00Z", "seconds_left": 10**9},
    "counts": {"records": OCCURRENCES, "outstanding": 24, "running": 24, "by_state": {}},
    "worker": {"url": "http://127.0.0.1:1", "reachable": True, "authorized": True, "detail": ""},
    "warnings": [],
}  # fmt: skip
DOCUMENT = {
    "status": "completed",
    "result": {"ok": True},
    "error": None,
    "started_at": "2027-01-15T08:00:00.100Z",
    "finished_at": "2027-01-15T08:00:00.350Z",
    "output": {"text": "line\n" * 200, "bytes": 1000, "truncated": False},
}


class View:
    def __init__(self, machine: Machine) -> None:
        self.machine = machine

    def read(self, fn: Any) -> Any:
        return self.machine.read(fn)

    def now_s(self) -> float:
        return time.time()

    def observe(self, execution_id: str) -> tuple[str | None, Any]:
        return "completed", DOCUMENT

    def health(self) -> dict[str, Any]:
        return HEALTH

    def limits(self) -> Any:
        return self.machine.read(lambda st: st.limits)


class Runner:
    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.worker = self

    def observe(self, execution_id: str) -> Any:
        raise RuntimeError("not followed in this benchmark")


def populated() -> Machine:
    limits = Limits(schedules=SCHEDULES, records=65536, outstanding=1024, running=1024)
    machine = Machine(None, limits)
    for i in range(SCHEDULES):
        machine.apply(i + 1, encode_command(core.CreateSchedule(definition(f"job-{i:04d}"), T0)))
    st = machine.state
    for oid in range(1, OCCURRENCES + 1):
        sid = (oid - 1) % SCHEDULES + 1
        due = T0 + 60 * ((oid - 1) // SCHEDULES + 1)
        state = S.RUNNING if oid > OCCURRENCES - 24 else (S.FAILED if oid % 7 == 0 else S.SUCCEEDED)
        timeline = [TimelineEntry(S.PENDING, due, 1, "created"),
                    TimelineEntry(S.RUNNING, due + 1, 1, "claim")]  # fmt: skip
        if state is not S.RUNNING:
            timeline.append(TimelineEntry(state, due + 2 + oid % 5, 1, "completed"))
        st.occurrences[oid] = Occurrence(oid, sid, due, state, timeline=tuple(timeline))
    return machine


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def pages(port: int, count: int) -> list[tuple[str, float, float]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {TOKEN}", "Host": f"127.0.0.1:{port}"}
    results = []
    for path in (
        "/",
        "/schedules",
        "/schedules?sort=next&order=asc",
        "/schedules?sort=last&order=desc&page=20",
        "/schedules/512",
        f"/occurrences/{OCCURRENCES - 100}",
    ):
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            body = response.read()
            samples.append((time.perf_counter() - start) * 1000)
            if response.status != 200:
                raise SystemExit(f"{path}: {response.status} {body[:300]!r}")
        results.append((path, statistics.median(samples), percentile(samples, 0.99)))
    conn.close()
    return results


def sse_latency(port: int, machine: Machine, rounds: int) -> list[float]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(
        f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
    )
    buffer = b""
    while b"event: hello" not in buffer:
        buffer += sock.recv(65536)
    samples = []
    index = SCHEDULES  # the last applied entry: the next one follows it (no resync)
    for n in range(rounds):
        index += 1
        sid = n % SCHEDULES + 1
        command = core.DisableSchedule(sid, T0) if n % 2 == 0 else None
        if command is None:
            command = core.CreateSchedule(definition(f"extra-{n}"), T0)
            machine.apply(index, encode_command(core.DeleteSchedule(sid, T0)))
            index += 1
        marker = f'"id":{sid},"change":"disabled"' if n % 2 == 0 else '"change":"created"'
        buffer = b""
        start = time.perf_counter()
        machine.apply(index, encode_command(command))
        while marker.encode() not in buffer:
            buffer += sock.recv(65536)
        samples.append((time.perf_counter() - start) * 1000)
        time.sleep(0.12)  # let the source's look interval pass: each round is a fresh commit
    sock.close()
    return samples


def main(count: int) -> None:
    machine = populated()
    credentials = RunnerCredentials(
        admission=Secret("a" * 20), cluster=Secret("c" * 20), worker=Secret("w" * 20),
        console=Secret(TOKEN),
    )  # fmt: skip
    sessions = SessionBook()
    pusher = Pusher().start()
    hub = EventHub(pusher.publish)
    source = ChangeFeedSource(ChangeFeed(machine), machine.read, Runner(machine))
    parts = ConsoleParts(
        node_id="v1",
        view=View(machine),
        sessions=sessions,
        credentials=credential_table(credentials),
        pusher=pusher,
        hub=hub,
        source=source,
        gateway=None,
    )
    console = ConsoleConfig(HostPort("127.0.0.1", 0), "BENCH")
    server = HttpServer(
        create_console_app(parts),
        host=console.addr.host,
        port=0,
        name="console",
        body_bytes_max=8192,
        threads=8,
        server_class=TakeoverServer,
    ).start()
    source.start(hub.publish)
    try:
        print(f"{SCHEDULES} schedules, {len(machine.state.occurrences)} occurrences; "
              f"{count} requests per page (round trip on loopback, ms)")  # fmt: skip
        print("| page | p50 ms | p99 ms |")
        print("|---|---|---|")
        for path, p50, p99 in pages(server.port, count):
            print(f"| `{path}` | {p50:.1f} | {p99:.1f} |")
        samples = sse_latency(server.port, machine, 100)
        print(
            f"SSE: apply -> change event read by the client, n={len(samples)}: "
            f"p50 {statistics.median(samples):.1f} ms, p99 {percentile(samples, 0.99):.1f} ms, "
            f"max {max(samples):.1f} ms"
        )
        print("fixed seams: the overview's health document, the occurrence's worker documents")
        print(json.dumps({"pusher": vars(pusher.counts)}))
    finally:
        server.stop()
        source.stop()
        pusher.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
