"""Rules of the Raft core that are not sequences: the ready/advance contract, persistence
before sending, restart from storage, limits at their boundaries, and the term rules."""

from __future__ import annotations

import random

import pytest

from appliance.raft import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    Heartbeat,
    MemoryLogStorage,
    NotLeader,
    ProposalRefused,
    RaftConfig,
    RaftInvariantError,
    RaftNode,
    RaftUsageError,
    ReadRefused,
    Ready,
    Role,
    VoteRequest,
    VoteResponse,
)

MiB = 1024 * 1024
VOTERS = ("n1", "n2", "n3")


def make(node_id: str = "n1", voters=VOTERS, storage=None, **config) -> RaftNode:  # type: ignore[no-untyped-def]
    cfg = RaftConfig(node_id=node_id, voters=voters, **config)
    return RaftNode(
        cfg, storage if storage is not None else MemoryLogStorage(), random.Random(node_id)
    )


def persist(node: RaftNode, storage: MemoryLogStorage) -> Ready:
    ready = node.ready()
    if ready.must_persist:
        storage.persist(
            term=ready.hard_state.term,
            voted_for=ready.hard_state.voted_for,
            truncate_from=ready.truncate_from,
            entries=ready.stored_entries(),
        )
    node.advance(ready)
    return ready


def drain(node: RaftNode, storage: MemoryLogStorage) -> list[Ready]:
    out = []
    while node.has_ready():
        out.append(persist(node, storage))
    return out


def single_voter_leader(**config) -> tuple[RaftNode, MemoryLogStorage]:  # type: ignore[no-untyped-def]
    storage = MemoryLogStorage()
    node = make("n1", ("n1",), storage, **config)
    for _ in range(node.config.election_ticks_max):
        node.tick()
    drain(node, storage)
    assert node.role is Role.LEADER
    return node, storage


def leader_of_three(**config) -> tuple[RaftNode, MemoryLogStorage]:  # type: ignore[no-untyped-def]
    """n1 elected by n2's votes, barrier acknowledged by n2 and committed."""
    storage = MemoryLogStorage()
    node = make("n1", VOTERS, storage, **config)
    while node.role is Role.FOLLOWER:
        node.tick()
    drain(node, storage)
    node.step(VoteResponse("n2", "n1", 1, True, True))
    drain(node, storage)
    node.step(VoteResponse("n2", "n1", 1, True, False))
    drain(node, storage)
    assert node.role is Role.LEADER
    node.step(AppendResponse("n2", "n1", 1, True, 1))
    drain(node, storage)
    assert node.commit_index == 1
    return node, storage


# -- the ready/advance contract -------------------------------------------------------------


def test_a_vote_grant_leaves_in_the_same_ready_that_persists_the_vote() -> None:
    storage = MemoryLogStorage()
    node = make("n2", storage=storage)
    node.step(VoteRequest("n1", "n2", 1, 0, 0, pre_vote=False))
    ready = node.ready()
    assert [type(m) for m in ready.messages] == [VoteResponse]
    assert ready.messages[0].granted  # type: ignore[union-attr]
    assert ready.persist_hard_state and ready.hard_state.voted_for == "n1"
    assert storage.hard_state() == (0, None)  # nothing is durable until the driver persists


def test_an_append_ack_leaves_in_the_same_ready_as_the_entries_it_acknowledges() -> None:
    node = make("n2")
    entry = Entry(1, 1, EntryKind.BARRIER)
    node.step(AppendRequest("n1", "n2", 1, 0, 0, (entry,), 0))
    ready = node.ready()
    assert ready.entries == (entry,)
    assert ready.messages == (AppendResponse("n2", "n1", 1, True, 1),)


def test_no_input_is_accepted_between_ready_and_advance() -> None:
    node = make("n2")
    node.step(VoteRequest("n1", "n2", 1, 0, 0, pre_vote=False))
    ready = node.ready()
    for call in (
        node.tick,
        lambda: node.step(Heartbeat("n1", "n2", 1, 0, 0)),
        lambda: node.propose(b"x"),
        node.ready,
    ):
        with pytest.raises(RaftUsageError):
            call()
    node.advance(ready)
    node.tick()


def test_advance_refuses_a_ready_the_driver_did_not_persist() -> None:
    node = make("n2")
    node.step(AppendRequest("n1", "n2", 1, 0, 0, (Entry(1, 1, EntryKind.BARRIER),), 0))
    ready = node.ready()
    with pytest.raises(RaftInvariantError, match="persist the whole ready"):
        node.advance(ready)


def test_advance_refuses_a_ready_it_did_not_hand_out() -> None:
    node = make("n2")
    node.step(VoteRequest("n1", "n2", 1, 0, 0, pre_vote=False))
    node.ready()
    other = make("n3")
    other.step(VoteRequest("n1", "n3", 1, 0, 0, pre_vote=False))
    with pytest.raises(RaftUsageError):
        node.advance(other.ready())


