"""The errors of the replication interface (appliance/replication/base.py), whatever engine is
behind it. Each implementation raises these and only these for the interface's refusals: the
built-in Raft translates its driver's and core's errors (raft_replication.py), etcd raises them
itself, so the runner never imports an engine's exceptions."""

from __future__ import annotations


class ReplicationError(Exception):
    """Base of every refusal the replication interface raises on purpose."""


class NotLeader(ReplicationError):
    """This member cannot accept proposals or barriers; ``leader_hint`` may name who can."""

    def __init__(self, leader_hint: str | None, message: str | None = None):
        self.leader_hint = leader_hint
        super().__init__(message or f"not the leader (leader hint: {leader_hint or 'unknown'})")


class ProposalLost(ReplicationError):
    """The command will never apply (a new leader overwrote its place in the log)."""


class ProposalRefused(ReplicationError):
    """Refused before it was appended (too large, a membership change in flight ...): the
    message names the reason; nothing changed."""


class Overloaded(ReplicationError):
    """Too much is waiting already; nothing was appended: try again later."""


class ReplicationStopped(ReplicationError):
    """The replication is not running (stopped, or stopped by a fatal error)."""
