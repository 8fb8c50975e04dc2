"""The sealed contract: what every voter of one cluster must agree on (SPEC §4, seeds/001).

Theory of operation: the contract is the voter mapping (every voter, this node included, id →
``host:cluster_port``), the limits, the initial definitions, the remote config and the replication
backend (a store sealed for the built-in Raft refuses etcd, and the reverse). Because the
mapping includes this node, every voter computes the same set from its own config, so the digest
(SHA-256 of canonical JSON) is identical across a correctly configured cluster and differs as soon
as one voter disagrees about any sealed value. Every value is normalized before hashing (hosts
lower-cased, IPv6 compressed, origins with default ports dropped, expiry in UTC with ``Z``, limits
with every field explicit) so equal meanings give equal bytes.

Per-node settings are deliberately left out: ``node_id`` as "who am I", ``data_dir``,
``admission_addr``, ``management``, ``raft`` timings and credential *names* of this node's own
listeners — they may differ between voters without changing what is scheduled. The remote
``bearer_env`` is the name of the variable, not the value, and is part of the remote config.
"""

from __future__ import annotations

from typing import Any

from appliance.config.replication import contract_entry
from appliance.config.rfc3339 import format_utc, parse_rfc3339
from appliance.config.runner import RemoteConfig, RunnerConfig, WorkerSpec
from appliance.config.urls import parse_origin
from appliance.core.canonical import canonical_digest
from appliance.core.definition import definition_to_json
from appliance.core.limits import limits_to_json
from appliance.core.placement import labels_json


def worker_to_json(worker: WorkerSpec) -> dict[str, Any]:
    """One fleet entry as the contract seals it (defaults written as null, labels sorted)."""
    return {
        "worker_id": worker.worker_id,
        "url": worker.url.url,
        "labels": labels_json(worker.labels),
        "bearer_env": worker.bearer_env,
        "admission_bearer_env": worker.admission_bearer_env,
    }


def worker_from_json(value: dict[str, Any]) -> WorkerSpec:
    return WorkerSpec(
        worker_id=value["worker_id"],
        url=parse_origin(value["url"]),
        labels=tuple(sorted(value["labels"].items())),
        bearer_env=value["bearer_env"],
        admission_bearer_env=value["admission_bearer_env"],
    )


def remote_to_json(remote: RemoteConfig) -> dict[str, Any]:
    """The sealed remote. The one-worker form (``url`` + ``worker_id``) digests exactly as it
    did before the fleet; a fleet has ``workers`` instead of those two keys (issue 33)."""
    out: dict[str, Any] = {
        "bearer_env": remote.bearer_env,
        "expires_at": format_utc(remote.expires_at),
        "session": remote.session,
        "timeout_seconds": remote.timeout_seconds,
        "heap_mb": remote.heap_mb,
        "namespace": remote.namespace,
    }
    if remote.workers:
        out["workers"] = [worker_to_json(w) for w in remote.workers]
    else:
        out["url"] = remote.url.url if remote.url is not None else None
        out["worker_id"] = remote.worker_id
    return out


def remote_from_json(value: dict[str, Any]) -> RemoteConfig:
    """The inverse of :func:`remote_to_json` (a sealed or amended contract's remote)."""
    workers = tuple(worker_from_json(w) for w in value.get("workers") or ())
    url = value.get("url")
    return RemoteConfig(
        url=None if workers or url is None else parse_origin(url),
        bearer_env=value["bearer_env"],
        expires_at=parse_rfc3339(value["expires_at"]),
        session=value["session"],
        timeout_seconds=value["timeout_seconds"],
        heap_mb=value["heap_mb"],
        namespace=value["namespace"],
        worker_id=None if workers else value.get("worker_id"),
        workers=workers,
    )


def sealed_contract(cfg: RunnerConfig) -> dict[str, Any]:
    return {
        "voters": {node_id: str(addr) for node_id, addr in cfg.voters.items()},
        "limits": limits_to_json(cfg.limits),
        "schedules": [definition_to_json(d) for d in cfg.schedules],
        "remote": remote_to_json(cfg.remote),
        "replication": contract_entry(cfg.replication),
    }


def contract_digest(cfg: RunnerConfig) -> str:
    """SHA-256 hex of the canonical JSON of ``sealed_contract(cfg)``."""
    return canonical_digest(sealed_contract(cfg))
