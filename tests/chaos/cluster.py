"""Three voters and one worker on loopback, every link through the fault-injecting proxy.

Links (one proxy port each): ``vI->vJ`` for each ordered pair of voters (the voter dials its peer
through ``--peer-route``; the sealed contract keeps the real cluster ports), ``runner->worker``
(the shared ``remote.url`` is part of the contract, so all voters share that link), and
``worker->vI`` (the worker's ``admission_urls``).

The cluster keeps one scaled timeline: schedule time is ``t0 + (now - t0) * time_scale`` for the
whole run. A voter (re)started later gets ``--clock-offset-seconds`` so that its own scaled clock
lands on that timeline, plus the run's deliberate skew for the skewed voter.
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
import time
from pathlib import Path
from typing import Any

from tests.chaos.proxy import Proxy
from tests.runner.cluster import ENV, Worker, free_ports

REPLY_TIMEOUT_S = 8.0
FAST_RAFT = {"heartbeat_ms": 50, "election_timeout_min_ms": 400, "election_timeout_max_ms": 800}
NAMESPACE = "ns-chaos"
WORKER_ID = "worker-1"


class ChaosVoter:
    """One ``appliance runner`` process; commands on stdin, replies on stdout, log on stderr."""

    def __init__(self, node_id: str, config: Path, log: Path, routes: dict[str, int]) -> None:
        self.node_id = node_id
        self.config = config
        self.log = log
        self.routes = routes
        self.proc: subprocess.Popen[str] | None = None
        self.stopped = False  # SIGSTOPped
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._lock = threading.Lock()
        self._late = 0  # replies still owed to commands that timed out: discard them

    def start(self, time_scale: float, offset_s: float) -> None:
        args = [sys.executable, "-m", "appliance", "runner", str(self.config)]
        args += ["--time-scale", str(time_scale), "--clock-offset-seconds", f"{offset_s:.3f}"]
        for peer, port in sorted(self.routes.items()):
            args += ["--peer-route", f"{peer}=127.0.0.1:{port}"]
        with open(self.log, "a") as err:
            self.proc = subprocess.Popen(
                args,
                env={**os.environ, **ENV},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.stopped = False
        self._replies = queue.Queue()
        self._late = 0
        threading.Thread(target=self._read, args=(self.proc, self._replies), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str], sink: queue.Queue[dict[str, Any]]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with contextlib.suppress(ValueError):
                sink.put(json.loads(line))

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def usable(self) -> bool:
        return self.alive and not self.stopped

    def command(self, doc: dict[str, Any], timeout_s: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        """One reply, or ``{"ok": False, "status": "no_reply"}`` when none came in time."""
        if not self.usable or self.proc is None or self.proc.stdin is None:
            return {"ok": False, "status": "not_running"}
        with self._lock:
            try:
                self.proc.stdin.write(json.dumps(doc) + "\n")
                self.proc.stdin.flush()
            except (OSError, ValueError):
                return {"ok": False, "status": "not_running"}
            deadline = time.monotonic() + timeout_s
            while True:
                left = deadline - time.monotonic()
                try:
                    reply = self._replies.get(timeout=max(left, 0.001))
                except queue.Empty:
                    self._late += 1
                    return {"ok": False, "status": "no_reply"}
                if self._late:
                    self._late -= 1  # the answer to an earlier, abandoned command
                    continue
                return reply

    def signal(self, signum: int) -> None:
        if self.alive and self.proc is not None:
            self.proc.send_signal(signum)
            if signum == signal.SIGSTOP:
                self.stopped = True
            elif signum == signal.SIGCONT:
                self.stopped = False

    def kill(self) -> None:
        if self.alive and self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.stopped = False

    def terminate(self, timeout_s: float = 20.0) -> None:
        if self.proc is None or not self.alive:
            return
        self.signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def events(self) -> list[dict[str, Any]]:
        out = []
        if self.log.exists():
            for line in self.log.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    doc = json.loads(line)
                    if isinstance(doc, dict):
                        out.append(doc)
        return out


class ChaosWorker(Worker):
    """The runner tests' worker, with a worker-side process-group kill (engine children too)."""

    stopped = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive and self.proc is not None:
            self.proc.send_signal(signum)
            self.stopped = signum == signal.SIGSTOP

    def kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        self.stopped = False


