"""The loopback cluster that ``appliance cluster init`` writes: ports, configs, credential names.

Theory of operation: a pure function of (voter count, base port, output directory, now, a token
source) returns every file's content, so the whole layout is testable without touching a disk and
``writer`` only has to put bytes in place. One port plan is shared by every config, which is what
makes the cluster hang together:

    base + i        voter i's cluster (Raft) port        i = 0 … voters-1
    base + 10 + i   voter i's admission route
    base + 20 + i   voter i's management listener (loopback)
    base + 30 + j   worker j's scheduled routes             j = 0 … workers-1

Everything sealed in the contract (the voter mapping, limits, initial schedules and the remote
config with its grant expiry) is computed once and copied into every voter's config, so the
contract digest is identical across voters by construction; only per-node fields differ.
The documents themselves are built by ``appliance.config.loopback``, which the quickstart
shares; this module owns the port plan and the cluster's names.

Credentials: six roles, six fresh values (``secrets.token_urlsafe``), all distinct, because the
runner refuses to start when two roles share a value (SPEC §6). The admission, cluster and worker
credentials are shared by the voters (one cluster, one worker); the operator, recovery and admin
credentials guard every voter's management listener (admin: the contract amendments and the voter
changes, so ``add-voter`` works from the env file alone). Configs only *name* the variables.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from appliance.cluster_init import pki
from appliance.config.loopback import (
    ENV_NAMES,
    LOOPBACK,
    TOKEN_BYTES,
    grant_expiry,
    remote_section,
    runner_document,
    worker_document,
)
from appliance.http.tls import voter_name

VOTERS_ALLOWED: Final = (1, 3, 5, 7, 9)  # odd: an even count tolerates no more failures
VOTERS_DEFAULT: Final = 3
# Issue 33: ``--workers N`` writes a fleet of N workers (one config each); one keeps the
# one-worker form (``remote.url`` + ``remote.worker_id``, ``worker.json``) byte for byte.
WORKERS_MIN: Final = 1
WORKERS_MAX: Final = 9  # a loopback demo; a real fleet holds up to 64 (remote.workers)
WORKERS_DEFAULT: Final = 1
PORT_SPAN: Final = 31  # the plan above uses base … base + 30 with one worker
BASE_PORT_MIN: Final = 1024  # unprivileged ports only: the cluster runs as a normal user
BASE_PORT_MAX: Final = 65535 - (PORT_SPAN - 1)
BASE_PORT_DEFAULT: Final = 7100
TLS_DIR: Final = "tls"
CA_CERT_FILE: Final = "ca.pem"
CA_KEY_FILE: Final = "ca.key"  # only for issuing certificates: no running process reads it
NAMESPACE: Final = "cluster"
WORKER_ID: Final = "worker-1"
SESSION: Final = "cluster-init"

DEMO_SCHEDULE: Final = {
    "name": "hello-cluster",
    "code": "console.log('hello from ' + scheduled.namespace + ' at ' + scheduled.due_time)",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}


class InvalidLayout(ValueError):
    """The requested cluster cannot be laid out (voter count or base port out of range)."""


@dataclass(frozen=True)
class VoterPorts:
    node_id: str
    cluster_port: int
    admission_port: int
    management_port: int


@dataclass(frozen=True)
class PortPlan:
    voters: tuple[VoterPorts, ...]
    worker_port: int  # the first worker's
    workers: int = 1

    @property
    def worker_ports(self) -> tuple[int, ...]:
        return tuple(self.worker_port + j for j in range(self.workers))


def worker_id_of(j: int) -> str:
    return f"worker-{j + 1}"


def worker_file_of(j: int, workers: int) -> str:
    """``worker.json`` for a one-worker cluster (as before the fleet), else ``worker-N.json``."""
    return "worker.json" if workers == 1 else f"{worker_id_of(j)}.json"


def worker_zone_of(j: int) -> str:
    """The ``zone`` label of worker j in a fleet (a, b, c …): what a placement rule matches."""
    return chr(ord("a") + j)


@dataclass(frozen=True)
class ClusterFiles:
    """Everything to write: file name → JSON-able document or text, plus the credentials."""

    runner_configs: dict[str, dict[str, Any]]  # "voter-1.json" → config
    worker_config: dict[str, Any]  # the first worker's
    credentials: dict[str, str]  # variable name → value
    plan: PortPlan
    # TLS material under TLS_DIR: file name → (PEM bytes, mode); empty for --no-tls.
    tls_files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    worker_configs: dict[str, dict[str, Any]] = field(default_factory=dict)  # file → config


def plan_ports(voters: int, base_port: int, workers: int = WORKERS_DEFAULT) -> PortPlan:
    if voters not in VOTERS_ALLOWED:
        raise InvalidLayout(f"--voters must be one of {', '.join(map(str, VOTERS_ALLOWED))}")
    if not WORKERS_MIN <= workers <= WORKERS_MAX:
        raise InvalidLayout(f"--workers must be within {WORKERS_MIN}..{WORKERS_MAX}, got {workers}")
    span = PORT_SPAN + workers - 1
    base_max = 65535 - (span - 1)
    if not BASE_PORT_MIN <= base_port <= base_max:
        raise InvalidLayout(
            f"--base-port must be within {BASE_PORT_MIN}..{base_max} "
            f"(the cluster uses ports base..base+{span - 1}), got {base_port}"
        )
    return PortPlan(
        voters=tuple(
            VoterPorts(f"voter-{i + 1}", base_port + i, base_port + 10 + i, base_port + 20 + i)
            for i in range(voters)
        ),
        worker_port=base_port + 30,
        workers=workers,
    )


def fresh_credentials(token: Callable[[int], str] = secrets.token_urlsafe) -> dict[str, str]:
    """One fresh value per role; raises if the source ever repeats one (it must not)."""
    values = {name: token(TOKEN_BYTES) for name in ENV_NAMES.values()}
    if len(set(values.values())) != len(values):
        raise InvalidLayout("the token source returned the same credential twice")
    return values


def runner_config(
    me: VoterPorts, plan: PortPlan, data_root: Path, remote: dict[str, Any], demo: bool
) -> dict[str, Any]:
    return runner_document(
        node_id=me.node_id,
        cluster_port=me.cluster_port,
        peers=[
            f"{peer.node_id}@{LOOPBACK}:{peer.cluster_port}"
            for peer in plan.voters
            if peer.node_id != me.node_id
        ],
        data_dir=data_root / me.node_id,
        admission_port=me.admission_port,
        management_port=me.management_port,
        schedules=[DEMO_SCHEDULE] if demo else [],
        remote=remote,
    )


def worker_config(plan: PortPlan, data_root: Path, j: int = 0) -> dict[str, Any]:
    worker_id = worker_id_of(j)
    return worker_document(
        namespace=NAMESPACE,
        worker_id=worker_id,
        data_dir=data_root / worker_id,
        admission_ports=[voter.admission_port for voter in plan.voters],
        worker_port=plan.worker_ports[j],
    )


def fleet_remote(remote: dict[str, Any], plan: PortPlan, tls: bool) -> dict[str, Any]:
    """The one-worker ``remote`` (tls-adjusted) turned into a fleet of ``plan.workers``: each
    worker on its own port, labelled ``zone`` a, b, c … so placement rules have something to
    match; the credentials are the shared ones."""
    scheme = "https" if tls else "http"
    out = {k: v for k, v in remote.items() if k not in ("url", "worker_id")}
    out["workers"] = [
        {
            "worker_id": worker_id_of(j),
            "url": f"{scheme}://{LOOPBACK}:{port}",
            "labels": {"zone": worker_zone_of(j)},
        }
        for j, port in enumerate(plan.worker_ports)
    ]
    return out


def _https(url: str) -> str:
    return "https://" + url.removeprefix("http://")


def tls_material(plan: PortPlan) -> dict[str, tuple[bytes, int]]:
    """A cluster CA and a certificate for every voter and the worker (appliance.cluster_init.
    pki): every certificate names localhost and 127.0.0.1; a voter's also its identity."""
    authority = pki.new_authority("appliance cluster CA")
    files: dict[str, tuple[bytes, int]] = {
        CA_CERT_FILE: (authority.cert_pem(), pki.CERT_MODE),
        CA_KEY_FILE: (authority.key_pem(), pki.KEY_MODE),
    }
    nodes = [(v.node_id, ["localhost", voter_name(v.node_id)]) for v in plan.voters]
    nodes += [(worker_id_of(j), ["localhost"]) for j in range(plan.workers)]
    for name, dns in nodes:
        issued = pki.issue(authority, name, dns_names=dns, ip_addresses=[LOOPBACK])
        files[f"{name}.pem"] = (issued.cert_pem(), pki.CERT_MODE)
        files[f"{name}.key"] = (issued.key_pem(), pki.KEY_MODE)
    return files


