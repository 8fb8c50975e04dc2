"""The etcd backend: its factory and credentials (the config rule: appliance/config/replication)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from appliance.config.replication import (
    RAFT,
    REPLICATION,
    EtcdBackend,
    RaftBackend,
    check_peers,
    contract_entry,
)

__all__ = [
    "RAFT",
    "REPLICATION",
    "EtcdBackend",
    "RaftBackend",
    "build_etcd_replication",
    "check_peers",
    "contract_entry",
    "etcd_auth",
]


def etcd_auth(backend: EtcdBackend, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(user, password) from ``auth_env``; ValueError naming the variable when unusable."""
    if backend.auth_env is None:
        return None
    raw = environ.get(backend.auth_env)
    if not raw:
        raise ValueError(f"replication.auth_env: environment variable {backend.auth_env} is unset")
    user, colon, password = raw.partition(":")
    if not colon or not user or not password:
        raise ValueError(f"replication.auth_env: {backend.auth_env} must hold user:password")
    return user, password


def build_etcd_replication(
    cfg: Any,
    credentials: Any,
    store: Any,
    apply_hook: Callable[[int, bytes], Any],
    applied_index: int,
    *,
    environ: Mapping[str, str] | None = None,
    on_fatal: Callable[[BaseException], None] | None = None,
    restore: Callable[[Any, Callable[[], None]], None] | None = None,
    contract_digest: str = "",
) -> Any:
    """The runner's replication when ``cfg.replication`` is an ``EtcdBackend``.

    ``credentials`` is accepted for symmetry with the Raft member (the etcd backend needs no
    cluster bearer). The store keeps only the checkpoint (the log is in etcd), at
    ``applied_index``; the leader snapshots it into etcd and a runner behind the compacted log
    installs etcd's snapshot into it, through ``restore`` (the machine's hook) when given. The
    compaction settings are the ``raft`` object's ``snapshot_entries``, ``trailing_entries`` and
    ``snapshot_bytes``.
    """
    import os

    from appliance.replication.etcd import EtcdReplication, EtcdSettings

    backend = cfg.replication
    if not isinstance(backend, EtcdBackend):
        raise ValueError("build_etcd_replication needs replication.kind == 'etcd'")
    settings = EtcdSettings(
        endpoints=backend.endpoints,
        prefix=backend.prefix,
        lease_ttl_seconds=backend.lease_ttl_seconds,
        auth=etcd_auth(backend, os.environ if environ is None else environ),
        snapshot_entries=cfg.raft.snapshot_entries,
        trailing_entries=cfg.raft.trailing_entries,
        snapshot_bytes=cfg.raft.snapshot_bytes,
        contract_digest=contract_digest,
    )
    del credentials
    return EtcdReplication(
        node_id=cfg.node_id,
        settings=settings,
        apply=apply_hook,
        applied_index=applied_index,
        on_fatal=on_fatal,
        store=store,
        restore=restore,
    )
