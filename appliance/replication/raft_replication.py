"""Replication through the built-in Raft: a RaftNode run by a RaftDriver (SPEC §5).

``RaftReplication`` works with any ``Transport``; the ``single`` flavour is the same code with
one voter and no network: the node elects itself at start (no election timeout to wait for) and
every proposal is committed by its own durable write. Both persist through the same
``LogStorage`` (the SQLite ``RunnerStore`` in production, ``MemoryLogStorage`` in tests).

Membership change (docs/raft.md "Membership change"): ``add_learner``, ``promote`` and
``remove`` run on the leader and return once the CONFIG entry is committed; ``status()`` carries
the configuration in force. A node joining a running cluster is built with ``learners=(its id,)``
and the cluster's genesis ``voters``: it is a non-voting member until the leader's log or
snapshot tells it the configuration in force.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from appliance.raft import driver as raft_driver
from appliance.raft import errors as raft_errors
from appliance.raft.compaction import CompactionPolicy
from appliance.raft.driver import RaftDriver, RestoreHook, Transport
from appliance.raft.messages import Message
from appliance.raft.node import RaftConfig, RaftNode, Role, SoftState
from appliance.raft.reply_slot import ReplySlot
from appliance.raft.sender_rule import sender_refusal
from appliance.raft.storage import LogStorage
from appliance.replication import errors
from appliance.replication.base import ApplyHook, Leadership


class NoNetwork:
    """The transport of a single voter: it has no one to talk to."""

    def send(self, message: Message) -> None:
        raise RuntimeError(f"a single voter has no peers, yet tried to send to {message.to!r}")


class RaftReplication:
    def __init__(
        self,
        *,
        node_id: str,
        voters: Sequence[str],
        learners: Sequence[str] = (),
        storage: LogStorage,
        transport: Transport,
        apply: ApplyHook,
        applied_index: int = 0,
        heartbeat_ms: int = 100,
        election_timeout_min_ms: int = 1000,
        election_timeout_max_ms: int = 2000,
        rng: random.Random | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
        peer_gone: Callable[[str], bool] | None = None,
        compaction: CompactionPolicy | None = None,
        restore: RestoreHook | None = None,
        genesis_addresses: Mapping[str, str] | None = None,
    ) -> None:
        """``genesis_addresses``: each genesis voter's cluster address (host:port, this node's
        own included), so that no learner is added at one of them."""
        config = RaftConfig(
            node_id=node_id,
            voters=tuple(voters),
            learners=tuple(learners),
            genesis_addresses=tuple(sorted((genesis_addresses or {}).items())),
            heartbeat_ticks=1,
            election_ticks_min=max(2, election_timeout_min_ms // heartbeat_ms),
            election_ticks_max=max(2, election_timeout_max_ms // heartbeat_ms),
        )
        node = RaftNode(config, storage, rng or random.Random(), applied_index=applied_index)
        self._leadership = Leadership(False, node.term, None)
        self._members_of: tuple[Mapping[str, Any] | None, frozenset[str]] | None = None
        self.driver = RaftDriver(
            node,
            storage,
            transport,
            apply,
            tick_ms=heartbeat_ms,
            on_fatal=on_fatal,
            campaign_at_start=tuple(voters) == (node_id,),
            peer_gone=peer_gone,
            compaction=compaction,
            restore=restore,
        )
        self.driver.subscribe(self._remember)

    def _remember(self, soft: SoftState) -> None:
        self._leadership = Leadership(soft.role is Role.LEADER, soft.term, soft.leader_id)

    def start(self) -> None:
        self.driver.start()

    def stop(self) -> None:
        self.driver.stop()

    def deliver(self, message: Message, reply: ReplySlot | None = None) -> None:
        """Inbound messages from the transport (``reply``: where the answer may ride back)."""
        self.driver.deliver(message, reply)

    def propose(self, command: bytes, *, timeout_s: float) -> Any:
        return _wait(lambda: self.driver.propose(command), timeout_s, "proposal")

    def read_barrier(self, *, timeout_s: float) -> int:
        return int(_wait(self.driver.read_barrier, timeout_s, "read barrier"))

    def add_learner(self, node_id: str, address: str, *, timeout_s: float) -> None:
        """Leader only: ``node_id`` (cluster listener at ``address``) joins as a learner.
        Raises ``NotLeader``, ``ProposalRefused`` (the reason named), or ``TimeoutError``."""
        _wait(lambda: self.driver.add_learner(node_id, address), timeout_s, "configuration change")

    def promote(self, node_id: str, *, timeout_s: float) -> None:
        """Leader only: the learner ``node_id`` becomes a voter (refused until caught up)."""
        _wait(lambda: self.driver.promote(node_id), timeout_s, "configuration change")

    def remove(self, node_id: str, *, timeout_s: float) -> None:
        """Leader only: remove a voter (this leader too: it hands over once committed) or a
        learner."""
        _wait(lambda: self.driver.remove(node_id), timeout_s, "configuration change")

    def sender_refusal(self, message: Message) -> str | None:
        """Why the cluster listener must not take ``message`` from its sender (None: take it):
        appliance/raft/sender_rule.py over the configuration in force and the current term."""
        members, term = self._members_and_term()
        return sender_refusal(message, members, term)

    def is_member(self, node_id: str) -> bool:
        """``node_id`` is a voter or learner of the configuration in force here."""
        return node_id in self._members_and_term()[0]

    def _members_and_term(self) -> tuple[frozenset[str], int]:
        # Asked on every message the cluster listener takes: the member set is built once per
        # configuration (the driver hands out one dict per configuration), no NodeStatus.
        configuration, term = self.driver.configuration_and_term()
        cached = self._members_of
        if cached is None or cached[0] is not configuration:
            cached = self._members_of = (configuration, _members(configuration))
        return cached[1], term

    def is_leader(self) -> bool:
        return self._leadership.is_leader

    def subscribe(self, callback: Callable[[Leadership], None]) -> None:
        def adapt(soft: SoftState) -> None:
            callback(Leadership(soft.role is Role.LEADER, soft.term, soft.leader_id))

        self.driver.subscribe(adapt)

    def status(self) -> dict[str, Any]:
        return self.driver.status().as_dict()


def single(
    *, node_id: str, storage: LogStorage, apply: ApplyHook, applied_index: int = 0
) -> RaftReplication:
    """One voter: durable local log, no network, leader from the start."""
    return RaftReplication(
        node_id=node_id,
        voters=(node_id,),
        storage=storage,
        transport=NoNetwork(),
        apply=apply,
        applied_index=applied_index,
    )


def _members(configuration: Mapping[str, Any] | None) -> frozenset[str]:
    if not configuration:
        return frozenset()
    return frozenset((*configuration.get("voters", ()), *configuration.get("learners", ())))


def _wait(start: Callable[[], Future[Any]], timeout_s: float, what: str) -> Any:
    """Start a driver call and wait for its outcome, in the interface's own errors."""
    try:
        return start().result(timeout=timeout_s)
    except FutureTimeout:
        raise TimeoutError(f"{what} outcome unknown after {timeout_s} s") from None
    except raft_errors.RaftError as exc:
        raise _translated(exc) from exc


def _translated(exc: raft_errors.RaftError) -> Exception:
    """The replication interface's error for one of the Raft package's (errors.py says why)."""
    if isinstance(exc, raft_errors.NotLeader):
        return errors.NotLeader(exc.leader_hint, str(exc))
    if isinstance(exc, raft_errors.ProposalRefused | raft_errors.ReadRefused):
        return errors.ProposalRefused(str(exc))
    if isinstance(exc, raft_driver.ProposalLost):
        return errors.ProposalLost(str(exc))
    if isinstance(exc, raft_driver.Overloaded):
        return errors.Overloaded(str(exc))
    if isinstance(exc, raft_driver.DriverStopped):
        return errors.ReplicationStopped(str(exc))
    return exc  # an invariant or usage error: a bug, raised as it is
