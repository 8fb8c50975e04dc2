"""The built-in Raft against a 3-member etcd cluster, in ONE run, on loopback (issue 4).

Both sides run as three separate processes with fsync on and their default timers:

- Raft: three voter processes (this file re-executed with ``--voter``), each a ``RaftMember``
  persisting to its ``RunnerStore`` (SQLite WAL, synchronous=FULL), heartbeat 100 ms, election
  1-2 s. Each voter also serves a tiny client endpoint (``POST /propose``: propose the body and
  answer once it is committed and applied; 421 when not leader) on its own port.
- etcd: ``etcd`` three times with its defaults (heartbeat 100 ms, election 1 s, fsync on); the
  client uses its HTTP/JSON gateway (``POST /v3/kv/put``).
- pysyncobj (optional second peer, a Python Raft; the ``bench`` extra installs it): three nodes
  at its defaults (append period 100 ms, election 0.4-1.4 s; its journal is never fsynced)
  behind the same client endpoint as the Raft voters.

Both clients are the same pooled keep-alive ``HttpClient`` in this process, talking to the
leader. Measured per side: sequential commit latency (p50, p99), throughput with 8 concurrent
proposers (one connection each), failover (SIGKILL of the leader process → the first put that
succeeds on a survivor; a new attempt every 20 ms; the killed member rejoins before the next
failover), and the CPU the three member processes burn per commit. The sides run interleaved in
rounds (order alternates) because the machine is shared; the load average is recorded around
each side. The physical floor is measured from its parts right before each side: one durable
SQLite append (what a voter pays per fsync), a raw 128-byte append + fdatasync (what a WAL like
etcd's pays), and one loopback HTTP round trip through the same server and client the Raft
transport uses. Results and their reading: docs/bench-raft.md.

    .venv/bin/python bench/bench_raft_vs_etcd.py [--rounds 3] [--failovers 4]
        [--sequential 300] [--parallel 2000] [--floor-samples 300]

The etcd side is skipped with a message when no ``etcd`` binary is found, the pysyncobj side
when the package is missing; nothing is installed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib.util
import io
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ENV = {"ADMISSION_TOKEN": "a" * 24, "CLUSTER_TOKEN": "c" * 24, "WORKER_TOKEN": "w" * 24}
BENCH_TOKEN = "b" * 24  # the bench client endpoint's bearer (a baseline voter's ignores it)
IDS = ["n1", "n2", "n3"]
START_TIMEOUT_S = 30.0
FAILOVER_TIMEOUT_S = 30.0
ATTEMPT_EVERY_S = 0.02
ATTEMPT_TIMEOUT_MS = 5_000
ATTEMPTS_MAX = 128
ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def free_ports(count: int) -> list[int]:
    """The tests' port picker (below the ephemeral range, distinct); REPO is on sys.path by the
    time a cluster starts."""
    from tests.ports import free_ports as pick

    return pick(count)


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def loadavg() -> float:
    return os.getloadavg()[0]


# -- the voter process -------------------------------------------------------------------------


class NotLeaderHere(Exception):
    """A voter's propose refused because another voter leads (the client endpoint says 421)."""


