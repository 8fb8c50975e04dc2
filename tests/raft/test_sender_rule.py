"""The cluster listener's rule for a Raft message's sender (appliance/raft/sender_rule.py, issue
36): a member may send anything; a node outside the configuration only what Raft needs from a
server of a configuration this node has not seen yet (thesis §4.1), at its term or later."""

from __future__ import annotations

import pytest

from appliance.raft.messages import (
    AppendRequest,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    SnapshotChunk,
    SnapshotResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from appliance.raft.sender_rule import sender_refusal

MEMBERS = frozenset({"n1", "n2", "n3", "n4"})  # n4: a learner
TERM = 7


def _all_kinds(sender: str, term: int) -> list[object]:
    return [
        AppendRequest(sender, "n1", term, 0, 0, (), 0),
        AppendResponse(sender, "n1", term, True, 0),
        Heartbeat(sender, "n1", term, 0, 0),
        HeartbeatResponse(sender, "n1", term, 0),
        SnapshotChunk(sender, "n1", term, 1, 1, ("n1",), 1, "0" * 64, 0, b"x"),
        SnapshotResponse(sender, "n1", term, 1, 1),
        TimeoutNow(sender, "n1", term),
        VoteRequest(sender, "n1", term, 0, 0, True),
        VoteResponse(sender, "n1", term, True, True),
    ]


@pytest.mark.parametrize("sender", ["n2", "n4"])
def test_a_member_voter_or_learner_may_send_anything_at_any_term(sender: str) -> None:
    for term in (0, TERM, TERM + 1):
        for message in _all_kinds(sender, term):
            assert sender_refusal(message, MEMBERS, TERM) is None, message  # type: ignore[arg-type]


def test_a_non_member_may_only_lead_or_ask_for_votes_at_this_term_or_later() -> None:
    taken = (AppendRequest, Heartbeat, SnapshotChunk, VoteRequest)
    for term in (TERM, TERM + 1):
        for message in _all_kinds("n9", term):
            refusal = sender_refusal(message, MEMBERS, TERM)  # type: ignore[arg-type]
            assert (refusal is None) is isinstance(message, taken), message
    for message in _all_kinds("n9", TERM - 1):
        refusal = sender_refusal(message, MEMBERS, TERM)  # type: ignore[arg-type]
        assert refusal is not None and refusal.startswith("'n9' is not a voter or learner")
        assert "n1, n2, n3, n4" in refusal
