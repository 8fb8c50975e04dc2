"""Membership change over the real HTTP transport (sockets, pipelines, one process): a fourth
voter joins as a learner at an address only the leader was told, catches up, is promoted; then
the leader removes itself and hands over; the survivors keep committing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from appliance.config.credentials import Secret
from appliance.raft.transport import HttpTransport
from appliance.replication import RaftReplication
from appliance.replication.errors import ProposalRefused
from tests.raft.test_transport import CLUSTER, DIGEST, WAIT_S, Voter, leader_of, wait_for


class Joiner(Voter):
    """A voter process that starts as a learner of the genesis voters ``ids``."""

    def start(self, addresses: dict[str, str]) -> None:
        self.applied = []
        self.transport = HttpTransport(
            node_id=self.id,
            peers={p: a for p, a in addresses.items() if p != self.id},
            digest=DIGEST,
            cluster_token=Secret(CLUSTER),
        )
        self.member = RaftReplication(
            node_id=self.id,
            voters=self.ids,
            learners=(self.id,),
            storage=self.storage,
            transport=self.transport,
            apply=lambda index, command: self.applied.append(command),
            heartbeat_ms=50,
            election_timeout_min_ms=300,
            election_timeout_max_ms=600,
        )
        self.transport.start()
        self.member.start()


@pytest.fixture
def cluster() -> Iterator[tuple[dict[str, Voter], dict[str, str]]]:
    ids = ["n1", "n2", "n3"]
    voters: dict[str, Voter] = {i: Voter(i, ids) for i in ids}
    voters["n4"] = Joiner("n4", ids)
    for voter in voters.values():
        voter.server.start()
    addresses = {i: f"127.0.0.1:{v.server.port}" for i, v in voters.items()}
    genesis = {i: a for i, a in addresses.items() if i in ids}
    for i in ids:
        voters[i].start(genesis)  # the genesis voters do not know n4's address
    yield voters, addresses
    for voter in voters.values():
        voter.crash()
        voter.server.stop()


def test_a_fourth_voter_joins_then_the_leader_removes_itself(cluster) -> None:  # type: ignore[no-untyped-def]
    voters, addresses = cluster
    genesis = {i: v for i, v in voters.items() if i != "n4"}
    leader = leader_of(genesis)
    for n in range(5):
        leader.member.propose(b"before-%d" % n, timeout_s=WAIT_S)  # type: ignore[union-attr]
    joiner = voters["n4"]
    joiner.start({i: a for i, a in addresses.items() if i != "n4"})
    leader.member.add_learner("n4", addresses["n4"], timeout_s=WAIT_S)  # type: ignore[union-attr]
    expected = [b"before-%d" % n for n in range(5)]
    wait_for(lambda: joiner.applied == expected, "the learner catches up")
    assert joiner.member.status()["member_status"].startswith("learner")  # type: ignore[union-attr]

    def promoted() -> bool:
        try:
            leader.member.promote("n4", timeout_s=WAIT_S)  # type: ignore[union-attr]
        except ProposalRefused:
            return False
        return True

    wait_for(promoted, "the caught-up learner is promoted")
    assert leader.member.status()["configuration"]["voters"] == ["n1", "n2", "n3", "n4"]  # type: ignore[union-attr]
    leader.member.remove(leader.id, timeout_s=WAIT_S)  # type: ignore[union-attr]
    others = {i: v for i, v in voters.items() if v is not leader}
    new = leader_of(others)
    new.member.propose(b"after", timeout_s=WAIT_S)  # type: ignore[union-attr]
    wait_for(
        lambda: all(v.applied == [*expected, b"after"] for v in others.values()),
        "the remaining voters, the new one included, apply",
    )
    status = leader.member.status()  # type: ignore[union-attr]
    assert status["member_status"].startswith("removed")
    assert status["role"] == "follower"
