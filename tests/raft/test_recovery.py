"""A voter recovering a lost store (docs/voter-recovery.md): no vote, no pre-vote, no campaign
until an append from the leader of its term leaves its log matching the leader's up to the
commit index that append carries (an index of the leader's own term); the flag is cleared by the
driver, durably, before the Ready's messages leave; the flag survives a restart before that.
A leader re-probes a follower that no longer holds what it acknowledged."""

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
    RaftConfig,
    RaftNode,
    RaftUsageError,
    Ready,
    Role,
    VoteRequest,
    VoteResponse,
)
from appliance.raft.progress import ProgressState

VOTERS = ("n1", "n2", "n3")


def make(storage: MemoryLogStorage, node_id: str = "n3", *, quiet: bool = False) -> RaftNode:
    """A node on ``storage``; a recovering one is past its quiet start unless ``quiet``."""
    config = RaftConfig(node_id=node_id, voters=VOTERS, election_ticks_min=5, election_ticks_max=10)
    node = RaftNode(config, storage, random.Random(node_id))
    if storage.recovering() and not quiet:
        for _ in range(QUIET_TICKS):
            node.tick()
        assert sent(cycle(node, storage)) == []
    return node


QUIET_TICKS = 2 * 10  # 2 * election_ticks_max


def cycle(node: RaftNode, storage: MemoryLogStorage) -> list[Ready]:
    """The driver's rule: persist, clear the recovering flag if the Ready says so, advance."""
    readies = []
    while node.has_ready():
        ready = node.ready()
        if ready.must_persist:
            storage.persist(
                term=ready.hard_state.term,
                voted_for=ready.hard_state.voted_for,
                truncate_from=ready.truncate_from,
                entries=ready.stored_entries(),
            )
        if ready.recovered:
            storage.clear_recovering()
        node.advance(ready)
        readies.append(ready)
    return readies


def sent(readies: list[Ready]) -> list[object]:
    return [m for r in readies for m in r.messages]


def entries(first: int, last: int, term: int) -> tuple[Entry, ...]:
    return tuple(Entry(i, term, EntryKind.NORMAL, f"e{i}".encode()) for i in range(first, last + 1))


def outlive_the_leader_lease(node: RaftNode, storage: MemoryLogStorage) -> None:
    """Silence from the leader for the minimum election timeout: (pre-)vote requests are no
    longer ignored by leader stickiness. A recovering node does not campaign meanwhile."""
    for _ in range(node.config.election_ticks_min):
        node.tick()
        assert sent(cycle(node, storage)) == []


def recovering() -> tuple[RaftNode, MemoryLogStorage]:
    storage = MemoryLogStorage(recovering=True)
    return make(storage), storage


# -- the quiet start -------------------------------------------------------------------------


def test_a_recovering_node_drops_every_message_for_twice_the_longest_election_timeout() -> None:
    storage = MemoryLogStorage(recovering=True)
    node = make(storage, quiet=True)
    append = AppendRequest("n1", "n3", 3, 0, 0, entries(1, 2, 3), 2)
    for _ in range(QUIET_TICKS - 1):
        node.tick()
    node.step(append)
    node.step(VoteRequest("n2", "n3", 4, 9, 3, pre_vote=True))
    assert sent(cycle(node, storage)) == [] and node.term == 0 and node.last_index == 0
    node.tick()  # the last quiet tick: from now on it answers
    node.step(append)
    assert sent(cycle(node, storage)) == [AppendResponse("n3", "n1", 3, True, 2)]


def test_a_node_that_is_not_recovering_has_no_quiet_start() -> None:
    storage = MemoryLogStorage()
    node = make(storage)
    node.step(AppendRequest("n1", "n3", 3, 0, 0, entries(1, 2, 3), 2))
    assert sent(cycle(node, storage)) == [AppendResponse("n3", "n1", 3, True, 2)]