def serve_bench_client(
    propose: Callable[[bytes], Any],
    status: Callable[[], dict[str, Any]],
    client_port: int,
) -> Any:
    """The bench-only client endpoint of a voter process: ``POST /propose`` (answer once the
    body is committed and applied; 421 when not leader), ``POST /load`` (proposers as threads
    inside this process, as the runner proposes: no client hop), ``GET /status`` and
    ``GET /threads``.

    Plain handlers on a ``DirectServer`` (appliance/http/direct_server.py, bearer
    ``BENCH_TOKEN``), as a voter serves its cluster port: the appliance has no client API that
    proposes, so this stands for the leanest one it could have, next to etcd's gateway."""
    from appliance.config.credentials import Secret
    from appliance.http.auth import BearerAuth
    from appliance.http.direct_server import DirectReply, DirectRequest, DirectServer

    def on_propose(request: DirectRequest) -> DirectReply:
        started = time.perf_counter()
        try:
            index = propose(request.body)
        except NotLeaderHere:
            return DirectReply(421)
        except Exception as exc:  # lost, timed out, stopped: the client retries elsewhere
            return DirectReply(503, repr(exc).encode())
        # the commit as the leader itself sees it: without the bench client's HTTP hop
        inner_ms = (time.perf_counter() - started) * 1000
        return DirectReply(200, f"{index} {inner_ms:.4f}".encode())

    def on_load(request: DirectRequest) -> DirectReply:
        spec = json.loads(request.body)
        latencies: list[float] = []
        failed = [0]

        def proposer(p: int) -> None:
            for n in range(spec["count"]):
                started = time.perf_counter()
                try:
                    propose(b"load-%d-%d" % (p, n))
                except Exception:
                    failed[0] += 1
                    continue
                latencies.append((time.perf_counter() - started) * 1000)

        started = time.perf_counter()
        count = spec["proposers"]
        threads = [threading.Thread(target=proposer, args=(p,)) for p in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed_s = time.perf_counter() - started
        document = {"latencies_ms": latencies, "elapsed_s": elapsed_s, "failed": failed[0]}
        return json_reply(document)

    def json_reply(document: Any) -> DirectReply:
        return DirectReply(200, json.dumps(document).encode(), "application/json")

    routes = {
        "/propose": {"POST": on_propose},
        "/load": {"POST": on_load},
        "/status": {"GET": lambda request: json_reply(status())},
        # thread id -> name (bench_commit_cost.py reports CPU per thread)
        "/threads": {
            "GET": lambda request: json_reply(
                {str(t.native_id): t.name for t in threading.enumerate()}
            )
        },
    }
    return DirectServer(
        routes,
        gate=BearerAuth({"bench": Secret(BENCH_TOKEN)}, {"bench"}, surface="bench client"),
        host="127.0.0.1",
        port=client_port,
        name="bench client",
        body_bytes_max=65536,
    )


def run_until_signalled(stop: threading.Event) -> None:
    from appliance.signal_wait import wait_for_stop

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    wait_for_stop(stop)


def voter_main(config_path: str, client_port: int) -> int:
    """One Raft voter plus its bench client endpoint; runs until SIGTERM."""
    from appliance.config.contract import contract_digest, sealed_contract
    from appliance.config.credentials import resolve_runner_credentials
    from appliance.config.runner import load_runner_config
    from appliance.raft import NotLeader
    from appliance.replication.raft_member import RaftMember
    from appliance.store.runner_store import RunnerStore

    cfg = load_runner_config(config_path)
    digest = contract_digest(cfg)
    store = RunnerStore.create_or_open(
        cfg.data_dir, contract=sealed_contract(cfg), contract_digest=digest
    )
    stop = threading.Event()
    member = RaftMember(
        cfg,
        resolve_runner_credentials(cfg, os.environ),
        store,
        lambda index, command: index,
        contract_digest=digest,
        on_fatal=lambda exc: stop.set(),
    )
    replication = member.replication

    def propose(body: bytes) -> Any:
        try:
            return replication.propose(body, timeout_s=5)
        except NotLeader:
            raise NotLeaderHere() from None

    client = serve_bench_client(propose, replication.status, client_port)
    member.start()
    client.start()
    run_until_signalled(stop)
    client.stop()
    member.stop()
    store.close()
    return 0


def pysyncobj_voter_main(spec_path: str, client_port: int) -> int:
    """One pysyncobj node (a Python Raft; journal in an mmap file, no fsync) plus the same
    bench client endpoint; runs until SIGTERM."""
    from pysyncobj import SyncObj, SyncObjConf, replicated

    spec = json.loads(Path(spec_path).read_text())

    class Counter(SyncObj):  # type: ignore[misc]
        def __init__(self) -> None:
            conf = SyncObjConf(
                journalFile=spec["journal"], dynamicMembershipChange=False
            )  # pysyncobj's default timers: election 0.4-1.4 s, append period 50 ms
            super().__init__(spec["self"], spec["partners"], conf)
            self._count = 0

        @replicated  # type: ignore[misc]
        def put(self, value: bytes) -> int:
            self._count += 1
            return self._count

    node = Counter()

    def propose(body: bytes) -> Any:
        if not node._isLeader():
            raise NotLeaderHere()
        return node.put(body, sync=True, timeout=5)

    def status() -> dict[str, Any]:
        leader = node._getLeader()
        role = "leader" if node._isLeader() else "follower"
        return {"role": role, "leader_id": str(leader) if leader is not None else None}

    client = serve_bench_client(propose, status, client_port)
    client.start()
    run_until_signalled(threading.Event())
    client.stop()
    node.destroy()
    return 0


# -- the two clusters, behind one shape --------------------------------------------------------


class Cluster:
    """Three member processes on loopback; ``put(member, value)`` commits through it."""

    label = ""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.client_port: dict[str, int] = {}
        self.members: list[str] = []
        self.launch: dict[str, tuple[list[str], dict[str, str] | None]] = {}
        self.inner_ms: list[float] = []  # commit latency measured inside the leader, if known

    def url(self, name: str, path: str) -> str:
        return f"http://127.0.0.1:{self.client_port[name]}{path}"

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.launch[name] = (argv, env)
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=log, env=env)
        log.close()

    def start(self) -> None:
        raise NotImplementedError

    def put(self, client: Any, name: str, value: bytes, timeout_ms: int = 5_000) -> bool:
        raise NotImplementedError

    def leader(self, client: Any) -> str | None:
        raise NotImplementedError

    def load(self, client: Any, name: str, proposers: int, count: int) -> dict[str, Any] | None:
        """Proposers inside member ``name`` (None: this side has no such mode)."""
        return None

    def follows(self, client: Any, name: str) -> bool:
        """``name`` answers and follows a leader other than itself."""
        raise NotImplementedError

    def restart(self, client: Any, name: str) -> None:
        """Start a killed member again on its data dir; return once it follows a leader."""
        self._spawn(name, *self.launch[name])
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.follows(client, name):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.label}: {name} did not rejoin; see {self.root}")
            time.sleep(0.05)

    def wait_leader(self, client: Any) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            name = self.leader(client)
            if name is not None and self.put(client, name, b"warm-up"):
                return name
            time.sleep(0.05)
        raise RuntimeError(f"{self.label}: no leader; see logs in {self.root}")

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait(10)
        self.procs.clear()


