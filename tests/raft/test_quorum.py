"""Quorum arithmetic: majorities for commit and election (thesis §3.4, §3.6)."""

from __future__ import annotations

import pytest

from appliance.raft.quorum import (
    VoteResult,
    committed_index,
    has_quorum,
    quorum_size,
    vote_result,
)


@pytest.mark.parametrize(("voters", "size"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_quorum_is_a_strict_majority(voters: int, size: int) -> None:
    assert quorum_size(voters) == size


def test_quorum_of_no_voters_is_refused() -> None:
    with pytest.raises(ValueError):
        quorum_size(0)


@pytest.mark.parametrize(
    ("matches", "committed"),
    [
        ([5], 5),
        ([5, 3, 1], 3),
        ([1, 3, 5], 3),
        ([9, 9, 0, 0, 0], 0),
        ([9, 9, 9, 0, 0], 9),
        ([4, 7], 4),
    ],
)
def test_committed_index_is_the_highest_index_a_majority_holds(
    matches: list[int], committed: int
) -> None:
    assert committed_index(matches) == committed


def test_election_is_won_by_a_majority_and_lost_once_a_majority_is_impossible() -> None:
    voters = ["a", "b", "c", "d", "e"]
    assert vote_result({"a": True, "b": True}, voters) is VoteResult.PENDING
    assert vote_result({"a": True, "b": True, "c": True}, voters) is VoteResult.WON
    assert vote_result({"a": True, "b": False, "c": False}, voters) is VoteResult.PENDING
    assert vote_result({"a": True, "b": False, "c": False, "d": False}, voters) is VoteResult.LOST


def test_votes_from_non_voters_do_not_count() -> None:
    assert vote_result({"a": True, "x": True, "y": True}, ["a", "b", "c"]) is VoteResult.PENDING
    assert not has_quorum(["a", "x", "y"], ["a", "b", "c"])
    assert has_quorum(["a", "c"], ["a", "b", "c"])
