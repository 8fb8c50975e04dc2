"""Quorum arithmetic for a fixed set of voters (Raft thesis §3.4, §3.6).

Kept apart from the node so the two rules everything else rests on are visible in one place:
an index is committed once a majority stores it, and an election is won once a majority grants
it. Nothing here knows about terms, roles or messages.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence


def quorum_size(voter_count: int) -> int:
    """Smallest number of voters that intersects every other majority."""
    if voter_count < 1:
        raise ValueError(f"voter_count must be positive, got {voter_count}")
    return voter_count // 2 + 1


def committed_index(match_indexes: Sequence[int]) -> int:
    """Highest index stored by a majority, given every voter's match index (self included)."""
    if not match_indexes:
        raise ValueError("match_indexes must name every voter")
    ordered = sorted(match_indexes, reverse=True)
    return ordered[quorum_size(len(ordered)) - 1]


class VoteResult(enum.Enum):
    PENDING = "pending"
    WON = "won"
    LOST = "lost"


def vote_result(votes: Mapping[str, bool], voters: Iterable[str]) -> VoteResult:
    """Outcome of an election among ``voters``; votes from non-voters are ignored."""
    voter_list = list(voters)
    need = quorum_size(len(voter_list))
    granted = sum(1 for v in voter_list if votes.get(v) is True)
    rejected = sum(1 for v in voter_list if votes.get(v) is False)
    if granted >= need:
        return VoteResult.WON
    if rejected > len(voter_list) - need:
        return VoteResult.LOST
    return VoteResult.PENDING


def has_quorum(members: Iterable[str], voters: Iterable[str]) -> bool:
    """True when ``members`` contains a majority of ``voters``."""
    voter_set = set(voters)
    return len(voter_set & set(members)) >= quorum_size(len(voter_set))