class RaftCluster(Cluster):
    label = "built-in Raft"
    tree = Path(__file__).resolve().parent.parent  # whose code the voters run

    def start(self) -> None:
        from tests.replication.test_raft_member import runner_doc

        cluster_ports = dict(zip(IDS, free_ports(3), strict=True))
        self.client_port = dict(zip(IDS, free_ports(3), strict=True))
        self.members = list(IDS)
        for node_id in IDS:
            doc = runner_doc(node_id, cluster_ports, self.root)
            del doc["raft"]  # the product defaults: heartbeat 100 ms, election 1-2 s
            doc.update(self.extra_config(node_id))
            config = self.root / f"{node_id}.json"
            config.write_text(json.dumps(doc))
            script = self.tree / "bench" / "bench_raft_vs_etcd.py"
            argv = [sys.executable, str(script), "--voter", str(config)]
            argv += ["--client-port", str(self.client_port[node_id])]
            self._spawn(node_id, argv, {**os.environ, **ENV, "PYTHONPATH": str(self.tree)})

    def put(self, client: Any, name: str, value: bytes, timeout_ms: int = 5_000) -> bool:
        from appliance.http import ClientError

        try:
            response = client.request(
                "POST",
                self.url(name, "/propose"),
                body=value,
                read_timeout_ms=timeout_ms,
                bearer=BENCH_TOKEN,
            )
        except ClientError:
            return False
        if response.status != 200:
            return False
        self.inner_ms.append(float(response.body.split()[1]))
        return True

    def load(self, client: Any, name: str, proposers: int, count: int) -> dict[str, Any] | None:
        body = json.dumps({"proposers": proposers, "count": count}).encode()
        response = client.request(
            "POST", self.url(name, "/load"), body=body, read_timeout_ms=120_000, bearer=BENCH_TOKEN
        )
        if response.status != 200:
            raise RuntimeError(f"{self.label}: in-process load failed: {response.status}")
        result: dict[str, Any] = response.json()
        return result

    def leader(self, client: Any) -> str | None:
        from appliance.http import ClientError

        for name in self.procs:
            try:
                response = client.get(self.url(name, "/status"), bearer=BENCH_TOKEN)
            except ClientError:
                continue
            if response.status == 200 and response.json().get("role") == "leader":
                return name
        return None

    def follows(self, client: Any, name: str) -> bool:
        from appliance.http import ClientError

        try:
            response = client.get(self.url(name, "/status"), bearer=BENCH_TOKEN)
        except ClientError:
            return False
        if response.status != 200:
            return False
        status = response.json()
        return bool(status.get("role") == "follower" and status.get("leader_id"))

    def extra_config(self, node_id: str) -> dict[str, Any]:
        return {}


class BaselineRaftCluster(RaftCluster):
    """The same voters running the baseline commit's code (``--baseline-ref``), extracted aside
    with ``git archive``: this run's figures for the code before the change."""

    label = "built-in Raft, baseline"
    tree = Path(__file__).resolve().parent.parent  # replaced by main() with the extracted tree


class RaftTlsCluster(RaftCluster):
    """The same voters with a ``tls`` section: mutual TLS between them (a throwaway CA)."""

    label = "built-in Raft, mutual TLS"

    def start(self) -> None:
        self.pki = write_bench_pki(self.root, list(IDS), voters=True)
        super().start()

    def extra_config(self, node_id: str) -> dict[str, Any]:
        ca, cert, key = self.pki[node_id]
        return {"tls": {"ca_file": ca, "cert_file": cert, "key_file": key}}


def write_bench_pki(root: Path, names: list[str], *, voters: bool) -> dict[str, tuple[str, ...]]:
    """A CA and a certificate per member naming 127.0.0.1 (and, for voters, their identity)."""
    from appliance.cluster_init import pki
    from appliance.http.tls import voter_name

    authority = pki.new_authority("bench CA")
    directory = root / "pki"
    directory.mkdir()
    ca = directory / "ca.pem"
    pki.write_public(ca, authority.cert_pem())
    out = {}
    for name in names:
        dns = ["localhost", voter_name(name)] if voters else ["localhost"]
        issued = pki.issue(authority, name, dns_names=dns, ip_addresses=["127.0.0.1"])
        pki.write_public(directory / f"{name}.pem", issued.cert_pem())
        pki.write_private(directory / f"{name}.key", issued.key_pem())
        out[name] = (str(ca), str(directory / f"{name}.pem"), str(directory / f"{name}.key"))
    return out


class PySyncObjCluster(RaftCluster):
    """pysyncobj, a Python Raft, behind the same bench client endpoint (no fsync: its journal
    is an mmap file it never syncs)."""

    label = "pysyncobj"

    def start(self) -> None:
        raft_ports = dict(zip(IDS, free_ports(3), strict=True))
        self.client_port = dict(zip(IDS, free_ports(3), strict=True))
        self.members = list(IDS)
        for node_id in IDS:
            spec = {
                "self": f"127.0.0.1:{raft_ports[node_id]}",
                "partners": [f"127.0.0.1:{raft_ports[o]}" for o in IDS if o != node_id],
                "journal": str(self.root / f"{node_id}.journal"),
            }
            path = self.root / f"{node_id}-pysyncobj.json"
            path.write_text(json.dumps(spec))
            argv = [sys.executable, __file__, "--pysyncobj-voter", str(path)]
            argv += ["--client-port", str(self.client_port[node_id])]
            self._spawn(node_id, argv, {**os.environ, "PYTHONPATH": str(REPO)})


