"""Pluggable replication for the runner: the interface and its implementations (SPEC §5)."""

from appliance.replication.base import (
    ApplyHook,
    DriverStopped,
    Leadership,
    NotLeader,
    Overloaded,
    ProposalLost,
    Replication,
)
from appliance.replication.raft_replication import NoNetwork, RaftReplication, single

__all__ = [
    "ApplyHook",
    "DriverStopped",
    "Leadership",
    "NoNetwork",
    "NotLeader",
    "Overloaded",
    "ProposalLost",
    "RaftReplication",
    "Replication",
    "single",
]