# -- no votes, no pre-votes, no campaigns ----------------------------------------------------


@pytest.mark.parametrize("pre_vote", [True, False])
def test_a_recovering_node_refuses_a_vote_it_would_otherwise_grant(pre_vote: bool) -> None:
    node, storage = recovering()
    node.step(VoteRequest("n1", "n3", 5, 10, 4, pre_vote=pre_vote))
    answers = sent(cycle(node, storage))
    assert answers == [VoteResponse("n3", "n1", 0 if pre_vote else 5, False, pre_vote)]
    assert storage.hard_state() == ((0, None) if pre_vote else (5, None))  # no vote recorded
    # The same request to a node that did not lose its store is granted.
    fresh_storage = MemoryLogStorage()
    fresh = make(fresh_storage)
    fresh.step(VoteRequest("n1", "n3", 5, 10, 4, pre_vote=pre_vote))
    assert sent(cycle(fresh, fresh_storage))[0].granted  # type: ignore[attr-defined]


def test_a_recovering_node_never_campaigns_however_many_election_timeouts_pass() -> None:
    storage = MemoryLogStorage(recovering=True)
    node = make(storage, quiet=True)
    messages = []
    for _ in range(20 * node.config.election_ticks_max):
        node.tick()
        messages.extend(sent(cycle(node, storage)))
    assert messages == []
    assert node.role is Role.FOLLOWER and node.term == 0 and node.recovering


def test_a_recovering_node_refuses_an_explicit_campaign() -> None:
    node, _ = recovering()
    with pytest.raises(RaftUsageError, match="recovering"):
        node.campaign()


def test_a_node_whose_store_is_not_recovering_campaigns_as_usual() -> None:
    storage = MemoryLogStorage()
    node = make(storage)
    for _ in range(node.config.election_ticks_max):
        node.tick()
    assert any(isinstance(m, VoteRequest) for m in sent(cycle(node, storage)))


# -- catching up: the exact boundary ---------------------------------------------------------


def test_matching_the_leader_one_short_of_its_commit_index_is_not_enough() -> None:
    node, storage = recovering()
    node.step(AppendRequest("n1", "n3", 3, 0, 0, entries(1, 6, 3), 7))
    readies = cycle(node, storage)
    assert not any(r.recovered for r in readies)
    assert node.recovering and storage.recovering()
    # It still acknowledges like any follower: the leader needs that to replicate.
    assert sent(readies) == [AppendResponse("n3", "n1", 3, True, 6)]
    outlive_the_leader_lease(node, storage)
    node.step(VoteRequest("n2", "n3", 4, 6, 3, pre_vote=False))
    assert sent(cycle(node, storage)) == [VoteResponse("n3", "n2", 4, False, False)]


def test_matching_the_leader_exactly_at_its_commit_index_makes_a_full_voter() -> None:
    node, storage = recovering()
    node.step(AppendRequest("n1", "n3", 3, 0, 0, entries(1, 6, 3), 6))
    readies = cycle(node, storage)
    assert [r.recovered for r in readies].count(True) == 1
    assert not node.recovering and not storage.recovering()
    # The leader becomes its recorded vote for the term it caught up in, durably.
    assert storage.hard_state() == (3, "n1")
    assert storage.last_index() == 6
    # Once the leader falls silent it campaigns like any voter (a pre-vote round first) ...
    ticks = 0
    while node.role is Role.FOLLOWER:
        node.tick()
        ticks += 1
        assert ticks <= node.config.election_ticks_max
    assert {m.to for m in sent(cycle(node, storage)) if isinstance(m, VoteRequest)} == {
        "n1",
        "n2",
    }
    # ... and votes, in a later term, for an up-to-date candidate.
    node.step(VoteRequest("n2", "n3", 4, 6, 3, pre_vote=False))
    assert VoteResponse("n3", "n2", 4, True, False) in sent(cycle(node, storage))