class EtcdCluster(Cluster):
    label = "etcd"

    def start(self) -> None:
        names = ["m1", "m2", "m3"]
        self.members = names
        self.client_port = dict(zip(names, free_ports(3), strict=True))
        peer_port = dict(zip(names, free_ports(3), strict=True))
        scheme = self.peer_scheme
        peers = ",".join(f"{n}={scheme}://127.0.0.1:{peer_port[n]}" for n in names)
        token = f"bench-{os.getpid()}-{time.monotonic_ns()}"
        self.prepare(names)
        for name in names:
            client_url = f"http://127.0.0.1:{self.client_port[name]}"
            peer_url = f"{scheme}://127.0.0.1:{peer_port[name]}"
            argv = [
                ETCD,
                f"--name={name}",
                f"--data-dir={self.root / name}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster={peers}",
                f"--initial-cluster-token={token}",
                "--initial-cluster-state=new",
                "--logger=zap",
                "--log-level=warn",
                *self.extra_args(name),
            ]  # everything else at etcd's defaults: heartbeat 100 ms, election 1000 ms
            self._spawn(name, argv)

    peer_scheme = "http"

    def prepare(self, names: list[str]) -> None:
        pass

    def extra_args(self, name: str) -> list[str]:
        return []

    def put(self, client: Any, name: str, value: bytes, timeout_ms: int = 5_000) -> bool:
        from appliance.http import ClientError

        body = json.dumps(
            {"key": base64.b64encode(b"bench").decode(), "value": base64.b64encode(value).decode()}
        ).encode()
        try:
            response = client.request(
                "POST",
                self.url(name, "/v3/kv/put"),
                body=body,
                headers={"Content-Type": "application/json"},
                read_timeout_ms=timeout_ms,
            )
        except ClientError:
            return False
        return bool(response.status == 200 and b'"error"' not in response.body)

    def leader(self, client: Any) -> str | None:
        from appliance.http import ClientError

        for name in self.procs:
            try:
                response = client.post(self.url(name, "/v3/maintenance/status"), b"{}")
            except ClientError:
                continue
            if response.status != 200:
                continue
            status = response.json()
            if status.get("leader") and status.get("leader") == status["header"]["member_id"]:
                return name
        return None

    def follows(self, client: Any, name: str) -> bool:
        from appliance.http import ClientError

        try:
            response = client.post(self.url(name, "/v3/maintenance/status"), b"{}")
        except ClientError:
            return False
        if response.status != 200:
            return False
        status = response.json()
        return bool(status.get("leader") and status["leader"] != status["header"]["member_id"])


class EtcdPeerTlsCluster(EtcdCluster):
    """etcd with peer TLS (mutual: --peer-client-cert-auth); clients stay on plain HTTP, as
    the Raft side's bench client does."""

    label = "etcd, peer TLS"
    peer_scheme = "https"

    def prepare(self, names: list[str]) -> None:
        self.pki = write_bench_pki(self.root, names, voters=False)

    def extra_args(self, name: str) -> list[str]:
        ca, cert, key = self.pki[name]
        return [
            f"--peer-cert-file={cert}",
            f"--peer-key-file={key}",
            f"--peer-trusted-ca-file={ca}",
            "--peer-client-cert-auth",
        ]


# -- the three measurements --------------------------------------------------------------------


def new_client() -> Any:
    from appliance.http import HttpClient

    return HttpClient(connect_timeout_ms=500, read_timeout_ms=5_000)


def measure_side(
    cluster: Cluster, sequential: int, parallel: int, failovers: int
) -> dict[str, Any]:
    load_before = loadavg()
    cluster.start()
    client = new_client()
    try:
        leader = cluster.wait_leader(client)
        for n in range(20):  # warm the connection and both sides' caches
            cluster.put(client, leader, b"warm-%d" % n)
        procs = list(cluster.procs.values())
        cpu_before = cpu_s(procs)
        cluster.inner_ms.clear()
        latencies = []
        for n in range(sequential):
            started = time.perf_counter()
            if not cluster.put(client, leader, b"seq-%d" % n):
                raise RuntimeError(f"{cluster.label}: sequential put {n} failed")
            latencies.append((time.perf_counter() - started) * 1000)

        seq_cpu_ms = (cpu_s(procs) - cpu_before) * 1000 / sequential
        inner_p50_ms = statistics.median(cluster.inner_ms) if cluster.inner_ms else None
        per_worker = parallel // 8
        failures = [0]

        def worker(w: int) -> None:
            own = new_client()
            for n in range(per_worker):
                if not cluster.put(own, leader, b"par-%d-%d" % (w, n)):
                    failures[0] += 1
            own.close()

        cpu_before = cpu_s(procs)
        started = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(worker, range(8)))
        committed = per_worker * 8 - failures[0]
        throughput = committed / (time.perf_counter() - started)
        par_cpu_ms = (cpu_s(procs) - cpu_before) * 1000 / max(1, committed)

        inproc = measure_in_process(cluster, client, leader, procs, sequential, parallel)

        failover_ms = []
        for n in range(failovers):
            if n:  # the member killed last time rejoins first: always three members up
                cluster.restart(client, leader)
                leader = cluster.wait_leader(client)
            failover_ms.append(failover(cluster, leader))
    finally:
        client.close()
        cluster.stop()
    return {
        "p50_ms": statistics.median(latencies),
        "p99_ms": percentile(latencies, 99),
        "throughput_per_s": throughput,
        "failed_puts": failures[0],
        "seq_cpu_ms": seq_cpu_ms,
        "inner_p50_ms": inner_p50_ms,
        "par_cpu_ms": par_cpu_ms,
        "failover_ms": statistics.median(failover_ms),
        "inproc": inproc,
        "failover_each_ms": failover_ms,
        "load": (load_before, loadavg()),
    }