def test_committed_entries_are_handed_out_only_once_durable_and_in_order() -> None:
    node, storage = single_voter_leader()
    node.propose(b"a")
    node.propose(b"b")
    first = persist(node, storage)
    assert first.committed == ()  # the entries were not durable yet
    second = persist(node, storage)
    assert [e.data for e in second.committed] == [b"a", b"b"]
    assert node.applied_index == 3


# -- restart from storage -------------------------------------------------------------------


def test_a_restarted_node_keeps_its_term_vote_and_log() -> None:
    storage = MemoryLogStorage()
    node = make("n2", storage=storage)
    node.step(VoteRequest("n1", "n2", 4, 0, 0, pre_vote=False))
    drain(node, storage)
    node.step(AppendRequest("n1", "n2", 4, 0, 0, (Entry(1, 4, EntryKind.BARRIER),), 0))
    drain(node, storage)
    restarted = make("n2", storage=storage)
    assert (restarted.term, restarted.voted_for, restarted.last_index) == (4, "n1", 1)
    restarted.step(VoteRequest("n3", "n2", 4, 9, 4, pre_vote=False))
    ready = restarted.ready()
    assert ready.messages == (VoteResponse("n2", "n3", 4, False, False),)  # one vote per term


def test_a_restart_with_an_applied_index_resumes_applying_after_it() -> None:
    node, storage = single_voter_leader()
    for data in (b"a", b"b", b"c"):
        node.propose(data)
    drain(node, storage)
    restarted = make("n1", ("n1",), storage)
    assert restarted.applied_index == 0
    resumed = RaftNode(restarted.config, storage, random.Random(1), applied_index=3)
    assert (resumed.commit_index, resumed.applied_index) == (3, 3)
    with pytest.raises(RaftInvariantError):
        RaftNode(restarted.config, storage, random.Random(1), applied_index=5)


# -- limits at their boundaries ---------------------------------------------------------------


def test_the_largest_proposal_is_one_entry_that_fills_a_batch() -> None:
    assert RaftConfig("n1", ("n1",)).entry_data_bytes_max == 12 * MiB - 1
    node, _ = single_voter_leader(batch_bytes_max=100)
    node.propose(b"x" * 99)
    with pytest.raises(ProposalRefused, match="exceeds 99"):
        node.propose(b"x" * 100)


def test_uncommitted_entries_are_capped() -> None:
    node, _ = single_voter_leader(uncommitted_entries_max=3)
    node.propose(b"a")
    node.propose(b"b")
    node.propose(b"c")
    with pytest.raises(ProposalRefused, match="3 entries"):
        node.propose(b"d")


def test_pending_read_barriers_are_capped() -> None:
    node, _ = leader_of_three(reads_pending_max=2)
    node.read_index(1)
    node.read_index(2)
    with pytest.raises(ReadRefused):
        node.read_index(3)


def test_replication_batches_respect_the_entry_and_byte_caps() -> None:
    node, storage = leader_of_three(batch_entries_max=4, batch_bytes_max=100)
    node.step(AppendResponse("n3", "n1", 1, True, 1))
    for _ in range(6):
        node.propose(b"x" * 9)  # 10 payload bytes each (indexes 2-7)
    for _ in range(2):
        node.propose(b"y" * 59)  # 60 payload bytes each (indexes 8-9)
    ready = persist(node, storage)
    to_n2 = [m for m in ready.messages if isinstance(m, AppendRequest) and m.to == "n2"]
    batches = [[e.index for e in m.entries] for m in to_n2]
    # 4 entries: the entry cap binds; then 10+10+60 = 80 bytes, and one more 60 would make 140.
    assert batches == [[2, 3, 4, 5], [6, 7, 8], [9]]
    assert [sum(e.payload_bytes for e in m.entries) for m in to_n2] == [40, 80, 60]


# -- term rules --------------------------------------------------------------------------------


def test_a_follower_with_a_live_leader_ignores_higher_term_votes() -> None:
    storage = MemoryLogStorage()
    node = make("n2", storage=storage)
    node.step(Heartbeat("n1", "n2", 1, 0, 0))
    drain(node, storage)
    node.step(VoteRequest("n3", "n2", 5, 10, 1, pre_vote=False))
    assert node.term == 1 and node.voted_for is None
    assert not [m for r in drain(node, storage) for m in r.messages]


def test_a_pre_vote_is_granted_without_changing_term_or_vote() -> None:
    node = make("n2")
    node.step(VoteRequest("n3", "n2", 1, 0, 0, pre_vote=True))
    ready = node.ready()
    assert ready.messages == (VoteResponse("n2", "n3", 1, True, True),)
    assert (node.term, node.voted_for, ready.persist_hard_state) == (0, None, False)


def test_a_vote_for_a_less_complete_log_is_refused() -> None:
    storage = MemoryLogStorage()
    node = make("n2", storage=storage)
    node.step(AppendRequest("n1", "n2", 2, 0, 0, (Entry(1, 2, EntryKind.BARRIER),), 0))
    drain(node, storage)
    for _ in range(node.config.election_ticks_max):  # the lease of n1 runs out
        node.tick()
    drain(node, storage)
    node.step(VoteRequest("n3", "n2", 3, 5, 1, pre_vote=False))
    ready = node.ready()
    assert VoteResponse("n2", "n3", 3, False, False) in ready.messages


