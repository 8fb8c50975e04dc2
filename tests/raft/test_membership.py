"""Membership change in the Raft core (thesis chapter 4): learners, promotion, removal of the
leader with TimeoutNow, one change at a time, the configuration in snapshots and restarts."""

from __future__ import annotations

import random

import pytest

from appliance.raft import (
    EntryKind,
    MemoryLogStorage,
    NotLeader,
    ProposalRefused,
    RaftConfig,
    RaftNode,
    RaftUsageError,
    Role,
    VoteRequest,
    VoteResponse,
)
from appliance.raft.codec import decode, encode
from appliance.raft.membership import ConfigHistory, Membership
from appliance.raft.messages import SnapshotChunk, TimeoutNow

DIGEST = "d" * 64


class Cluster:
    """Real cores, in-memory storage, a lossless network that can cut nodes off."""

    def __init__(self, voters: tuple[str, ...] = ("n1", "n2", "n3"), **config: int) -> None:
        self.genesis = voters
        self.config = config
        self.storage: dict[str, MemoryLogStorage] = {}
        self.nodes: dict[str, RaftNode] = {}
        self.cut: set[str] = set()
        self.sent: list[object] = []
        self.queue: list[object] = []
        for node_id in voters:
            self.start(node_id)

    def start(self, node_id: str, *, fresh: bool = False) -> RaftNode:
        if fresh or node_id not in self.storage:
            self.storage[node_id] = MemoryLogStorage()
        storage = self.storage[node_id]
        learners = () if node_id in self.genesis else (node_id,)
        cfg = RaftConfig(node_id=node_id, voters=self.genesis, learners=learners, **self.config)
        applied, _ = storage.checkpoint()
        node = RaftNode(cfg, storage, random.Random(node_id), applied_index=applied)
        self.nodes[node_id] = node
        return node

    def process(self, node: RaftNode) -> None:
        storage = self.storage[node.id]
        while node.has_ready():
            ready = node.ready()
            if ready.snapshot is not None:
                storage.install_snapshot(ready.snapshot)
            if ready.must_persist:
                storage.persist(
                    term=ready.hard_state.term,
                    voted_for=ready.hard_state.voted_for,
                    truncate_from=ready.truncate_from,
                    entries=ready.stored_entries(),
                )
            self.queue.extend(ready.messages)
            self.sent.extend(ready.messages)
            node.advance(ready)

    def settle(self, rounds: int = 200) -> None:
        for _ in range(rounds):
            for node in self.nodes.values():
                self.process(node)
            if not self.queue:
                return
            queue, self.queue = self.queue, []
            for m in queue:
                to = self.nodes.get(m.to)  # type: ignore[attr-defined]
                if to is None or m.to in self.cut or m.sender in self.cut:  # type: ignore[attr-defined]
                    continue
                to.step(m)  # type: ignore[arg-type]
        raise AssertionError("the cluster did not settle")

    def tick(self, times: int = 1) -> None:
        for _ in range(times):
            for node in self.nodes.values():
                node.tick()
            self.settle()

    def elect(self, node_id: str) -> RaftNode:
        node = self.nodes[node_id]
        node.campaign()
        self.settle()
        assert node.role is Role.LEADER
        return node

    def leader(self) -> RaftNode:
        leaders = [n for n in self.nodes.values() if n.role is Role.LEADER]
        assert len(leaders) == 1, [n.id for n in leaders]
        return leaders[0]

    def commit(self, data: bytes = b"x") -> int:
        _, index = self.leader().propose(data)
        self.settle()
        return index


def test_a_learner_receives_entries_but_never_counts_in_a_quorum() -> None:
    c = Cluster()
    leader = c.elect("n1")
    _, index = leader.add_learner("n4", "10.0.0.4:7400")
    c.start("n4")
    c.settle()
    assert leader.commit_index >= index and not leader.config_change_pending
    c.tick(2)
    learner = c.nodes["n4"]
    assert learner.membership.learners == ("n4",)
    assert learner.membership.address_of("n4") == "10.0.0.4:7400"
    assert "learner" in learner.member_status()
    # Cut off n2 and n3: the leader and its learner are two of four members, yet no quorum.
    c.cut |= {"n2", "n3"}
    _, index = leader.propose(b"needs a voter")
    c.settle()
    assert learner.last_index >= index
    assert leader.commit_index < index
    c.cut.clear()
    c.tick(2)
    assert leader.commit_index >= index


