"""Test peers for the worker: a real admission server, a worker process, bindings.

The admission peer plays the runner's ``POST /scheduler/v1/admit`` on a real loopback socket and
records every request it received (one log line per request, with the connection it came on).
Its behaviour is one of: ``grant`` (200 with a permit naming the asking incarnation), ``409``,
``403``, ``500``, ``drop`` (read the whole request, then close without answering), ``hold``
(read the request and wait for ``release()`` before granting: a permit request in flight).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.engine.protocol import PARENT_PID_ENV
from appliance.http import HttpClient, Response
from tests.ports import free_ports

WORKER_TOKEN = "worker-token-test-0123456789"
ADMISSION_TOKEN = "admission-token-test-9876543210"
NAMESPACE = "ns-test"
WORKER_ID = "worker-1"
READY_TIMEOUT_SECONDS = 60.0


def free_port() -> int:
    return free_ports(1)[0]


def closed_port() -> int:
    """A loopback port with nothing listening (connection refused)."""
    return free_port()


@dataclass
class AdmitLog:
    bodies: list[dict[str, Any]] = field(default_factory=list)
    connections: list[int] = field(default_factory=list)


class AdmissionPeer:
    """A raw-socket HTTP/1.1 server answering the admission route (see module doc)."""

    def __init__(self, mode: str = "grant") -> None:
        self.mode = mode
        self.log = AdmitLog()
        self.received = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = int(self._sock.getsockname()[1])
        self._accepts = 0
        self._closed = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.log.bodies)

    def release(self) -> None:
        self._release.set()

    def close(self) -> None:
        self._closed = True
        self._release.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(5)

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._accepts += 1
            threading.Thread(target=self._handle, args=(conn, self._accepts), daemon=True).start()

    def _handle(self, conn: socket.socket, connection_number: int) -> None:
        with conn:
            conn.settimeout(10)
            try:
                head, body = _read_request(conn)
            except (OSError, ValueError):
                return
            document = json.loads(body)
            document["_auth"] = head.get("authorization")
            with self._lock:
                self.log.bodies.append(document)
                self.log.connections.append(connection_number)
            self.received.set()
            mode = self.mode
            if mode == "drop":
                return
            if mode == "hold":
                self._release.wait(30)
                mode = "grant"
            status, answer = self._answer(mode, document)
            payload = json.dumps(answer).encode()
            conn.sendall(
                f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )

    def _answer(self, mode: str, document: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if mode == "grant":
            binding = document["binding"]
            permit = {
                "invocation": {
                    key: binding[key]
                    for key in ("namespace", "schedule_id", "occurrence_id", "attempt")
                },
                "incarnation": document["incarnation"],
                "granted_epoch": binding["epoch"],
                "granted_at": "2026-11-29T20:00:00Z",
            }
            return 200, {"protocol": 1, "permit": permit}
        if mode == "409":
            return 409, {"protocol": 1, "error": {"code": "not_owner", "leader_hint": "v2"}}
        if mode == "403":
            return 403, {"protocol": 1, "error": {"code": "stale_epoch", "message": "no"}}
        return 500, {"protocol": 1, "error": {"code": "internal_error", "message": "boom"}}


def _read_request(conn: socket.socket) -> tuple[dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ValueError("closed before the request head")
        data += chunk
    head_bytes, _, rest = data.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")[1:]
    head = {}
    for line in lines:
        name, _, value = line.partition(":")
        head[name.strip().lower()] = value.strip()
    length = int(head.get("content-length", "0"))
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            raise ValueError("closed before the request body")
        rest += chunk
    return head, rest[:length]


# ---------------------------------------------------------------------------------- bindings
def sha256(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def binding(
    code: str,
    *,
    occurrence_id: int,
    schedule_id: int = 3,
    attempt: int = 1,
    namespace: str = NAMESPACE,
    worker_id: str = WORKER_ID,
    expires_at: str = "2099-01-01T00:00:00Z",
    timeout_seconds: int = 30,
    heap_mb: int = 64,
) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "schedule_id": schedule_id,
        "schedule_name": "nightly-report",
        "occurrence_id": occurrence_id,
        "attempt": attempt,
        "owner": "voter-a",
        "epoch": 4,
        "worker_id": worker_id,
        "payload_sha256": sha256(code),
        "due_time": "2026-11-29T20:00:00Z",
        "authority": {
            "expires_at": expires_at,
            "timeout_seconds": timeout_seconds,
            "heap_mb": heap_mb,
            "session": "ops-test",
        },
    }


def exec_body(code: str, **kwargs: Any) -> dict[str, Any]:
    return {"protocol": 1, "binding": binding(code, **kwargs), "code": code}


def execution_id(occurrence_id: int, schedule_id: int = 3, attempt: int = 1) -> str:
    return f"s{schedule_id}-o{occurrence_id}-a{attempt}"


# ---------------------------------------------------------------------------------- worker
class WorkerProcess:
    """``python -m appliance worker --config PATH`` on a free loopback port."""

    def __init__(
        self,
        tmp: Path,
        admission_urls: list[str],
        *,
        crash_at: str | None = None,
        engine: dict[str, Any] | None = None,
        extra_env: dict[str, str] | None = None,
        extra_config: dict[str, Any] | None = None,
    ) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.data_dir = tmp / "data"
        self.port = free_port()
        config = {
            "namespace": NAMESPACE,
            "worker_id": WORKER_ID,
            "data_dir": str(self.data_dir),
            "bearer_env": "TEST_WORKER_TOKEN",
            "admission_bearer_env": "TEST_ADMISSION_TOKEN",
            "admission_urls": admission_urls,
            "listen_addr": f"127.0.0.1:{self.port}",
            "engine": engine or {"max_concurrent": 2, "max_queued": 2},
            **(extra_config or {}),
        }
        self.config_path = tmp / "worker.json"
        self.config_path.write_text(json.dumps(config))
        env = {key: os.environ[key] for key in ("PATH", "PYTHONPATH", "HOME") if key in os.environ}
        env.update(TEST_WORKER_TOKEN=WORKER_TOKEN, TEST_ADMISSION_TOKEN=ADMISSION_TOKEN)
        if crash_at is not None:
            env.update(APPLIANCE_TESTING="1", APPLIANCE_CRASH_AT=crash_at)
        env.update(extra_env or {})
        self.stderr_path = tmp / f"worker-{time.monotonic_ns()}.log"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "appliance", "worker", "--config", str(self.config_path)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self.ready: dict[str, Any] = {}
        self.client = HttpClient(connect_timeout_ms=2_000, read_timeout_ms=30_000)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> WorkerProcess:
        stdout = self.proc.stdout
        assert stdout is not None
        readable, _, _ = select.select([stdout], [], [], READY_TIMEOUT_SECONDS)
        line = stdout.readline() if readable else b""
        if not line:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"worker did not start: {self.log()}")
        self.ready = json.loads(line)
        return self

    @property
    def incarnation(self) -> str:
        return str(self.ready["incarnation"])

    def log(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def request(
        self, method: str, path: str, body: bytes | None = None, token: str | None = WORKER_TOKEN
    ) -> Response:
        headers = {"Content-Type": "application/json"} if body is not None else None
        return self.client.request(
            method,
            self.url + path,
            body=body,
            headers=headers,
            bearer=token,
            fresh_connection=True,
        )

    def post(self, path: str, document: Any, token: str | None = WORKER_TOKEN) -> Response:
        return self.request("POST", path, json.dumps(document).encode(), token)

    def exec(self, document: dict[str, Any]) -> Response:
        return self.post("/api/scheduled/v1/exec", document)

    def cancel(self, document: dict[str, Any]) -> Response:
        return self.post("/api/scheduled/v1/cancel", document)

    def observe(self, execution_id_: str) -> Response:
        return self.request("GET", f"/api/scheduled/v1/executions/{execution_id_}")

    def wait_terminal(self, execution_id_: str, timeout_seconds: float = 30.0) -> dict[str, Any]:
        """Observe until a terminal status (the worker has no push channel: polling is the
        protocol's own way to learn an outcome)."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            document = self.observe(execution_id_).json()
            if document["status"] not in ("running", "reserved"):
                return document
            if time.monotonic() > deadline:
                raise AssertionError(f"still {document['status']} after {timeout_seconds} s")
            time.sleep(0.05)

    def wait_exit(self, timeout_seconds: float = 30.0) -> int:
        return self.proc.wait(timeout_seconds)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.client.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        return int(self.proc.returncode)

    def engine_children(self) -> set[int]:
        return engine_children_of(self.proc.pid)


def engine_children_of(parent_pid: int) -> set[int]:
    marker = f"{PARENT_PID_ENV}={parent_pid}".encode() + b"\0"
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError), open(f"/proc/{entry}/environ", "rb") as environ:
            if marker in environ.read():
                found.add(int(entry))
    return found


def wait_gone(pids: set[int], timeout_seconds: float = 10.0) -> set[int]:
    """Wait (pidfd, no polling) for each pid to exit; the pids still alive afterwards."""
    alive = set()
    deadline = time.monotonic() + timeout_seconds
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not readable:
                alive.add(pid)
        finally:
            os.close(fd)
    return alive


@contextlib.contextmanager
def running_worker(tmp: Path, admission_urls: list[str], **kwargs: Any) -> Iterator[WorkerProcess]:
    worker = WorkerProcess(tmp, admission_urls, **kwargs).wait_ready()
    pid = worker.proc.pid
    try:
        yield worker
    finally:
        children = worker.engine_children()
        worker.stop()
        leftovers = wait_gone(children | engine_children_of(pid))
        assert not leftovers, f"engine children outlived the worker: {sorted(leftovers)}"
