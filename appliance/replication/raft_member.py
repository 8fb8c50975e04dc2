"""A voter's Raft membership wired from its runner config: what ``appliance runner`` starts.

One object owns the three moving parts and starts/stops them in a safe order: the cluster
listener (``raft_listener``, a ``DirectServer`` on ``advertise_addr:cluster_port``, every route
behind the cluster bearer), the HTTP transport to the peers (and the probe that tells a follower
its leader's process is gone), and the replication engine (``single`` when the config names no
peers, the built-in Raft otherwise) persisting through the given ``LogStorage`` — the voter's
``RunnerStore`` in production.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from appliance.capabilities import local_capabilities
from appliance.config.credentials import RunnerCredentials
from appliance.config.runner import RunnerConfig
from appliance.http import HttpClient
from appliance.http.tls import (
    cluster_client_context,
    cluster_listener_context,
    cluster_peer_check,
)
from appliance.raft.compaction import CompactionPolicy
from appliance.raft.driver import RestoreHook
from appliance.raft.peer_probe import PeerProbe
from appliance.raft.storage import LogStorage
from appliance.raft.transport import HttpTransport, SenderCheck, host_port, raft_listener
from appliance.replication.base import ApplyHook
from appliance.replication.raft_replication import NoNetwork, RaftReplication
from appliance.replication.voter_capabilities import (
    REFRESH_CONNECT_TIMEOUT_MS,
    REFRESH_READ_TIMEOUT_MS,
    REMEMBERED_FILE,
    VoterCapabilities,
)


class RaftMember:
    def __init__(
        self,
        cfg: RunnerConfig,
        credentials: RunnerCredentials,
        storage: LogStorage,
        apply: ApplyHook,
        *,
        contract_digest: str,
        applied_index: int = 0,
        on_fatal: Callable[[BaseException], None] | None = None,
        restore: RestoreHook | None = None,
    ) -> None:
        voters = cfg.voters  # the genesis voters; the configuration in force is in the log
        self.management_addr = management_addr_text(cfg)
        peers = {node_id: str(addr) for node_id, addr in voters.items() if node_id != cfg.node_id}
        # Always a transport, even for a single voter: a member added at run time (add_voter)
        # is reached at the address the committed configuration carries (driver._sync_peers).
        self.probe: PeerProbe | None = None
        if peers:
            self.probe = PeerProbe({peer: host_port(addr) for peer, addr in peers.items()})
        self.transport: HttpTransport | None = HttpTransport(
            node_id=cfg.node_id,
            peers=peers,
            digest=contract_digest,
            cluster_token=credentials.cluster,
            ssl_context=cluster_client_context(cfg.tls),
        )
        self.replication = RaftReplication(
            node_id=cfg.node_id,
            voters=tuple(voters),
            # A joining node starts as a learner of the genesis configuration; the leader's log
            # or snapshot then tells it the configuration in force.
            learners=(cfg.node_id,) if cfg.join else (),
            storage=storage,
            transport=self.transport or NoNetwork(),
            apply=apply,
            applied_index=applied_index,
            heartbeat_ms=cfg.raft.heartbeat_ms,
            election_timeout_min_ms=cfg.raft.election_timeout_min_ms,
            election_timeout_max_ms=cfg.raft.election_timeout_max_ms,
            rng=random.Random(),
            on_fatal=on_fatal,
            peer_gone=self.probe.gone if self.probe is not None else None,
            compaction=CompactionPolicy(
                snapshot_entries=cfg.raft.snapshot_entries,
                trailing_entries=cfg.raft.trailing_entries,
                snapshot_bytes=cfg.raft.snapshot_bytes,
            ),
            restore=restore,
            genesis_addresses={node_id: str(addr) for node_id, addr in voters.items()},
        )
        # Every credential this voter knows (a fleet worker's own too), by role.
        known = credentials.known_roles()
        # The version gate (appliance/capabilities.py): what every member reports it can apply,
        # asked over the cluster listener's own TLS (the CA and our client certificate).
        tls_context = cluster_client_context(cfg.tls)
        self.capabilities = VoterCapabilities(
            node_id=cfg.node_id,
            peers=peers,
            cluster_token=credentials.cluster,
            client=HttpClient(
                connect_timeout_ms=1_000, read_timeout_ms=2_000, ssl_context=tls_context
            ),
            scheme="http" if tls_context is None else "https",
            members=lambda: configured_members(self.replication.status(), peers),
            remembered=Path(cfg.data_dir) / REMEMBERED_FILE,
            learners=lambda: configured_learners(self.replication.status()),
            quick_client=HttpClient(
                connect_timeout_ms=REFRESH_CONNECT_TIMEOUT_MS,
                read_timeout_ms=REFRESH_READ_TIMEOUT_MS,
                ssl_context=tls_context,
            ),
            management_addr=self.management_addr,
        )
        if self.transport is not None:
            self.transport.receive_answers(self.replication.deliver)
        self.server = raft_listener(
            node_id=cfg.node_id,
            digest=contract_digest,
            deliver=self.replication.deliver,
            status=self.status,
            credentials=known,
            deliver_with_reply=self.replication.deliver,
            # Who may speak (issue 36): the certificate's node, a member of the configuration
            # in force (or what Raft needs from a newer one); without TLS no certificate names a
            # sender, and the membership rule still applies to the sender a message states.
            senders=SenderCheck(
                identity_required=cfg.tls is not None,
                refusal=self.replication.sender_refusal,
                is_member=self.replication.is_member,
            ),
            host=cfg.advertise_addr,
            port=cfg.cluster_port,
            name=f"raft {cfg.node_id}",
            ssl_context=cluster_listener_context(cfg.tls),
            # A certificate of the cluster CA naming one node id, genesis or added at run time;
            # each request then holds the sender to that id and to the configuration in force
            # (SenderCheck above), which the handshake cannot know.
            peer_check=cluster_peer_check() if cfg.tls is not None else None,
        )

    def status(self) -> dict[str, object]:
        """The cluster status route's answer: Raft's view, what this binary can apply, and where
        its management listener is (a hint for a 409 elsewhere: voter_capabilities.py)."""
        status = {**self.replication.status(), "capabilities": local_capabilities().to_json()}
        if self.management_addr is not None:
            status["management_addr"] = self.management_addr
        return status

    def start(self) -> None:
        """Listen first (so peers' first messages land), then send, then run the node."""
        self.server.start()
        if self.transport is not None:
            self.transport.start()
        self.replication.start()
        self.capabilities.start()

    def stop(self) -> None:
        self.capabilities.stop()
        self.replication.stop()
        if self.probe is not None:
            # Its only users hold the node's turn: the driver's stop waited for the last one.
            self.probe.close()
        if self.transport is not None:
            self.transport.stop()
        self.server.stop()


def management_addr_text(cfg: RunnerConfig) -> str | None:
    """This voter's management listener as ``appliance admin --addr`` takes it, or None."""
    management = getattr(cfg, "management", None)
    if management is None:
        return None
    return f"{'https://' if management.tls else ''}{management.addr}"


def configured_members(
    status: Mapping[str, Any], genesis_peers: Mapping[str, str]
) -> dict[str, str]:
    """Every member of the configuration in force (voters and learners) → its cluster address:
    the one its CONFIG entry carries (members added at run time), else the genesis mapping's;
    "" when neither names one (it is still a member the gate waits for, never asked)."""
    configuration = status.get("configuration")
    if not isinstance(configuration, Mapping):
        return dict(genesis_peers)
    addresses = {**genesis_peers, **dict(configuration.get("addresses") or {})}
    members = [*configuration.get("voters", ()), *configuration.get("learners", ())]
    return {member: addresses.get(member, "") for member in members}


def configured_learners(status: Mapping[str, Any]) -> tuple[str, ...]:
    """The learners of the configuration in force (none when the status has no configuration)."""
    configuration = status.get("configuration")
    if not isinstance(configuration, Mapping):
        return ()
    return tuple(configuration.get("learners") or ())
