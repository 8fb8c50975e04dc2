"""Pluggable replication for the runner: the interface and its implementations (SPEC §5)."""

from appliance.replication.base import ApplyHook, Leadership, Replication
from appliance.replication.errors import (
    NotLeader,
    Overloaded,
    ProposalLost,
    ProposalRefused,
    ReplicationError,
    ReplicationStopped,
)
from appliance.replication.raft_replication import NoNetwork, RaftReplication, single

__all__ = [
    "ApplyHook",
    "Leadership",
    "NoNetwork",
    "NotLeader",
    "Overloaded",
    "ProposalLost",
    "ProposalRefused",
    "RaftReplication",
    "Replication",
    "ReplicationError",
    "ReplicationStopped",
    "single",
]