def test_a_vote_in_the_catch_up_term_goes_to_the_leader_only() -> None:
    node, storage = recovering()
    node.step(AppendRequest("n1", "n3", 3, 0, 0, entries(1, 6, 3), 6))
    cycle(node, storage)
    node.step(VoteRequest("n2", "n3", 3, 6, 3, pre_vote=False))  # a duplicate from a lost race
    assert sent(cycle(node, storage)) == [VoteResponse("n3", "n2", 3, False, False)]
    assert storage.hard_state() == (3, "n1")


def test_a_commit_index_of_an_older_term_does_not_end_recovery() -> None:
    """A new leader's commit index may lag what earlier terms committed until its barrier
    commits; only a commit index at an entry of the leader's own term covers them all."""
    node, storage = recovering()
    older = (*entries(1, 4, 2), Entry(5, 3, EntryKind.BARRIER))
    node.step(AppendRequest("n1", "n3", 3, 0, 0, older, 4))
    cycle(node, storage)
    assert node.recovering
    node.step(AppendRequest("n1", "n3", 3, 5, 3, (), 5))
    assert [r.recovered for r in cycle(node, storage)].count(True) == 1


def test_a_heartbeat_never_ends_recovery() -> None:
    """A heartbeat's commit is bounded by the match the leader remembers for us, which may be
    the lost incarnation's: only an append that we accepted proves where our log matches."""
    node, storage = recovering()
    node.step(AppendRequest("n1", "n3", 3, 0, 0, entries(1, 3, 3), 0))
    cycle(node, storage)
    node.step(Heartbeat("n1", "n3", 3, 3, 0))
    cycle(node, storage)
    assert node.recovering and node.commit_index == 3
    node.step(AppendRequest("n1", "n3", 3, 3, 3, (), 3))
    assert [r.recovered for r in cycle(node, storage)].count(True) == 1


# -- durability ------------------------------------------------------------------------------


def test_the_flag_survives_a_restart_before_catch_up() -> None:
    node, storage = recovering()
    node.step(AppendRequest("n1", "n3", 3, 0, 0, entries(1, 4, 3), 9))
    cycle(node, storage)
    restarted = make(storage)  # same durable state, new process
    assert restarted.recovering and restarted.term == 3 and restarted.last_index == 4
    restarted.step(VoteRequest("n2", "n3", 4, 9, 3, pre_vote=False))
    assert not sent(cycle(restarted, storage))[0].granted  # type: ignore[attr-defined]
    for _ in range(5 * restarted.config.election_ticks_max):
        restarted.tick()
        assert not any(isinstance(m, VoteRequest) for m in sent(cycle(restarted, storage)))


def test_a_restarted_node_that_caught_up_is_a_voter() -> None:
    node, storage = recovering()
    node.step(AppendRequest("n1", "n3", 3, 0, 0, entries(1, 2, 3), 2))
    cycle(node, storage)
    assert not make(storage).recovering


# -- the leader's side -----------------------------------------------------------------------


def leader_with_follower_n3_at(match: int) -> tuple[RaftNode, MemoryLogStorage]:
    storage = MemoryLogStorage()
    stored = [(e.index, e.term, e.payload) for e in entries(1, 10, 2)]
    storage.persist(term=2, voted_for="n1", entries=stored)
    config = RaftConfig(node_id="n1", voters=VOTERS, election_ticks_min=5, election_ticks_max=10)
    leader = RaftNode(config, storage, random.Random(1))
    while leader.role is Role.FOLLOWER:
        leader.tick()
    cycle(leader, storage)
    leader.step(VoteResponse("n2", "n1", 3, True, True))
    cycle(leader, storage)
    leader.step(VoteResponse("n2", "n1", 3, True, False))
    cycle(leader, storage)
    assert leader.role is Role.LEADER
    leader.step(AppendResponse("n3", "n1", 3, True, match))
    cycle(leader, storage)
    return leader, storage


