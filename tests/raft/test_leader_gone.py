"""``RaftNode.leader_gone``: the driver's hint that the leader's process is gone.

A follower of that leader forgets it (ending the lease that refuses other voters' pre-votes)
and campaigns within 2-5 ticks instead of a whole election timeout; anyone else, or a hint
about another peer, changes nothing. The hint only moves liveness: the simulator runs it, true
and wrong, under every fault (tests/sim).
"""

from __future__ import annotations

from appliance.raft import Heartbeat, MemoryLogStorage, Role, VoteRequest, VoteResponse
from appliance.raft.node import LEADER_GONE_CAMPAIGN_TICKS
from tests.raft.test_node import drain, leader_of_three, make


def follower_of(leader: str, node_id: str = "n2"):  # type: ignore[no-untyped-def]
    storage = MemoryLogStorage()
    node = make(node_id, storage=storage)
    node.step(Heartbeat(leader, node_id, 1, 0, 0))
    drain(node, storage)
    assert (node.role, node.leader_id) == (Role.FOLLOWER, leader)
    return node, storage


def ticks_until_pre_vote(node, storage, limit: int) -> int | None:  # type: ignore[no-untyped-def]
    for tick in range(1, limit + 1):
        node.tick()
        sent = [m for r in drain(node, storage) for m in r.messages]
        if any(isinstance(m, VoteRequest) and m.pre_vote for m in sent):
            return tick
    return None


def test_a_follower_told_its_leader_is_gone_campaigns_within_a_few_ticks() -> None:
    low, high = LEADER_GONE_CAMPAIGN_TICKS
    for name in ("n2", "n3"):  # two rng streams, so two draws from the window
        node, storage = follower_of("n1", name)
        node.leader_gone("n1")
        assert node.leader_id is None
        ticks = ticks_until_pre_vote(node, storage, node.config.election_ticks_min)
        assert ticks is not None and low <= ticks <= high


def test_without_the_hint_the_follower_waits_a_whole_election_timeout() -> None:
    node, storage = follower_of("n1")
    limit = LEADER_GONE_CAMPAIGN_TICKS[1]
    assert ticks_until_pre_vote(node, storage, limit) is None
    assert node.config.election_ticks_min > limit


def test_a_hint_about_a_peer_that_is_not_the_leader_changes_nothing() -> None:
    node, storage = follower_of("n1")
    node.leader_gone("n3")
    assert node.leader_id == "n1"
    assert ticks_until_pre_vote(node, storage, LEADER_GONE_CAMPAIGN_TICKS[1]) is None


def test_a_leader_ignores_the_hint() -> None:
    node, _ = leader_of_three()
    node.leader_gone("n1")
    node.leader_gone("n2")
    assert (node.role, node.leader_id) == (Role.LEADER, "n1")


def test_a_fellow_follower_with_the_same_hint_grants_the_pre_vote_one_in_its_lease_does_not() -> (
    None
):
    asked = VoteRequest("n3", "n2", 2, 0, 0, pre_vote=True)

    in_lease, storage = follower_of("n1")
    in_lease.step(asked)
    answers = [m for r in drain(in_lease, storage) for m in r.messages]
    assert answers == []  # stickiness: n1 was heard from a moment ago

    told, storage = follower_of("n1")
    told.leader_gone("n1")
    told.step(asked)
    answers = [m for r in drain(told, storage) for m in r.messages]
    assert answers == [VoteResponse("n2", "n3", 2, True, True)]
    assert (told.term, told.voted_for) == (1, None)  # a pre-vote decides nothing
