"""``EtcdMember``: what ``appliance runner`` starts instead of ``RaftMember`` when the config's
``replication.kind`` is ``"etcd"``. Same constructor and ``replication`` / ``start`` / ``stop``
surface, so the runner process chooses with one line::

    member_cls = EtcdMember if isinstance(cfg.replication, EtcdBackend) else RaftMember

There is no cluster listener and no peer transport: the runners talk only to etcd. The store
keeps the checkpoint (SPEC §4); its Raft log tables stay empty because the log lives in etcd.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.replication.base import ApplyHook
from appliance.replication.etcd import EtcdReplication
from appliance.replication.etcd_config import build_etcd_replication
from appliance.replication.voter_capabilities import VoterCapabilities


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
    ) -> None:
        del contract_digest  # the sealed contract already names the etcd prefix and endpoints
        self.replication: EtcdReplication = build_etcd_replication(
            cfg, credentials, storage, apply, applied_index, on_fatal=on_fatal
        )
        # Runner instances on etcd have no cluster listener to report on: the gate sees only this
        # binary (docs/raft.md, "Version gate"); one that meets an unknown kind still stops.
        self.capabilities = VoterCapabilities(node_id=cfg.node_id, peers={}, cluster_token=None)

    def start(self) -> None:
        self.replication.start()

    def stop(self) -> None:
        self.replication.stop()