def test_a_learner_never_campaigns_but_answers_votes_on_the_merits() -> None:
    c = Cluster()
    c.elect("n1")
    c.leader().add_learner("n4")
    c.start("n4")
    c.settle()
    learner = c.nodes["n4"]
    with pytest.raises(RaftUsageError, match="learner"):
        learner.campaign()
    c.cut.add("n1")
    for _ in range(3 * learner.config.election_ticks_max):
        learner.tick()
        c.process(learner)
    assert learner.role is Role.FOLLOWER
    learner.step(VoteRequest("n2", "n4", learner.term + 1, 100, 100, False))
    c.process(learner)
    answers = [m for m in c.sent if getattr(m, "sender", None) == "n4" and m.to == "n2"]  # type: ignore[attr-defined]
    # It may have been promoted by an entry it has not received: a candidate holding a longer
    # log gets its vote (only a candidate counting it as a voter counts the vote).
    assert answers and answers[-1].granted  # type: ignore[attr-defined]


def test_one_change_at_a_time_and_only_after_the_leaders_barrier_committed() -> None:
    c = Cluster()
    leader = c.elect("n1")
    c.cut |= {"n2", "n3"}
    leader.add_learner("n4")
    with pytest.raises(ProposalRefused, match="in flight"):
        leader.add_learner("n5")
    with pytest.raises(ProposalRefused, match="in flight"):
        leader.remove("n3")
    c.cut.clear()
    c.tick(2)
    assert not leader.config_change_pending
    leader.add_learner("n5")  # the previous one committed: accepted
    # A new leader refuses until its own barrier is committed.
    c.settle()
    c.cut |= {"n1", "n3"}
    n2 = c.nodes["n2"]
    n2.campaign()
    c.settle()
    assert n2.role is not Role.LEADER  # cut off: no majority, no barrier
    with pytest.raises(NotLeader):
        n2.add_learner("n6")


def test_promotion_waits_until_the_learner_caught_up_then_counts_it() -> None:
    c = Cluster()
    leader = c.elect("n1")
    for i in range(5):
        c.commit(b"before %d" % i)
    leader.add_learner("n4")
    c.settle()
    c.cut.add("n4")  # it has not heard anything yet
    c.start("n4")
    c.commit(b"more")
    with pytest.raises(ProposalRefused, match="has not caught up"):
        leader.promote("n4")
    c.cut.clear()
    c.tick(2)
    _, index = leader.promote("n4")
    c.settle()
    assert leader.commit_index >= index
    assert leader.membership.voters == ("n1", "n2", "n3", "n4")
    # Four voters: a quorum is three. With n3 and n4 cut off, nothing commits.
    c.cut |= {"n3", "n4"}
    _, index = leader.propose(b"needs three")
    c.settle()
    assert leader.commit_index < index


def test_promoting_a_voter_or_removing_the_last_voter_is_refused_with_the_reason() -> None:
    c = Cluster(voters=("n1",))
    leader = c.elect("n1")
    with pytest.raises(ProposalRefused, match="not a learner"):
        leader.promote("n1")
    with pytest.raises(ProposalRefused, match="last voter"):
        leader.remove("n1")
    with pytest.raises(ProposalRefused, match="already a voter"):
        leader.add_learner("n1")
    with pytest.raises(ProposalRefused, match="address"):
        leader.add_learner("n2", "no-port")


