"""Built-in Raft: a sans-I/O core (``node``), its wire codec and the storage seam (SPEC §5).

See docs/raft.md for the design, message types, persistence rules and ReadIndex.
"""

from appliance.raft.errors import (
    CodecError,
    DigestMismatch,
    NotLeader,
    ProposalRefused,
    RaftError,
    RaftInvariantError,
    RaftUsageError,
    ReadRefused,
)
from appliance.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from appliance.raft.node import (
    HardState,
    RaftConfig,
    RaftNode,
    ReadState,
    Ready,
    Role,
    SoftState,
)
from appliance.raft.storage import LogStorage, MemoryLogStorage

__all__ = [
    "AppendRequest",
    "AppendResponse",
    "CodecError",
    "DigestMismatch",
    "Entry",
    "EntryKind",
    "HardState",
    "Heartbeat",
    "HeartbeatResponse",
    "LogStorage",
    "MemoryLogStorage",
    "Message",
    "NotLeader",
    "ProposalRefused",
    "RaftConfig",
    "RaftError",
    "RaftInvariantError",
    "RaftNode",
    "RaftUsageError",
    "ReadRefused",
    "ReadState",
    "Ready",
    "Role",
    "SoftState",
    "VoteRequest",
    "VoteResponse",
]