def tls_section(tls_dir: Path, name: str) -> dict[str, Any]:
    return {
        "ca_file": str(tls_dir / CA_CERT_FILE),
        "cert_file": str(tls_dir / f"{name}.pem"),
        "key_file": str(tls_dir / f"{name}.key"),
    }


def lay_out(
    voters: int,
    base_port: int,
    out_dir: Path,
    now: datetime,
    *,
    demo: bool = True,
    tls: bool = False,
    token: Callable[[int], str] = secrets.token_urlsafe,
    workers: int = WORKERS_DEFAULT,
) -> ClusterFiles:
    """Every config and credential of a loopback cluster rooted at ``out_dir`` (absolute).

    ``tls``: a cluster CA and node certificates under ``out_dir/tls``, wired into every config
    (mutual TLS between voters, https for the worker and admission); ``cluster init`` asks for it
    unless ``--no-tls``. ``workers``: a fleet of that many workers (issue 33)."""
    plan = plan_ports(voters, base_port, workers)
    remote = remote_section(
        plan.worker_port,
        grant_expiry(now),
        session=SESSION,
        namespace=NAMESPACE,
        worker_id=WORKER_ID,
    )
    if tls:
        remote = {**remote, "url": _https(remote["url"])}
    if workers > 1:
        remote = fleet_remote(remote, plan, tls)
    data_root = out_dir / "data"
    runner_configs = {
        f"{voter.node_id}.json": runner_config(voter, plan, data_root, remote, demo)
        for voter in plan.voters
    }
    worker_configs = {
        worker_file_of(j, workers): worker_config(plan, data_root, j) for j in range(workers)
    }
    tls_files: dict[str, tuple[bytes, int]] = {}
    if tls:
        tls_dir = out_dir / TLS_DIR
        tls_files = tls_material(plan)
        for voter in plan.voters:
            runner_configs[f"{voter.node_id}.json"]["tls"] = tls_section(tls_dir, voter.node_id)
        for worker in worker_configs.values():
            worker["tls"] = tls_section(tls_dir, worker["worker_id"])
            worker["admission_urls"] = [_https(url) for url in worker["admission_urls"]]
    return ClusterFiles(
        runner_configs=runner_configs,
        worker_config=next(iter(worker_configs.values())),
        worker_configs=worker_configs,
        credentials=fresh_credentials(token),
        plan=plan,
        tls_files=tls_files,
    )