def test_removing_the_leader_hands_over_with_timeout_now() -> None:
    c = Cluster()
    leader = c.elect("n1")
    c.commit()
    term = leader.term
    _, index = leader.remove("n1")
    c.settle()
    transfers = [m for m in c.sent if isinstance(m, TimeoutNow)]
    assert len(transfers) == 1 and transfers[0].sender == "n1"
    new = c.nodes[transfers[0].to]
    # No election timeout elapsed: the transfer's vote request passed the voters' lease.
    assert new.role is Role.LEADER and new.term == term + 1
    assert leader.role is Role.FOLLOWER and not leader.is_voter
    assert "removed" in leader.member_status()
    assert new.membership.voters == tuple(v for v in ("n2", "n3"))
    assert new.commit_index >= index
    # The removed node stays quiet for ever, and refuses to vote.
    for _ in range(3 * leader.config.election_ticks_max):
        leader.tick()
        c.process(leader)
    assert leader.role is Role.FOLLOWER and leader.term >= term
    with pytest.raises(RaftUsageError, match="removed"):
        leader.campaign()
    with pytest.raises(NotLeader):
        leader.propose(b"late")
    assert leader.removed  # its removal is committed: it refuses every vote
    leader.step(VoteRequest("n2", "n1", leader.term + 1, 1000, 1000, False))
    c.process(leader)
    refusal = [m for m in c.sent if getattr(m, "sender", None) == "n1" and m.to == "n2"][-1]  # type: ignore[attr-defined]
    assert isinstance(refusal, VoteResponse) and not refusal.granted
    c.commit(b"after")  # the two voters left commit on their own


def test_an_uncommitted_configuration_is_in_force_and_reverts_when_truncated() -> None:
    c = Cluster()
    leader = c.elect("n1")
    c.commit()
    c.cut |= {"n1"}
    leader.add_learner("n4")  # reaches nobody
    c.process(leader)
    assert leader.membership.learners == ("n4",)
    assert leader.config_change_pending
    c.queue.clear()
    # n2 leads a new term; n1's uncommitted entry is overwritten when it hears from n2.
    c.tick(3 * leader.config.election_ticks_max)  # n1 cut off: n2 or n3 is elected
    new = next(n for n in c.nodes.values() if n.role is Role.LEADER and n.id != "n1")
    assert new.membership == Membership(("n1", "n2", "n3"))
    c.cut.clear()
    c.tick(2)
    assert leader.role is Role.FOLLOWER
    assert leader.membership == Membership(("n1", "n2", "n3"))
    assert not leader.config_change_pending


def test_the_configuration_survives_restart_and_compaction_and_travels_in_snapshots() -> None:
    c = Cluster(snapshot_chunk_bytes=5)
    leader = c.elect("n1")
    leader.add_learner("n4", "h4:1")
    c.settle()
    leader.remove("n3")
    c.settle()
    expected = Membership(("n1", "n2"), ("n4",), (("n4", "h4:1"),))
    assert leader.membership == expected
    for i in range(4):
        c.commit(b"x%d" % i)
    # Compact both voters behind every CONFIG entry; a restart reads the configuration from
    # the store, and whichever leads next can catch n4 up only by a snapshot.
    for node_id in ("n1", "n2"):
        node, storage = c.nodes[node_id], c.storage[node_id]
        storage.save_checkpoint(node.applied_index, b"state")
        term = node.compact(node.applied_index)
        storage.compact(node.applied_index, term, node.membership_at(node.applied_index).members())
    storage = c.storage["n1"]
    assert storage.snapshot_voters() == ("n1", "n2", "learner:n4@h4:1")
    restarted = c.start("n1")
    assert restarted.membership == expected
    assert restarted.config_index == restarted.log.snapshot_index
    # n4 joins now and can only catch up by the snapshot, which carries the configuration.
    c.tick(3 * leader.config.election_ticks_max)
    new = c.leader()
    assert new.membership == expected
    n4 = c.start("n4")
    c.tick(3)
    assert c.storage["n4"].installs == 1
    assert n4.membership == expected
    assert n4.applied_index == c.leader().applied_index


def test_config_entries_are_their_own_kind_and_apply_nothing() -> None:
    c = Cluster(voters=("n1",))
    leader = c.elect("n1")
    _, index = leader.add_learner("n2")
    c.settle()
    entry = leader.log.entries(index, index + 1, entries_max=1, bytes_max=1 << 20)[0]
    assert entry.kind is EntryKind.CONFIG and entry.payload[0] == 2
    assert Membership.decode(entry.data).learners == ("n2",)