def test_a_stale_leader_learns_the_higher_term_from_an_answer_and_steps_down() -> None:
    node, _ = leader_of_three()
    node.step(AppendResponse("n2", "n1", 7, False, 0))
    assert (node.role, node.term) == (Role.FOLLOWER, 7)


def test_an_append_from_an_older_term_is_answered_with_our_term() -> None:
    node = make("n2")
    node.step(Heartbeat("n1", "n2", 3, 0, 0))
    node.advance(node.ready())
    node.step(AppendRequest("n3", "n2", 2, 0, 0, (), 0))
    assert node.ready().messages == (AppendResponse("n2", "n3", 3, False, 0),)


def test_a_duplicated_or_stale_append_never_truncates() -> None:
    storage = MemoryLogStorage()
    node = make("n2", storage=storage)
    entries = tuple(Entry(i, 1, EntryKind.NORMAL, b"%d" % i) for i in range(1, 6))
    node.step(AppendRequest("n1", "n2", 1, 0, 0, entries, 0))
    drain(node, storage)
    node.step(AppendRequest("n1", "n2", 1, 1, 1, entries[1:3], 0))
    ready = node.ready()
    assert ready.truncate_from is None and ready.entries == ()
    assert ready.messages == (AppendResponse("n2", "n1", 1, True, 3),)
    assert node.last_index == 5


def test_overwriting_a_committed_entry_is_an_invariant_violation() -> None:
    storage = MemoryLogStorage()
    node = make("n2", storage=storage)
    node.step(
        AppendRequest(
            "n1",
            "n2",
            1,
            0,
            0,
            (Entry(1, 1, EntryKind.NORMAL, b"a"), Entry(2, 1, EntryKind.NORMAL, b"b")),
            2,
        )
    )
    drain(node, storage)
    with pytest.raises(RaftInvariantError, match="committed"):
        node.log.append([Entry(2, 2, EntryKind.NORMAL, b"other")])


def test_two_leaders_in_one_term_is_an_invariant_violation() -> None:
    node, _ = leader_of_three()
    with pytest.raises(RaftInvariantError, match="two leaders"):
        node.step(Heartbeat("n2", "n1", node.term, 0, 0))


def test_proposals_and_reads_on_a_follower_name_the_leader() -> None:
    node = make("n2")
    node.step(Heartbeat("n1", "n2", 1, 0, 0))
    node.advance(node.ready())
    with pytest.raises(NotLeader) as refused:
        node.propose(b"x")
    assert refused.value.leader_hint == "n1"
    with pytest.raises(NotLeader):
        node.read_index(1)


def test_a_single_voter_serves_reads_at_once_after_its_barrier() -> None:
    node, storage = single_voter_leader()
    node.read_index(9)
    ready = persist(node, storage)
    assert [(r.request_id, r.index) for r in ready.reads] == [(9, 1)]


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"node_id": "n 1", "voters": ("n 1",)}, "node id"),
        ({"node_id": "n1", "voters": ("n2", "n3")}, "not among"),
        ({"node_id": "n1", "voters": ("n1", "n1")}, "distinct"),
        ({"node_id": "n1", "voters": ("n1",), "heartbeat_ticks": 10}, "heartbeat_ticks"),
        ({"node_id": "n1", "voters": ("n1",), "batch_entries_max": 0}, "positive"),
        ({"node_id": "x" * 65, "voters": ("x" * 65,)}, "node id"),
    ],
)
def test_invalid_configs_are_refused(config, problem) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=problem):
        RaftConfig(**config)


def test_a_64_character_node_id_is_accepted() -> None:
    RaftConfig("x" * 64, ("x" * 64,))


def test_at_most_inflight_batches_max_appends_are_unacknowledged_per_follower() -> None:
    node, storage = leader_of_three(inflight_batches_max=2, batch_entries_max=1)
    for n in range(5):
        node.propose(b"%d" % n)
    ready = persist(node, storage)
    to_n2 = [m for m in ready.messages if isinstance(m, AppendRequest) and m.to == "n2"]
    assert [m.entries[0].index for m in to_n2] == [2, 3]  # exactly the cap, then it waits
    node.step(AppendResponse("n2", "n1", 1, True, 2))  # one acknowledged: one more may go
    more = [m for m in persist(node, storage).messages if isinstance(m, AppendRequest)]
    assert [(m.to, m.entries[0].index) for m in more if m.to == "n2"] == [("n2", 4)]


def test_a_ready_hands_out_at_most_apply_entries_max_committed_entries() -> None:
    node, storage = single_voter_leader(apply_entries_max=3)
    for n in range(7):
        node.propose(b"%d" % n)
    sizes = [len(r.committed) for r in drain(node, storage)]
    assert max(sizes) == 3
    assert sum(sizes) == 7
    assert node.applied_index == 8