def test_a_leader_reprobes_from_the_start_a_follower_that_lost_what_it_acknowledged() -> None:
    leader, storage = leader_with_follower_n3_at(11)
    pr = leader._progress["n3"]
    assert pr.match == 11
    pr.become_probe()  # a lost batch: the next probe is at prev_index == match
    leader.step(AppendResponse("n3", "n1", 3, False, 11, 0, 0))  # an empty, recovered log
    out = [m for m in sent(cycle(leader, storage)) if m.to == "n3"]  # type: ignore[attr-defined]
    assert pr.match == 0 and pr.state is ProgressState.PROBE
    assert out and out[0].prev_index == 0  # type: ignore[attr-defined]


def test_a_rejection_at_or_above_the_match_point_keeps_the_match() -> None:
    leader, storage = leader_with_follower_n3_at(5)
    pr = leader._progress["n3"]
    pr.become_probe()
    leader.step(AppendResponse("n3", "n1", 3, False, 5, 5, 2))
    cycle(leader, storage)
    assert pr.match == 5


# -- the driver ------------------------------------------------------------------------------


class OrderedStorage(MemoryLogStorage):
    def __init__(self, events: list[str]) -> None:
        super().__init__(recovering=True)
        self.events = events

    def persist(self, **kwargs) -> None:  # type: ignore[no-untyped-def, override]
        super().persist(**kwargs)
        self.events.append("persist")

    def clear_recovering(self) -> None:
        super().clear_recovering()
        self.events.append("clear_recovering")


class OrderedTransport:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def send(self, message: object) -> None:
        self.events.append(f"send {type(message).__name__}")


def test_the_driver_clears_the_flag_durably_before_sending_and_status_shows_it() -> None:
    from concurrent.futures import Future

    from appliance.raft.driver import RaftDriver

    events: list[str] = []
    storage = OrderedStorage(events)
    applied: Future[int] = Future()

    def apply(index: int, command: bytes) -> None:
        if index == 2:
            applied.set_result(index)

    config = RaftConfig(node_id="n3", voters=VOTERS, election_ticks_min=2, election_ticks_max=3)
    node = RaftNode(config, storage, random.Random(3))
    driver = RaftDriver(node, storage, OrderedTransport(events), apply, tick_ms=10)
    assert driver.status().recovering and driver.status().as_dict()["recovering"] is True
    driver.start()
    try:
        # The leader retries its append (as it would every heartbeat) until the quiet start
        # (6 ticks of 10 ms) is over and the node takes it.
        for _ in range(1000):
            driver.deliver(AppendRequest("n1", "n3", 3, 0, 0, entries(1, 2, 3), 2))
            try:
                applied.result(timeout=0.02)
                break
            except TimeoutError:
                continue
        assert applied.result(timeout=10) == 2
    finally:
        driver.stop()
    assert events[:3] == ["persist", "clear_recovering", "send AppendResponse"]
    assert not storage.recovering()
    assert driver.status().recovering is False


# -- the transcript, and the same scenario with the rule switched off ------------------------


def test_the_lost_store_transcript_fails_when_the_recovering_rule_is_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutation check for testdata/lost_store_recovery.txt: an n3 that ignores its recovering
    store votes n2 (missing committed entries 2..4) into office."""
    from pathlib import Path

    from appliance.raft import node as raft_node
    from tests.raft.transcript import run_script

    script = Path(__file__).parent / "testdata" / "lost_store_recovery.txt"
    written, produced = run_script(script)
    assert produced == written
    original = raft_node.RaftNode.__init__

    def ignore_recovering(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        self.recovering = False
        self._quiet_ticks_left = 0

    monkeypatch.setattr(raft_node.RaftNode, "__init__", ignore_recovering)
    monkeypatch.delenv("RAFT_REWRITE", raising=False)
    _, mutated = run_script(script)
    assert "n2 becomes leader t2 leader=n2" in mutated