def measure_in_process(
    cluster: Cluster,
    client: Any,
    leader: str,
    procs: list[subprocess.Popen[bytes]],
    sequential: int,
    parallel: int,
) -> dict[str, float] | None:
    """The same two loads with the proposers inside the leader (how the runner proposes)."""
    cpu_before = cpu_s(procs)
    each_before = cpu_each(cluster)
    seq = cluster.load(client, leader, 1, sequential)
    if seq is None:
        return None
    done = max(1, len(seq["latencies_ms"]))
    seq_cpu_ms = (cpu_s(procs) - cpu_before) * 1000 / done
    each_after = cpu_each(cluster)
    followers = [n for n in each_after if n != leader]
    leader_cpu_ms = (each_after[leader] - each_before[leader]) * 1000 / done
    follower_cpu_ms = sum(each_after[n] - each_before[n] for n in followers) * 1000 / done
    cpu_before = cpu_s(procs)
    par = cluster.load(client, leader, 8, parallel // 8)
    assert par is not None
    committed = len(par["latencies_ms"])
    return {
        "p50_ms": statistics.median(seq["latencies_ms"]),
        "p99_ms": percentile(seq["latencies_ms"], 99),
        "throughput_per_s": committed / par["elapsed_s"],
        "failed": seq["failed"] + par["failed"],
        "seq_cpu_ms": seq_cpu_ms,
        # the sequential phase's CPU split: the leader, and each follower on average
        "seq_leader_cpu_ms": leader_cpu_ms,
        "seq_follower_cpu_ms": follower_cpu_ms / max(1, len(followers)),
        "par_cpu_ms": (cpu_s(procs) - cpu_before) * 1000 / max(1, committed),
    }


def failover(cluster: Cluster, leader: str) -> float:
    """SIGKILL the leader process; ms until the first put on a survivor succeeds.

    A new attempt starts every ``ATTEMPT_EVERY_S`` (alternating survivors) without waiting for
    the earlier ones, so an attempt parked inside a member (etcd holds a put while it has no
    leader) never hides a commit that a fresh attempt would see: the figure is the first
    commit, to within one attempt interval, whatever each side does with a put it cannot serve.
    """
    survivors = [m for m in cluster.procs if m != leader]
    done = threading.Event()
    finished: list[float] = []
    lock = threading.Lock()

    def attempt(name: str, n: int) -> None:
        if done.is_set():
            return
        own = new_client()
        try:
            if cluster.put(own, name, b"after-failover-%d" % n, ATTEMPT_TIMEOUT_MS):
                with lock:
                    finished.append(time.monotonic())
                done.set()
        finally:
            own.close()

    pool = ThreadPoolExecutor(ATTEMPTS_MAX)
    killed_at = time.monotonic()
    cluster.kill(leader)
    n = 0
    while not done.is_set() and time.monotonic() < killed_at + FAILOVER_TIMEOUT_S:
        pool.submit(attempt, survivors[n % len(survivors)], n)
        n += 1
        done.wait(ATTEMPT_EVERY_S)
    pool.shutdown(wait=False, cancel_futures=True)  # parked attempts end with the cluster
    with lock:
        if not finished:
            raise RuntimeError(f"{cluster.label}: nothing committed after the leader was killed")
        return (min(finished) - killed_at) * 1000


def cpu_s(procs: list[subprocess.Popen[bytes]]) -> float:
    """User + system CPU seconds used so far by these processes (Linux /proc)."""
    return sum(cpu_of(proc.pid) for proc in procs)


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of one process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def cpu_each(cluster: Cluster) -> dict[str, float]:
    return {name: cpu_of(proc.pid) for name, proc in cluster.procs.items()}


# -- the physical floor ------------------------------------------------------------------------


def measure_floor(root: Path, samples: int) -> dict[str, float]:
    import falcon

    from appliance.config.contract import contract_digest, sealed_contract
    from appliance.config.runner import parse_runner_config
    from appliance.http import HttpServer
    from appliance.store.runner_store import RunnerStore
    from tests.replication.test_raft_member import runner_doc

    cfg = parse_runner_config(runner_doc("f1", {"f1": 1, "f2": 2, "f3": 3}, root / "floor"))
    digest = contract_digest(cfg)
    store = RunnerStore.create_or_open(
        cfg.data_dir, contract=sealed_contract(cfg), contract_digest=digest
    )
    sqlite_ms = []
    for n in range(1, samples + 1):
        started = time.perf_counter()
        store.persist(term=1, voted_for="f1", entries=[(n, 1, b"\x01" + b"x" * 100)])
        sqlite_ms.append((time.perf_counter() - started) * 1000)
    store.close()

    raw_ms = []
    fd = os.open(root / "floor.wal", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(samples):
            started = time.perf_counter()
            os.write(fd, b"x" * 128)
            os.fdatasync(fd)
            raw_ms.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(fd)

    class Accept:
        def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
            req.bounded_stream.read(req.content_length or 0)
            resp.status = falcon.HTTP_202
            resp.data = b""

    app = falcon.App()
    app.add_route("/raft/v1/append", Accept())
    port = free_ports(1)[0]
    server = HttpServer(app, host="127.0.0.1", port=port, name="floor", body_bytes_max=65536)
    server.start()
    client = new_client()
    url = f"http://127.0.0.1:{port}/raft/v1/append"
    http_ms = []
    try:
        for n in range(samples + 20):
            started = time.perf_counter()
            client.post(url, b"y" * 200)
            if n >= 20:
                http_ms.append((time.perf_counter() - started) * 1000)
    finally:
        client.close()
        server.stop()
    sqlite = statistics.median(sqlite_ms)
    raw = statistics.median(raw_ms)
    http = statistics.median(http_ms)
    return {
        "sqlite_append_ms": sqlite,
        "raw_fdatasync_ms": raw,
        "http_rtt_ms": http,
        "floor_sqlite_ms": 2 * sqlite + http,
        "floor_raw_ms": 2 * raw + http,
    }


# -- the run -----------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def fmt_side(name: str, r: dict[str, Any]) -> str:
    inner = "-" if r["inner_p50_ms"] is None else f"{r['inner_p50_ms']:.2f}"
    return (
        f"| {name} | {r['p50_ms']:.2f} | {inner} | {r['p99_ms']:.2f} | "
        f"{r['throughput_per_s']:.0f} | "
        f"{r['failover_ms']:.0f} ({', '.join(f'{x:.0f}' for x in r['failover_each_ms'])}) | "
        f"{r['seq_cpu_ms']:.2f} / {r['par_cpu_ms']:.2f} | "
        f"{r['load'][0]:.1f} → {r['load'][1]:.1f} |"
    )


def fmt_inproc(name: str, r: dict[str, Any]) -> str:
    i = r["inproc"]
    return (
        f"| {name} | {i['p50_ms']:.2f} | {i['p99_ms']:.2f} | {i['throughput_per_s']:.0f} | "
        f"{i['seq_cpu_ms']:.2f} / {i['par_cpu_ms']:.2f} |"
    )


def fmt_floor(f: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in f.items())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--voter", help=argparse.SUPPRESS)
    parser.add_argument("--pysyncobj-voter", help=argparse.SUPPRESS)
    parser.add_argument("--client-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sequential", type=int, default=300)
    parser.add_argument("--parallel", type=int, default=2000)
    parser.add_argument("--failovers", type=int, default=3, help="per side per round")
    parser.add_argument("--floor-samples", type=int, default=300)
    parser.add_argument(
        "--tls",
        action="store_true",
        help="also the TLS sides: our voters with mutual TLS, etcd with peer TLS (issue 18)",
    )
    parser.add_argument("--only-tls-pairs", action="store_true", help="with --tls: skip pysyncobj")
    parser.add_argument(
        "--baseline-ref",
        default=BASELINE_REF,
        help="also run the Raft voters of this commit (git archive) in the same rounds; "
        "'none' to skip",
    )
    parser.add_argument(
        "--sides",
        default=None,
        help="comma-separated subset of raft,raft-base,etcd,pysyncobj (default: all available)",
    )
    args = parser.parse_args()
    if args.voter:
        sys.exit(voter_main(args.voter, args.client_port))
    if args.pysyncobj_voter:
        sys.exit(pysyncobj_voter_main(args.pysyncobj_voter, args.client_port))
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    with contextlib.ExitStack() as stack:
        if args.baseline_ref != "none":
            BaselineRaftCluster.tree = stack.enter_context(tree_of(args.baseline_ref))
        run(args)


def run(args: argparse.Namespace) -> None:
    sides = ["raft"]
    if args.baseline_ref != "none":
        sides.append("raft-base")
    if os.path.exists(ETCD):
        sides.append("etcd")
    else:
        print(f"etcd not found ({ETCD}): the etcd side is skipped (apt-get install etcd-server)")
    if args.only_tls_pairs:
        pass
    elif importlib.util.find_spec("pysyncobj") is not None:
        sides.append("pysyncobj")
    else:
        print("pysyncobj not installed: that side is skipped (pip install -e '.[bench]')")
    if args.tls:
        sides.append("raft-mtls")
        if "etcd" in sides:
            sides.append("etcd-peer-tls")
    if args.sides:
        wanted = args.sides.split(",")
        sides = [side for side in sides if side in wanted]
    kinds = {
        "raft": RaftCluster,
        "raft-base": BaselineRaftCluster,
        "etcd": EtcdCluster,
        "pysyncobj": PySyncObjCluster,
        "raft-mtls": RaftTlsCluster,
        "etcd-peer-tls": EtcdPeerTlsCluster,
    }
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in kinds}
    floors = []
    head = git_head()
    print(
        f"rounds={args.rounds} sequential={args.sequential} parallel={args.parallel} "
        f"sides={','.join(sides)} this={head} baseline={args.baseline_ref} "
        f"loadavg at start: {read_loadavg()}"
    )
    for round_ in range(args.rounds):
        shift = round_ % len(sides)
        order = sides[shift:] + sides[:shift]  # each side goes first in turn
        for side in order:
            with tempfile.TemporaryDirectory() as tmp:
                # the floor right before each side: the disk is shared, its speed drifts
                floors.append(measure_floor(Path(tmp), args.floor_samples))
                print(f"round {round_ + 1} floor {fmt_floor(floors[-1])}", flush=True)
                cluster = kinds[side](Path(tmp))
                r = measure_side(cluster, args.sequential, args.parallel, args.failovers)
            results[side].append(r)
            print(f"round {round_ + 1} {fmt_side(side, r)}", flush=True)
            if r.get("inproc"):
                print(f"round {round_ + 1} in-process {fmt_inproc(side, r)}", flush=True)
    print(f"\nloadavg at the end: {read_loadavg()}")
    report(results, floors)
    report_targets(results, head, args.baseline_ref)


BASELINE_REF = "08f87a9"  # main before issue 37's changes


def read_loadavg() -> str:
    """The 1-, 5- and 15-minute load averages, as /proc/loadavg gives them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def git_head() -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


@contextlib.contextmanager
def tree_of(ref: str) -> Iterator[Path]:
    """The tree of ``ref`` extracted aside (removed afterwards)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref], check=True, capture_output=True
    ).stdout
    with tempfile.TemporaryDirectory(prefix="bench-raft-baseline-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp)


def med(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def med_inproc(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r["inproc"][key] for r in rows)


def pooled_failover(rows: list[dict[str, Any]]) -> float:
    return statistics.median(x for r in rows for x in r["failover_each_ms"])


def report(results: dict[str, list[dict[str, Any]]], floors: list[dict[str, float]]) -> None:
    floor = {k: statistics.median(f[k] for f in floors) for k in floors[0]}
    print()
    print(
        "| side | seq p50 ms | seq p50 inside the leader ms | seq p99 ms | 8 proposers /s "
        "| failover ms, median (each) "
        "| CPU ms per commit, 3 members (seq / 8 proposers) | load 1-min |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for side in ("raft", "etcd"):
        for i, r in enumerate(results[side]):
            print(fmt_side(f"{side} round {i + 1}", r))
    print()
    print(
        f"floor parts (medians): SQLite durable append {floor['sqlite_append_ms']:.3f} ms, "
        f"raw append+fdatasync {floor['raw_fdatasync_ms']:.3f} ms, loopback HTTP round trip "
        f"{floor['http_rtt_ms']:.3f} ms → floor (SQLite) {floor['floor_sqlite_ms']:.2f} ms, "
        f"floor (raw WAL) {floor['floor_raw_ms']:.2f} ms"
    )
    lowest = {k: min(f[k] for f in floors) for k in floors[0]}
    print(f"lowest of the {len(floors)} floor measurements: {fmt_floor(lowest)}")
    raft = results["raft"]
    rows: list[tuple[str, Callable[[list[dict[str, Any]]], float], bool]] = [
        ("sequential p50 ms", lambda rs: med(rs, "p50_ms"), False),
        ("sequential p99 ms", lambda rs: med(rs, "p99_ms"), False),
        ("throughput, 8 proposers /s", lambda rs: med(rs, "throughput_per_s"), True),
        ("failover ms (all samples)", pooled_failover, False),
    ]
    print()
    print("| median of rounds | raft | etcd | raft / etcd | target | met |")
    print("|---|---|---|---|---|---|")
    for name, get, higher_better in rows:
        ours = get(raft)
        if not results["etcd"]:
            print(f"| {name} | {ours:.2f} | - | - | - | etcd skipped |")
            continue
        theirs = get(results["etcd"])
        ratio = ours / theirs
        target = "≥ 1.0" if higher_better else "≤ 1.0"
        met = ratio >= 1.0 if higher_better else ratio <= 1.0
        if name == "sequential p99 ms":
            target, verdict = "-", "-"
        else:
            verdict = "met" if met else "NOT met"
        print(f"| {name} | {ours:.2f} | {theirs:.2f} | {ratio:.2f} | {target} | {verdict} |")
    report_in_process(results)
    report_python_peer(results)
    report_tls(results)
    p50 = med(raft, "p50_ms")
    line = (
        f"raft p50 / floor (SQLite) = {p50 / floor['floor_sqlite_ms']:.2f}, "
        f"/ floor (raw WAL) = {p50 / floor['floor_raw_ms']:.2f}"
    )
    if results["etcd"]:
        e50 = med(results["etcd"], "p50_ms")
        line += (
            f"; etcd p50 / floor (raw WAL) = {e50 / floor['floor_raw_ms']:.2f}, "
            f"/ floor (SQLite) = {e50 / floor['floor_sqlite_ms']:.2f}"
        )
    print(line)


def report_targets(results: dict[str, list[dict[str, Any]]], head: str, baseline: str) -> None:
    """Issue 37's Must-show rows: this checkout and the baseline, each against etcd in the same
    rounds (medians of rounds; the paired column is the median of each round's own ratio)."""
    etcd = results["etcd"]
    if not etcd or not results["raft"]:
        return
    print()
    print(f"Issue 37 targets (medians of rounds; this = {head}, baseline = {baseline}):")
    print("| target | etcd | this | this / etcd (paired) | baseline | baseline / etcd | met |")
    print("|---|---|---|---|---|---|---|")
    rows: list[tuple[str, Callable[[dict[str, Any]], float], str, float, bool]] = [
        (
            "sequential p50 ms, proposers in the leader",
            lambda r: r["inproc"]["p50_ms"],
            "p50_ms",
            1.0,
            False,
        ),
        (
            "CPU ms per sequential commit, 3 members, proposers in the leader",
            lambda r: r["inproc"]["seq_cpu_ms"],
            "seq_cpu_ms",
            1.5,
            False,
        ),
        (
            "CPU ms per sequential commit, 3 members, HTTP client",
            lambda r: r["seq_cpu_ms"],
            "seq_cpu_ms",
            1.5,
            False,
        ),
        (
            "throughput /s, 8 proposers through an HTTP client",
            lambda r: r["throughput_per_s"],
            "throughput_per_s",
            1.0,
            True,
        ),
        (
            "throughput /s, 8 proposers in the leader",
            lambda r: r["inproc"]["throughput_per_s"],
            "throughput_per_s",
            1.0,
            True,
        ),
    ]
    for name, ours, key, bound, higher in rows:
        theirs = med(etcd, key)
        cells = [name, f"{theirs:.2f}"]
        verdict = "-"
        for side in ("raft", "raft-base"):
            rs = [r for r in results[side] if r.get("inproc")]
            if not rs:
                cells += ["-", "-"]
                continue
            value = statistics.median(ours(r) for r in rs)
            paired = statistics.median(ours(r) / e[key] for r, e in zip(rs, etcd, strict=False))
            ratio = value / theirs
            cells += [f"{value:.2f}", f"{ratio:.2f} ({paired:.2f})"]
            if side == "raft":
                ok = ratio >= bound if higher else ratio <= bound
                verdict = ("met" if ok else "NOT met") + f" ({'≥' if higher else '≤'} {bound})"
        print("| " + " | ".join([*cells, verdict]) + " |")
    theirs = pooled_failover(etcd)
    cells = ["failover ms (all samples)", f"{theirs:.0f}"]
    verdict = "-"
    for side in ("raft", "raft-base"):
        if not results[side]:
            cells += ["-", "-"]
            continue
        value = pooled_failover(results[side])
        cells += [f"{value:.0f}", f"{value / theirs:.2f}"]
        if side == "raft":
            verdict = ("met" if value / theirs <= 0.3 else "NOT met") + " (≤ 0.3)"
    print("| " + " | ".join([*cells, verdict]) + " |")
    for side in ("raft", "raft-base"):
        rs = [r for r in results[side] if r.get("inproc")]
        if rs:
            split = ", ".join(
                f"{k} {statistics.median(r['inproc'][k] for r in rs):.2f}"
                for k in ("seq_leader_cpu_ms", "seq_follower_cpu_ms")
            )
            print(f"{side}: CPU ms per sequential commit in the leader-proposer phase: {split}")


def report_in_process(results: dict[str, list[dict[str, Any]]]) -> None:
    """The built-in Raft as the runner uses it (proposals from threads inside the leader) next
    to etcd as the runner's etcd backend uses it (an HTTP client)."""
    rows = [r for r in results["raft"] if r.get("inproc")]
    if not rows:
        return
    print()
    print("Raft with the proposers inside the leader (no client hop; how the runner proposes):")
    print("| side | seq p50 ms | seq p99 ms | 8 proposers /s | CPU ms per commit (seq / 8) |")
    print("|---|---|---|---|---|")
    for i, r in enumerate(rows):
        print(fmt_inproc(f"raft round {i + 1}", r))
    if not results["etcd"]:
        return
    inner = {k: statistics.median(r["inproc"][k] for r in rows) for k in rows[0]["inproc"]}
    print()
    print("| median of rounds | raft, in-process proposers | etcd, HTTP client | raft / etcd |")
    print("|---|---|---|---|")
    for name, key in (
        ("sequential p50 ms", "p50_ms"),
        ("sequential p99 ms", "p99_ms"),
        ("throughput, 8 proposers /s", "throughput_per_s"),
    ):
        theirs = med(results["etcd"], key)
        print(f"| {name} | {inner[key]:.2f} | {theirs:.2f} | {inner[key] / theirs:.2f} |")
    report_paired(results["raft"], results["etcd"])


def report_paired(raft_rows: list[dict[str, Any]], etcd_rows: list[dict[str, Any]]) -> None:
    """Each round's ratio against etcd in the SAME round: the rounds interleave the two sides
    so that each pair shares the machine's conditions, which a ratio of medians ignores."""
    pairs = [(r, e) for r, e in zip(raft_rows, etcd_rows, strict=False) if r.get("inproc")]
    if not pairs:
        return
    print()
    print(
        "| paired by round (in-process raft / etcd, same round) | each round | median "
        "| rounds ≤ 1.0 (≥ 1.0 for throughput) |"
    )
    print("|---|---|---|---|")
    for name, key, higher_better in (
        ("sequential p50", "p50_ms", False),
        ("sequential p99", "p99_ms", False),
        ("throughput, 8 proposers", "throughput_per_s", True),
    ):
        ratios = [r["inproc"][key] / e[key] for r, e in pairs]
        good = sum(1 for x in ratios if (x >= 1.0 if higher_better else x <= 1.0))
        each = ", ".join(f"{x:.2f}" for x in ratios)
        print(f"| {name} | {each} | {statistics.median(ratios):.2f} | {good} of {len(ratios)} |")


def report_tls(results: dict[str, list[dict[str, Any]]]) -> None:
    """The TLS row (issue 18): our voters with mutual TLS next to our plaintext voters and to
    etcd with peer TLS, same run; the target is our TLS p50 at most 1.3 times our plaintext p50."""
    ours = results["raft-mtls"]
    if not ours:
        return
    print()
    print("TLS, same rounds:")
    for side in ("raft-mtls", "etcd-peer-tls"):
        for i, r in enumerate(results[side]):
            print(fmt_side(f"{side} round {i + 1}", r))
            if r.get("inproc"):
                print(fmt_inproc(f"{side} round {i + 1}, in-process", r))
    plain = results["raft"]
    print()
    print("| median of rounds | raft plain | raft mTLS | mTLS / plain | target | met |")
    print("|---|---|---|---|---|---|")
    for name, get in (
        ("sequential p50 ms, HTTP client", lambda rs: med(rs, "p50_ms")),
        ("sequential p50 ms, in-process", lambda rs: med_inproc(rs, "p50_ms")),
    ):
        a, b = get(plain), get(ours)
        verdict = "met" if b / a <= 1.3 else "NOT met"
        print(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.2f} | ≤ 1.3 | {verdict} |")
    theirs = results["etcd-peer-tls"]
    if theirs:
        print()
        print("| median of rounds | raft mTLS | etcd peer TLS | raft / etcd |")
        print("|---|---|---|---|")
        for name, get in (
            ("sequential p50 ms (HTTP client)", lambda rs: med(rs, "p50_ms")),
            ("throughput /s, 8 proposers", lambda rs: med(rs, "throughput_per_s")),
            ("failover ms (all samples)", pooled_failover),
        ):
            a, b = get(ours), get(theirs)
            print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f} |")
        a, b = med_inproc(ours, "p50_ms"), med(theirs, "p50_ms")
        print(f"| sequential p50 ms (raft in-process) | {a:.2f} | {b:.2f} | {a / b:.2f} |")


def report_python_peer(results: dict[str, list[dict[str, Any]]]) -> None:
    """The built-in Raft (fsync on) next to pysyncobj (a Python Raft, fsync off)."""
    theirs = results["pysyncobj"]
    if not theirs:
        return
    print()
    print("pysyncobj (a Python Raft; its journal is never fsynced), same rounds:")
    for i, r in enumerate(theirs):
        print(fmt_side(f"pysyncobj round {i + 1}", r))
        print(fmt_inproc(f"pysyncobj round {i + 1}, in-process", r))
    ours = results["raft"]
    print()
    print("| median of rounds | raft | pysyncobj | raft / pysyncobj |")
    print("|---|---|---|---|")
    for name, get in (
        ("sequential p50 ms, HTTP client", lambda rs: med(rs, "p50_ms")),
        ("throughput /s, HTTP client", lambda rs: med(rs, "throughput_per_s")),
        (
            "sequential p50 ms, in-process",
            lambda rs: statistics.median(r["inproc"]["p50_ms"] for r in rs),
        ),
        (
            "throughput /s, in-process",
            lambda rs: statistics.median(r["inproc"]["throughput_per_s"] for r in rs),
        ),
        ("failover ms (all samples)", pooled_failover),
    ):
        a, b = get(ours), get(theirs)
        print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
