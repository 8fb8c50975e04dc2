"""The config documents the appliance writes for itself: a voter and a worker on loopback.

Theory of operation: ``appliance quickstart`` (one voter) and ``appliance cluster init`` (a
voter set) both generate a runner config per voter and one worker config, all on 127.0.0.1 and all
naming the same six credential variables. The documents are built here, from explicit ports and
names, so both commands produce the same shape and stay valid together when a config field is
added; each caller keeps its own choice of ports (a fixed plan or free ports), directories,
namespace and demo schedule.

Credentials: one variable per role (SPEC §6); configs only *name* them. The env files also export
``APPLIANCE_MANAGEMENT_ADDR`` (every voter's management listener), which ``appliance admin``
reads when no ``--addr`` is given. A fresh value is
``secrets.token_urlsafe(TOKEN_BYTES)``, whose alphabet ``[A-Za-z0-9_-]`` is safe unquoted in a
shell and in an ``Authorization`` header. The operator and recovery names are the defaults of
``appliance admin --token-env``, so the admin commands printed for a generated deployment need no
flag.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from appliance.config.rfc3339 import format_utc

LOOPBACK: Final = "127.0.0.1"
TOKEN_BYTES: Final = 32
GRANT_DAYS: Final = 365
REMOTE_TIMEOUT_SECONDS: Final = 60
REMOTE_HEAP_MB: Final = 64
ENV_NAMES: Final = {
    "admission": "MCP_SCHEDULER_ADMISSION_TOKEN",
    "cluster": "MCP_SCHEDULER_CLUSTER_TOKEN",
    "worker": "MCP_SCHEDULER_WORKER_TOKEN",
    "operator": "MCP_SCHEDULER_OPERATOR_TOKEN",
    "recovery": "MCP_SCHEDULER_RECOVERY_TOKEN",
    # The contract amendments and voter changes (management.admin_bearer_env, issue 20): written
    # too (issue 35), so the add-voter that ``cluster init --join`` prints works as printed.
    "admin": "MCP_SCHEDULER_ADMIN_TOKEN",
}
# Where ``appliance admin`` finds the management listeners (comma-separated); the env files of
# quickstart and cluster init export it, so a loaded env file needs no --addr.
MANAGEMENT_ADDR_ENV: Final = "APPLIANCE_MANAGEMENT_ADDR"


def fresh_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def grant_expiry(now: datetime) -> datetime:
    """The remote grant's expiry for a config generated at ``now`` (aware), in whole seconds."""
    return now.astimezone(UTC).replace(microsecond=0) + timedelta(days=GRANT_DAYS)


def remote_section(
    worker_port: int, expires_at: datetime, *, session: str, namespace: str, worker_id: str
) -> dict[str, Any]:
    """The runner's ``remote`` object: the loopback worker and its grant (both sealed)."""
    return {
        "url": f"http://{LOOPBACK}:{worker_port}",
        "bearer_env": ENV_NAMES["worker"],
        "expires_at": format_utc(expires_at),
        "session": session,
        "timeout_seconds": REMOTE_TIMEOUT_SECONDS,
        "heap_mb": REMOTE_HEAP_MB,
        "namespace": namespace,
        "worker_id": worker_id,
    }


def management_section(port: int) -> dict[str, Any]:
    """The runner's ``management`` object: a loopback listener for the operator, recovery and
    admin credentials."""
    return {
        "addr": f"{LOOPBACK}:{port}",
        "bearer_env": ENV_NAMES["operator"],
        "recovery_bearer_env": ENV_NAMES["recovery"],
        "admin_bearer_env": ENV_NAMES["admin"],
    }


# The web console's dashboard credential (issue 34): the quickstart writes it; ``cluster init``
# leaves the console to the operator (it is per node, and off by default).
CONSOLE_ENV: Final = "APPLIANCE_CONSOLE_TOKEN"


def console_section(port: int) -> dict[str, Any]:
    """The runner's ``console`` object: the loopback web console, read-only (no actions)."""
    return {"addr": f"{LOOPBACK}:{port}", "bearer_env": CONSOLE_ENV}


def env_line(name: str, value: str) -> str:
    """``export NAME=value``: tokens are [A-Za-z0-9_-] and addresses [0-9.:,], safe unquoted."""
    return f"export {name}={value}"


def admission_url(port: int) -> str:
    return f"http://{LOOPBACK}:{port}"


def runner_document(
    *,
    node_id: str,
    cluster_port: int,
    peers: Sequence[str],
    data_dir: Path,
    admission_port: int,
    management_port: int,
    schedules: Sequence[dict[str, Any]],
    remote: dict[str, Any],
) -> dict[str, Any]:
    """One voter's runner config (``peers`` as ``node@host:port``; empty for ``single``)."""
    return {
        "node_id": node_id,
        "advertise_addr": LOOPBACK,
        "cluster_port": cluster_port,
        "peers": list(peers),
        "data_dir": str(data_dir),
        "admission_addr": f"{LOOPBACK}:{admission_port}",
        "admission_bearer_env": ENV_NAMES["admission"],
        "cluster_bearer_env": ENV_NAMES["cluster"],
        "schedules": [dict(schedule) for schedule in schedules],
        "remote": dict(remote),
        "management": management_section(management_port),
    }


def worker_document(
    *,
    namespace: str,
    worker_id: str,
    data_dir: Path,
    admission_ports: Sequence[int],
    worker_port: int,
) -> dict[str, Any]:
    """The worker's config: its loopback listener and every voter's admission route."""
    return {
        "namespace": namespace,
        "worker_id": worker_id,
        "data_dir": str(data_dir),
        "bearer_env": ENV_NAMES["worker"],
        "admission_bearer_env": ENV_NAMES["admission"],
        "admission_urls": [admission_url(port) for port in admission_ports],
        "listen_addr": f"{LOOPBACK}:{worker_port}",
    }
