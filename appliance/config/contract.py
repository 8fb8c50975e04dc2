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
from appliance.config.rfc3339 import format_utc
from appliance.config.runner import RemoteConfig, RunnerConfig
from appliance.core.canonical import canonical_digest
from appliance.core.definition import definition_to_json
from appliance.core.limits import limits_to_json


def remote_to_json(remote: RemoteConfig) -> dict[str, Any]:
    return {
        "url": remote.url.url,
        "bearer_env": remote.bearer_env,
        "expires_at": format_utc(remote.expires_at),
        "session": remote.session,
        "timeout_seconds": remote.timeout_seconds,
        "heap_mb": remote.heap_mb,
        "namespace": remote.namespace,
        "worker_id": remote.worker_id,
    }


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
