"""``EtcdMember``: what ``appliance runner`` starts instead of ``RaftMember`` when the config's
``replication.kind`` is ``"etcd"``. Same constructor and ``replication`` / ``start`` / ``stop``
surface, so the runner process chooses with one line::

    member_cls = EtcdMember if isinstance(cfg.replication, EtcdBackend) else RaftMember

There is no cluster listener and no peer transport: the runners talk only to etcd. The store
keeps the checkpoint (SPEC §4); its Raft log tables stay empty because the log lives in etcd. A
runner behind etcd's compacted log installs etcd's snapshot through the machine's ``restore``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.config.contract import sealed_contract
from appliance.core.canonical import canonical_digest
from appliance.replication.base import ApplyHook
from appliance.replication.etcd import EtcdReplication
from appliance.replication.etcd_config import build_etcd_replication
from appliance.replication.voter_capabilities import VoterCapabilities


def shared_contract_digest(cfg: Any) -> str:
    """SHA-256 of the sealed contract without ``voters``: the same for every runner instance of
    one appliance on etcd (each instance's store seals only itself as the voter)."""
    contract = sealed_contract(cfg)
    return canonical_digest({k: v for k, v in contract.items() if k != "voters"})


class EtcdMember:
    def __init__(
        self,
        cfg: Any,
        credentials: Any,
        storage: Any,
        apply: ApplyHook,
        *,
        contract_digest: str,
        applied_index: int = 0,
        on_fatal: Callable[[BaseException], None] | None = None,
        restore: Callable[[Any, Callable[[], None]], None] | None = None,
    ) -> None:
        # Every snapshot carries a digest of the contract the runner instances share: on etcd the
        # sealed "voters" entry names only the instance itself, so the digest leaves it out.
        del contract_digest
        self.replication: EtcdReplication = build_etcd_replication(
            cfg,
            credentials,
            storage,
            apply,
            applied_index,
            on_fatal=on_fatal,
            restore=restore,
            contract_digest=shared_contract_digest(cfg),
        )
        # Runner instances on etcd have no cluster listener to report on: the gate sees only this
        # binary (docs/raft.md, "Version gate"); one that meets an unknown kind still stops.
        self.capabilities = VoterCapabilities(node_id=cfg.node_id, peers={}, cluster_token=None)

    def start(self) -> None:
        self.replication.start()

    def stop(self) -> None:
        self.replication.stop()