class ChaosCluster:
    def __init__(
        self,
        root: Path,
        proxy: Proxy,
        *,
        schedules: list[dict[str, Any]],
        time_scale: float,
        timeout_seconds: int,
        skew: tuple[str, float],
    ) -> None:
        self.root = root
        self.proxy = proxy
        self.time_scale = time_scale
        self.skew = skew
        self.ids = ["v1", "v2", "v3"]
        ports = free_ports(7)
        self.cluster_ports = dict(zip(self.ids, ports[0:3], strict=True))
        self.admission_ports = dict(zip(self.ids, ports[3:6], strict=True))
        worker_port = ports[6]
        remote_port = proxy.add("runner->worker", worker_port)
        worker_admission = [proxy.add(f"worker->{v}", self.admission_ports[v]) for v in self.ids]
        self.worker = ChaosWorker(root, worker_port, worker_admission)
        worker_doc = json.loads(self.worker.config.read_text())
        worker_doc.update(namespace=NAMESPACE, worker_id=WORKER_ID)
        self.worker.config.write_text(json.dumps(worker_doc))
        self.voters: dict[str, ChaosVoter] = {}
        for node_id in self.ids:
            routes = {
                peer: proxy.add(f"{node_id}->{peer}", self.cluster_ports[peer])
                for peer in self.ids
                if peer != node_id
            }
            doc = {
                "node_id": node_id,
                "advertise_addr": "127.0.0.1",
                "cluster_port": self.cluster_ports[node_id],
                "peers": [
                    f"{p}@127.0.0.1:{port}"
                    for p, port in self.cluster_ports.items()
                    if p != node_id
                ],
                "data_dir": str(root / node_id),
                "admission_addr": f"127.0.0.1:{self.admission_ports[node_id]}",
                "admission_bearer_env": "RUNNER_ADMISSION_TOKEN",
                "cluster_bearer_env": "RUNNER_CLUSTER_TOKEN",
                "schedules": schedules,
                "raft": FAST_RAFT,
                "remote": {
                    "url": f"http://127.0.0.1:{remote_port}",
                    "bearer_env": "RUNNER_WORKER_TOKEN",
                    "expires_at": "2099-01-01T00:00:00Z",
                    "session": "chaos",
                    "timeout_seconds": timeout_seconds,
                    "heap_mb": 64,
                    "namespace": NAMESPACE,
                    "worker_id": WORKER_ID,
                },
            }
            config = root / f"{node_id}.json"
            config.write_text(json.dumps(doc))
            self.voters[node_id] = ChaosVoter(node_id, config, root / f"{node_id}.log", routes)
        self.t0 = time.time()

    def schedule_now_s(self) -> float:
        return self.t0 + (time.time() - self.t0) * self.time_scale

    def start_voter(self, node_id: str) -> None:
        # The child's scaled clock starts at its own wall time: shift it onto the run's timeline.
        offset_s = (self.time_scale - 1.0) * (time.time() - self.t0)
        if node_id == self.skew[0]:
            offset_s += self.skew[1]
        self.voters[node_id].start(self.time_scale, offset_s)

    def start(self) -> None:
        self.t0 = time.time()
        self.worker.start()
        for node_id in self.ids:
            self.start_voter(node_id)

    def owner(self, timeout_s: float = 30.0) -> ChaosVoter | None:
        """The usable voter whose ``status`` says it holds acquired ownership, if one does."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(v.alive for v in self.voters.values()):
                return None  # every voter exited (a start-up refusal): nothing to wait for
            for voter in self.voters.values():
                if voter.usable and voter.command({"action": "status"}, 3.0).get("ok"):
                    return voter
            time.sleep(0.1)
        return None

    def stop(self) -> None:
        for voter in self.voters.values():
            with contextlib.suppress(Exception):
                voter.terminate()
        with contextlib.suppress(Exception):
            if self.worker.alive:
                self.worker.signal(signal.SIGCONT)
            self.worker.stop()

    def dump_logs(self, tail_chars: int = 3000) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")):
            parts.append(f"==== {path.name}\n{path.read_text()[-tail_chars:]}")
        return "\n".join(parts)
