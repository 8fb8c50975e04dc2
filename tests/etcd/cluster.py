"""A real 3-member etcd cluster on loopback for tests: own free ports, own temp data dirs.

``EtcdCluster.start()`` launches ``etcd`` three times and waits until every member answers
``/health``; ``kill(name)`` / ``restart(name)`` drive faults; ``stop()`` ends every member this
fixture started (by its own pid). A missing binary fails the test run in CI (``CI=true``) and skips
it elsewhere, so missing infrastructure can never pass silently in CI.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.ports import free_ports

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
START_TIMEOUT_S = 20.0


def require_etcd() -> None:
    if os.path.exists(ETCD):
        return
    message = "etcd is not installed (apt-get install -y etcd-server)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    return free_ports(1)[0]


class EtcdCluster:
    def __init__(self, base: Path, size: int = 3, extra_args: tuple[str, ...] = ()) -> None:
        self.base = base
        self.extra_args = extra_args  # more etcd flags (the soak bench's --snapshot-count)
        self.names = [f"m{i}" for i in range(1, size + 1)]
        self.client_port = {n: free_port() for n in self.names}
        self.peer_port = {n: free_port() for n in self.names}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.token = f"t{os.getpid()}-{time.monotonic_ns()}"

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.client_port[name]}"

    @property
    def endpoints(self) -> list[str]:
        return [self.url(n) for n in self.names]

    def _launch(self, name: str) -> None:
        peers = ",".join(f"{n}=http://127.0.0.1:{self.peer_port[n]}" for n in self.names)
        log = open(self.base / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
        self.procs[name] = subprocess.Popen(
            [
                ETCD,
                f"--name={name}",
                f"--data-dir={self.base / name}",
                f"--listen-client-urls={self.url(name)}",
                f"--advertise-client-urls={self.url(name)}",
                f"--listen-peer-urls=http://127.0.0.1:{self.peer_port[name]}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.peer_port[name]}",
                f"--initial-cluster={peers}",
                f"--initial-cluster-token={self.token}",
                "--initial-cluster-state=new",
                "--heartbeat-interval=50",
                "--election-timeout=500",
                "--logger=zap",
                "--log-level=warn",
                *self.extra_args,
            ],
            stdout=log,
            stderr=log,
        )
        log.close()

    def start(self) -> None:
        for name in self.names:
            self._launch(name)
        self.wait_healthy(self.names)

    def wait_healthy(self, names: list[str]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        for name in names:
            while True:
                if self.healthy(name):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd member {name} did not become healthy")
                time.sleep(0.05)

    def healthy(self, name: str) -> bool:
        try:
            with urllib.request.urlopen(self.url(name) + "/health", timeout=1) as r:
                return bool(json.loads(r.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def leader(self) -> str:
        """The name of the member etcd's own Raft elected."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for name in self.names:
                if name not in self.procs:
                    continue
                with contextlib.suppress(OSError, ValueError):
                    req = urllib.request.Request(
                        self.url(name) + "/v3/maintenance/status", data=b"{}", method="POST"
                    )
                    with urllib.request.urlopen(req, timeout=1) as r:
                        status = json.loads(r.read())
                    if status.get("leader") == status["header"]["member_id"]:
                        return name
            time.sleep(0.05)
        raise RuntimeError("etcd has no leader")

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def restart(self, name: str) -> None:
        self._launch(name)  # the data dir exists: etcd rejoins with its old identity
        self.wait_healthy([name])

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name)
