"""Log entries and the nine messages voters exchange (Raft thesis §3.4-§3.6, §5.3, §6.4, §9.6).

Every message names its ``sender``, its recipient ``to`` and the sender's ``term``. Entries carry
their kind inside the payload bytes the store keeps, so the store stays a plain
``(index, term, payload)`` table:

    payload = kind byte + data      kind 0x00: barrier (the no-op a new leader commits first)
                                    kind 0x01: normal (an application command)
                                    kind 0x02: config (a whole ``Membership``, membership.py)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from appliance.raft.errors import RaftInvariantError


class EntryKind(enum.IntEnum):
    BARRIER = 0
    NORMAL = 1
    CONFIG = 2


@dataclass(frozen=True)
class Entry:
    index: int
    term: int
    kind: EntryKind
    data: bytes = b""

    @property
    def payload(self) -> bytes:
        """The bytes the store keeps: the kind byte, then the data."""
        return bytes((self.kind,)) + self.data

    @property
    def payload_bytes(self) -> int:
        return 1 + len(self.data)

    @classmethod
    def from_stored(cls, index: int, term: int, payload: bytes) -> Entry:
        if not payload:
            raise RaftInvariantError(f"stored entry {index} has an empty payload (no kind byte)")
        try:
            kind = EntryKind(payload[0])
        except ValueError:
            raise RaftInvariantError(
                f"stored entry {index} has unknown kind byte {payload[0]}"
            ) from None
        return cls(index, term, kind, bytes(payload[1:]))


@dataclass(frozen=True)
class VoteRequest:
    """Pre-vote (thesis §9.6) when ``pre_vote``: ``term`` is the term the sender would take.

    ``transfer``: the sender campaigns because the leader told it to (``TimeoutNow``), so a voter
    still in the old leader's lease grants it anyway (thesis §3.10)."""

    sender: str
    to: str
    term: int
    last_log_index: int
    last_log_term: int
    pre_vote: bool
    transfer: bool = False


@dataclass(frozen=True)
class VoteResponse:
    sender: str
    to: str
    term: int
    granted: bool
    pre_vote: bool


@dataclass(frozen=True)
class AppendRequest:
    sender: str
    to: str
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int


@dataclass(frozen=True)
class AppendResponse:
    """``index``: the last index now known to match if ``success``, else the rejected prev_index.

    On rejection ``hint_index``/``hint_term`` name the highest follower entry whose term is at most
    the leader's prev_term, so the leader can skip a whole divergent term in one round trip.
    """

    sender: str
    to: str
    term: int
    success: bool
    index: int
    hint_index: int = 0
    hint_term: int = 0


@dataclass(frozen=True)
class Heartbeat:
    """Leader liveness plus commit (never above what the follower matched) and a read sequence."""

    sender: str
    to: str
    term: int
    commit: int
    read_seq: int


@dataclass(frozen=True)
class HeartbeatResponse:
    sender: str
    to: str
    term: int
    read_seq: int


@dataclass(frozen=True)
class SnapshotChunk:
    """One chunk of a leader's snapshot (thesis §5.3, InstallSnapshot; etcd's MsgSnap).

    The snapshot stands for every entry up to ``index`` (whose term is ``snapshot_term``); its
    bytes (``total_bytes`` of them, SHA-256 ``checksum``) travel in order, ``offset`` being where
    ``data`` starts. ``voters`` is the Raft configuration the snapshot was taken under.
    """

    sender: str
    to: str
    term: int
    index: int
    snapshot_term: int
    voters: tuple[str, ...]
    total_bytes: int
    checksum: str  # SHA-256 hex of the whole snapshot
    offset: int
    data: bytes

    @property
    def last(self) -> bool:
        return self.offset + len(self.data) == self.total_bytes


@dataclass(frozen=True)
class SnapshotResponse:
    """The follower holds ``next_offset`` bytes of the snapshot at ``index`` (0: start again).

    The last chunk is answered by an ``AppendResponse`` instead, once the snapshot is installed.
    """

    sender: str
    to: str
    term: int
    index: int
    next_offset: int


@dataclass(frozen=True)
class TimeoutNow:
    """Leadership transfer (thesis §3.10): the leader, whose log the recipient matches, asks it
    to start an election at once, skipping the pre-vote round and the election timeout."""

    sender: str
    to: str
    term: int


Message = (
    VoteRequest
    | VoteResponse
    | AppendRequest
    | AppendResponse
    | Heartbeat
    | HeartbeatResponse
    | SnapshotChunk
    | SnapshotResponse
    | TimeoutNow
)
