"""Real processes on loopback for the runner tests: voters (``appliance runner``) and a worker.

The voters replicate through either backend (``Cluster(..., replication=...)``): absent, the
built-in Raft over fixed peers; an etcd ``replication`` object, runner instances that share one etcd
prefix and have no peers (each still with its own data_dir and admission_addr).

Each voter is a ``python -m appliance runner CONFIG.json --time-scale N`` process with its stdin
and stdout kept open: ``command(node, doc)`` writes one JSON line and waits (bounded) for the one
reply line. Its stderr (the decision log) goes to a file the test can read on failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests import support
from tests.ports import free_ports

T = TypeVar("T")

ENV = {
    "RUNNER_ADMISSION_TOKEN": "admission-token-aaaaaaaaaaaa",
    "RUNNER_CLUSTER_TOKEN": "cluster-token-bbbbbbbbbbbbbb",
    "RUNNER_WORKER_TOKEN": "worker-token-cccccccccccccccc",
    "RUNNER_OPERATOR_TOKEN": "operator-token-dddddddddddd",
    "APPLIANCE_TESTING": "1",
}
REPLY_TIMEOUT_S = 20.0
# Short Raft timers keep failover in tests well under a second.
FAST_RAFT = {"heartbeat_ms": 50, "election_timeout_min_ms": 300, "election_timeout_max_ms": 600}
WAIT_S = 45.0

DEMO = {
    "name": "every-minute",
    "code": "console.log('tick')",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": {"CatchUp": {"cap": 10}},
        "overlap": "Concurrent",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}


def wait_for(predicate: Callable[[], T | None], what: str, timeout_s: float = WAIT_S) -> T:
    return support.wait_for(predicate, what, timeout_s, poll_s=0.05)  # type: ignore[return-value]


class Voter:
    def __init__(self, node_id: str, config: Path, log: Path, time_scale: float) -> None:
        self.node_id = node_id
        self.config = config
        self.log = log
        self.time_scale = time_scale
        self.proc: subprocess.Popen[str] | None = None
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._lock = threading.Lock()
        self.extra_args: list[str] = []  # e.g. --clock-offset-seconds for a restart

    def start(self) -> None:
        with open(self.log, "a") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "appliance",
                    "runner",
                    str(self.config),
                    "--time-scale",
                    str(self.time_scale),
                    *self.extra_args,
                ],
                env={**os.environ, **ENV},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self._replies = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self._replies), daemon=True).start()

    @staticmethod
    def _read(proc: subprocess.Popen[str], sink: queue.Queue[dict[str, Any]]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with contextlib.suppress(ValueError):
                sink.put(json.loads(line))

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self, doc: dict[str, Any], timeout_s: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        if not self.alive or self.proc is None or self.proc.stdin is None:
            raise AssertionError(f"{self.node_id} is not running")
        with self._lock:
            self.proc.stdin.write(json.dumps(doc) + "\n")
            self.proc.stdin.flush()
            return self._replies.get(timeout=timeout_s)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout_s: float = 20.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out


class Worker:
    def __init__(
        self,
        root: Path,
        port: int,
        admission_ports: list[int],
        worker_id: str = "worker-1",
        engine: dict[str, int] | None = None,
        egress: dict[str, Any] | None = None,
    ) -> None:
        # The first worker keeps the names of before the fleet (issue 33): worker.json, …
        stem = "worker" if worker_id == "worker-1" else worker_id
        self.worker_id = worker_id
        self.config = root / f"{stem}.json"
        self.log = root / f"{stem}.log"
        self.data_dir = root / f"{stem}-data"
        self.port = port
        doc = {
            "namespace": "ns-test",
            "worker_id": worker_id,
            "data_dir": str(self.data_dir),
            "bearer_env": "RUNNER_WORKER_TOKEN",
            "admission_bearer_env": "RUNNER_ADMISSION_TOKEN",
            "admission_urls": [f"http://127.0.0.1:{p}" for p in admission_ports],
            "listen_addr": f"127.0.0.1:{port}",
        }
        if engine is not None:
            doc["engine"] = engine
        if egress is not None:
            doc["egress"] = egress
        self.config.write_text(json.dumps(doc))
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        with open(self.log, "a") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "appliance", "worker", "--config", str(self.config)],
                env={**os.environ, **ENV},
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if '"ready"' not in ready:
            raise AssertionError(f"worker did not start: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        # The engine children live in the worker's session: leave none behind.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)


class Cluster:
    """``size`` voters (and, with ``worker=True``, one worker) on loopback."""

    def __init__(
        self,
        root: Path,
        size: int = 3,
        *,
        time_scale: float = 20.0,
        schedules: list[dict[str, Any]] | None = None,
        timeout_seconds: int = 60,
        worker: bool = False,
        management_ports: dict[str, int] | None = None,
        raft: dict[str, int] | None = FAST_RAFT,
        replication: dict[str, Any] | None = None,
        expires_at: str = "2099-01-01T00:00:00Z",
        spare: int = 0,
        fleet: list[dict[str, str]] | None = None,
        worker_engine: dict[str, int] | None = None,
        worker_egress: dict[str, Any] | None = None,
    ) -> None:
        """``fleet``: one labels object per worker of a fleet (issue 33: ``remote.workers``,
        worker-1 … worker-N); absent, the one worker of ``remote.url`` as before.
        ``worker_engine`` / ``worker_egress``: every worker's ``engine`` / ``egress`` section."""
        self.root = root
        # ``spare`` nodes that may join later (``joiner``): ports now, so the worker knows their
        # admission routes from the start.
        ids = [f"v{i}" for i in range(1, size + spare + 1)]
        worker_count = len(fleet) if fleet else 1
        ports = free_ports(2 * len(ids) + worker_count)
        cluster_ports = dict(zip(ids, ports[: len(ids)], strict=True))
        self.admission_ports = dict(zip(ids, ports[len(ids) : 2 * len(ids)], strict=True))
        worker_ports = ports[2 * len(ids) :]
        worker_port = worker_ports[0]
        self._spare = ids[size:]
        ids = ids[:size]
        self.genesis = list(ids)
        self.voters: dict[str, Voter] = {}
        self.replication = replication
        on_etcd = replication is not None and replication.get("kind") == "etcd"
        for node_id in ids:
            doc: dict[str, Any] = {
                "node_id": node_id,
                "advertise_addr": "127.0.0.1",
                "cluster_port": cluster_ports[node_id],
                # With etcd the runners talk only to etcd: no peers (the config rule).
                "peers": []
                if on_etcd
                else [
                    f"{other}@127.0.0.1:{p}"
                    for other, p in cluster_ports.items()
                    if other in ids and other != node_id
                ],
                "data_dir": str(root / node_id),
                "admission_addr": f"127.0.0.1:{self.admission_ports[node_id]}",
                "admission_bearer_env": "RUNNER_ADMISSION_TOKEN",
                "cluster_bearer_env": "RUNNER_CLUSTER_TOKEN",
                "schedules": schedules or [],
                "remote": {
                    "url": f"http://127.0.0.1:{worker_port}",
                    "bearer_env": "RUNNER_WORKER_TOKEN",
                    "expires_at": expires_at,
                    "session": "tests",
                    "timeout_seconds": timeout_seconds,
                    "heap_mb": 64,
                    "namespace": "ns-test",
                    "worker_id": "worker-1",
                },
            }
            if fleet:
                remote = doc["remote"]
                del remote["url"], remote["worker_id"]
                remote["workers"] = [
                    {
                        "worker_id": f"worker-{j + 1}",
                        "url": f"http://127.0.0.1:{port}",
                        "labels": lab,
                    }
                    for j, (port, lab) in enumerate(zip(worker_ports, fleet, strict=True))
                ]
            if raft is not None and not on_etcd:
                doc["raft"] = raft
            if replication is not None:
                doc["replication"] = replication
            if management_ports and node_id in management_ports:
                doc["management"] = {
                    "addr": f"127.0.0.1:{management_ports[node_id]}",
                    "bearer_env": "RUNNER_OPERATOR_TOKEN",
                }
            config = root / f"{node_id}.json"
            config.write_text(json.dumps(doc))
            self.voters[node_id] = Voter(node_id, config, root / f"{node_id}.log", time_scale)
        self.cluster_ports = cluster_ports
        self.time_scale = time_scale
        self.workers = [
            Worker(
                root,
                port,
                list(self.admission_ports.values()),
                f"worker-{j + 1}",
                worker_engine,
                worker_egress,
            )
            for j, port in enumerate(worker_ports)
        ]
        self.worker = self.workers[0]
        self.with_worker = worker

    def joiner(self, template: str = "v1") -> Voter:
        """The next spare node as a Voter whose config joins this cluster (``join: true``: every
        genesis voter is its peer, so it seals the same contract); not started."""
        node_id = self._spare.pop(0)
        doc = json.loads(self.voters[template].config.read_text())
        genesis = [f"{n}@127.0.0.1:{self.cluster_ports[n]}" for n in self.genesis]
        doc.update(
            node_id=node_id,
            cluster_port=self.cluster_ports[node_id],
            peers=genesis,
            data_dir=str(self.root / node_id),
            admission_addr=f"127.0.0.1:{self.admission_ports[node_id]}",
            join=True,
        )
        doc.pop("management", None)
        config = self.root / f"{node_id}.json"
        config.write_text(json.dumps(doc))
        voter = Voter(node_id, config, self.root / f"{node_id}.log", self.time_scale)
        self.voters[node_id] = voter
        return voter

    def start(self) -> Cluster:
        if self.with_worker:
            for each in self.workers:
                each.start()
        for voter in self.voters.values():
            voter.start()
        return self

    def stop(self) -> None:
        for voter in self.voters.values():
            with contextlib.suppress(Exception):
                voter.terminate()
        for each in self.workers:
            each.stop()

    def owner(self, exclude: tuple[str, ...] = ()) -> Voter:
        """The voter whose ``status`` identifies acquired ownership (waits for one)."""

        def find() -> Voter | None:
            for voter in self.voters.values():
                if voter.node_id in exclude or not voter.alive:
                    continue
                reply = voter.command({"action": "status"})
                if reply.get("ok"):
                    return voter
            return None

        return wait_for(find, "an acquired owner")

    def dump_logs(self) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")):
            parts.append(f"==== {path.name}\n{path.read_text()[-4000:]}")
        return "\n".join(parts)
