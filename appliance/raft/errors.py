"""Errors raised by the Raft core and its codec.

``RaftInvariantError`` means the node found itself in a state the protocol forbids (a committed
entry about to be truncated, two leaders in one term); the process must stop rather than limp on.
The others are refusals that leave the node unchanged.
"""

from __future__ import annotations


class RaftError(Exception):
    """Base of every error the Raft package raises on purpose."""


class RaftInvariantError(RaftError):
    """A protocol invariant is broken: stop the process, do not retry."""


class RaftUsageError(RaftError):
    """The caller broke the node's calling contract (e.g. step between ready and advance)."""


class NotLeader(RaftError):
    """Proposals and read barriers are served only by the leader; ``leader_hint`` may name it."""

    def __init__(self, leader_hint: str | None):
        self.leader_hint = leader_hint
        super().__init__(f"not the leader (leader hint: {leader_hint or 'unknown'})")


class ProposalRefused(RaftError):
    """The leader refused a proposal without appending it (too large, too many uncommitted)."""


class ReadRefused(RaftError):
    """The leader refused a read barrier request (too many pending reads)."""


class CodecError(RaftError, ValueError):
    """A wire message is malformed, oversized or of an unknown kind."""


class DigestMismatch(CodecError):
    """The sender's contract digest differs from ours: refuse, and log it loudly."""

    def __init__(self, sender: str, theirs: str, ours: str):
        self.sender = sender
        self.theirs = theirs
        self.ours = ours
        super().__init__(
            f"contract digest mismatch from {sender!r}: theirs {theirs[:16]}…, ours {ours[:16]}…"
        )