def test_membership_encodings_round_trip_and_refuse_bad_input() -> None:
    m = Membership(("a", "b"), ("c",), (("c", "host.example:7400"),))
    assert Membership.decode(m.encode()) == m
    assert Membership.from_members(m.members()) == m
    assert Membership.from_members(("a", "b")) == Membership(("a", "b"))  # an older store
    with pytest.raises(ValueError, match="distinct"):
        Membership(("a", "a"))
    with pytest.raises(ValueError, match="at least one voter"):
        Membership((), ("a",))
    with pytest.raises(ValueError, match="not a member"):
        Membership(("a",), (), (("z", "h:1"),))
    with pytest.raises(ValueError, match="port 1-65535"):
        Membership(("a",), ("b",), (("b", "h:0"),))
    with pytest.raises(ValueError, match="host:port"):
        Membership(("a",), ("b",), (("b", "h" * 179 + ":1"),))  # 181 characters
    Membership(("a",), ("b",), (("b", "h" * 178 + ":1"),))  # 180 characters: accepted


def test_config_history_tracks_appends_truncations_and_compaction() -> None:
    genesis = Membership(("a", "b", "c"))
    h = ConfigHistory(genesis)
    one, two = genesis.with_learner("d"), genesis.with_learner("d").with_promoted("d")
    h.appended(5, one)
    h.appended(9, two)
    assert h.latest == two and h.at(8) == one and h.at(4) == genesis
    h.replace_range(6, 8, [])  # an append that matched 6..8 leaves 9 alone
    assert h.latest == two
    h.truncate_from(9)
    assert h.latest == one and h.latest_index == 5
    h.compacted(7)
    assert h.base == one and h.base_index == 5 and h.entries == []


def test_codec_carries_timeout_now_the_transfer_flag_and_learners_in_snapshots() -> None:
    for message in (
        TimeoutNow("n1", "n2", 7),
        VoteRequest("n2", "n3", 8, 10, 7, False, True),
        SnapshotChunk("n1", "n4", 3, 10, 2, ("n1", "learner:n4@h:1"), 4, "a" * 64, 0, b"abcd"),
    ):
        assert decode(encode(message, DIGEST), DIGEST) == message


# ---- issue 36, finding 1: a learner's address must be its own -------------------------------

GENESIS_ADDRESSES = (("n1", "127.0.0.1:7001"), ("n2", "127.0.0.1:7002"), ("n3", "127.0.0.1:7003"))


def test_a_learner_at_a_voters_cluster_address_is_refused_naming_that_voter() -> None:
    """The leader would dial the other voter and be refused by its certificate for ever, and
    the learner would never catch up; a different port (or host) is accepted."""
    c = Cluster(genesis_addresses=GENESIS_ADDRESSES)  # type: ignore[arg-type]
    leader = c.elect("n1")
    c.commit()
    for taken, owner in (("127.0.0.1:7002", "n2"), ("127.0.0.1:7001", "n1")):
        with pytest.raises(
            ProposalRefused,
            match=rf"^address: {taken} is the cluster address of {owner} \(a genesis voter\)",
        ):
            leader.add_learner("n4", taken)
    assert leader.membership.learners == ()
    leader.add_learner("n4", "127.0.0.1:7004")
    c.settle()
    assert leader.membership.learners == ("n4",)
    # A member added at run time owns its address too; spelling the host in capitals or the
    # port with a leading zero does not make it another address.
    c.tick(2)
    for taken in ("127.0.0.1:7004", "127.0.0.1:07004"):
        with pytest.raises(ProposalRefused, match=r"cluster address of n4 \(a learner\)"):
            leader.add_learner("n5", taken)


def test_membership_refuses_an_address_another_member_has() -> None:
    m = Membership(("n1",), ("n4",), (("n4", "Host.Example:7004"),))
    with pytest.raises(ValueError, match=r"cluster address of n4 \(a learner\)"):
        m.with_learner("n5", "host.example:7004")
    with pytest.raises(ValueError, match=r"cluster address of n1 \(a genesis voter\)"):
        m.with_learner("n5", "10.0.0.1:7001", taken=(("n1", "10.0.0.1:7001"),))
    assert m.with_learner("n5", "host.example:7005").address_of("n5") == "host.example:7005"
    # A removed genesis voter's address stays taken: every config file still names it.
    assert Membership(("n2",)).with_learner("n5", "h:1", taken=(("n1", "h:2"),)).learners == ("n5",)
    with pytest.raises(ValueError, match="n1"):
        Membership(("n2",)).with_learner("n5", "h:2", taken=(("n1", "h:2"),))
