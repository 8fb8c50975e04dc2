"""The replication interface, run against `single` and against three in-process Raft voters
(threads, a loopback transport that goes through the wire codec). Real driver threads, real
timers: every wait is bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from appliance.raft import MemoryLogStorage, Message
from appliance.raft.codec import decode, encode
from appliance.replication import Leadership, NotLeader, RaftReplication, single
from tests import support

DIGEST = "d" * 64
WAIT_S = 10.0


class StateMachine:
    """Deterministic apply hook: appends commands, returns (index, position)."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []
        self.lock = threading.Lock()

    def __call__(self, index: int, command: bytes) -> tuple[int, int]:
        with self.lock:
            self.applied.append((index, command))
            return index, len(self.applied)


class Loopback:
    """Delivers encoded messages between in-process members; ``down`` members hear nothing."""

    def __init__(self) -> None:
        self.members: dict[str, RaftReplication] = {}
        self.down: set[str] = set()

    def send(self, message: Message) -> None:
        if message.sender in self.down or message.to in self.down:
            return
        member = self.members.get(message.to)
        if member is not None:
            member.deliver(decode(encode(message, DIGEST), DIGEST))


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    support.wait_for(predicate, what, WAIT_S)


@pytest.fixture
def lone() -> Iterator[tuple[RaftReplication, StateMachine, MemoryLogStorage]]:
    storage, machine = MemoryLogStorage(), StateMachine()
    member = single(node_id="solo", storage=storage, apply=machine)
    member.start()
    yield member, machine, storage
    member.stop()


class Trio:
    def __init__(self) -> None:
        self.ids = ["n1", "n2", "n3"]
        self.net = Loopback()
        self.storage = {i: MemoryLogStorage() for i in self.ids}
        self.machines = {i: StateMachine() for i in self.ids}
        self.members = {i: self._make(i) for i in self.ids}

    def _make(self, node_id: str) -> RaftReplication:
        member = RaftReplication(
            node_id=node_id,
            voters=self.ids,
            storage=self.storage[node_id],
            transport=self.net,
            apply=self.machines[node_id],
            heartbeat_ms=20,
            election_timeout_min_ms=200,
            election_timeout_max_ms=400,
        )
        self.net.members[node_id] = member
        return member

    def leader(self) -> RaftReplication:
        holder: list[RaftReplication] = []

        def found() -> bool:
            live = [m for i, m in self.members.items() if i not in self.net.down]
            leaders = [m for m in live if m.is_leader()]
            holder[:] = leaders
            return len(leaders) == 1

        wait_for(found, "one leader")
        return holder[0]


@pytest.fixture
def trio() -> Iterator[Trio]:
    cluster = Trio()
    for member in cluster.members.values():
        member.start()
    yield cluster
    for member in cluster.members.values():
        member.stop()


def test_single_commits_a_proposal_and_returns_the_apply_result(lone) -> None:  # type: ignore[no-untyped-def]
    member, machine, _ = lone
    assert member.propose(b"first", timeout_s=WAIT_S) == (2, 1)  # index 1 is the barrier
    assert member.propose(b"second", timeout_s=WAIT_S) == (3, 2)
    assert machine.applied == [(2, b"first"), (3, b"second")]
    assert member.is_leader()


def test_single_read_barrier_covers_every_committed_proposal(lone) -> None:  # type: ignore[no-untyped-def]
    member, _, _ = lone
    member.propose(b"x", timeout_s=WAIT_S)
    assert member.read_barrier(timeout_s=WAIT_S) >= 2
    assert member.status()["applied_index"] >= 2


class SlowDisk(MemoryLogStorage):
    """A persist that takes as long as a real fsync and, like one, lets other threads run."""

    def persist(self, **kwargs) -> None:  # type: ignore[no-untyped-def, override]
        time.sleep(0.001)
        super().persist(**kwargs)


def test_single_group_commits_concurrent_proposals() -> None:
    storage, machine = SlowDisk(), StateMachine()
    member = single(node_id="solo", storage=storage, apply=machine)
    member.start()
    try:
        member.propose(b"warm-up", timeout_s=WAIT_S)
        before = storage.persist_calls
        with ThreadPoolExecutor(8) as pool:
            proposals = range(200)
            results = list(
                pool.map(lambda n: member.propose(b"%d" % n, timeout_s=WAIT_S), proposals)
            )
        assert sorted(r[0] for r in results) == list(range(3, 203))  # every index exactly once
        # Proposals that arrive during a persist share the next one.
        assert storage.persist_calls - before < 100
        assert [i for i, _ in machine.applied] == sorted(i for i, _ in machine.applied)
    finally:
        member.stop()


def test_single_restarts_from_its_durable_log_and_applies_only_after_the_checkpoint() -> None:
    storage, machine = MemoryLogStorage(), StateMachine()
    first = single(node_id="solo", storage=storage, apply=machine)
    first.start()
    for n in range(3):
        first.propose(b"%d" % n, timeout_s=WAIT_S)
    first.stop()
    again = StateMachine()
    second = single(node_id="solo", storage=storage, apply=again, applied_index=3)
    second.start()
    try:
        assert second.propose(b"after", timeout_s=WAIT_S)[0] == 6  # 5 is the new term's barrier
        assert again.applied == [(4, b"2"), (6, b"after")]
    finally:
        second.stop()


def test_a_stopped_member_refuses_proposals(lone) -> None:  # type: ignore[no-untyped-def]
    member, _, _ = lone
    member.stop()
    with pytest.raises(Exception, match="stopped"):
        member.propose(b"late", timeout_s=WAIT_S)


def test_leadership_changes_are_published(lone) -> None:  # type: ignore[no-untyped-def]
    member, _, _ = lone
    seen: list[Leadership] = []
    member.subscribe(seen.append)
    wait_for(lambda: any(s.is_leader for s in seen), "leadership notice")
    assert seen[-1].leader_id == "solo"


def test_three_voters_elect_one_leader_and_every_voter_applies_its_proposals(trio) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    for n in range(20):
        leader.propose(b"cmd-%d" % n, timeout_s=WAIT_S)
    wait_for(lambda: all(len(m.applied) == 20 for m in trio.machines.values()), "apply on all")
    logs = {i: m.applied for i, m in trio.machines.items()}
    assert logs["n1"] == logs["n2"] == logs["n3"]


def test_concurrent_proposers_and_readers_commit_once_in_one_order_on_every_voter(trio) -> None:  # type: ignore[no-untyped-def]
    """Proposals, read barriers and the voters' messages all race for the nodes' turns: on
    the proposers' threads, on the threads delivering (here the loopback runs a follower's whole
    cycle on the sender's thread) and on the driver threads. Every proposal must commit exactly
    once, reads must cover what committed before them, and every voter applies the same log."""
    leader = trio.leader()
    proposers, each = 8, 40

    def propose_and_read(p: int) -> list[int]:
        indexes = []
        for n in range(each):
            index, _ = leader.propose(b"p%d-%d" % (p, n), timeout_s=WAIT_S)
            assert leader.read_barrier(timeout_s=WAIT_S) >= index
            indexes.append(index)
        return indexes

    with ThreadPoolExecutor(proposers) as pool:
        indexes = [i for batch in pool.map(propose_and_read, range(proposers)) for i in batch]
    total = proposers * each
    assert len(set(indexes)) == total  # no index answered twice
    wait_for(lambda: all(len(m.applied) == total for m in trio.machines.values()), "apply on all")
    logs = {i: m.applied for i, m in trio.machines.items()}
    assert logs["n1"] == logs["n2"] == logs["n3"]
    assert sorted(c for _, c in logs["n1"]) == sorted(
        b"p%d-%d" % (p, n) for p in range(proposers) for n in range(each)
    )


def test_a_follower_refuses_proposals_and_reads_naming_the_leader(trio) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    leader_id = leader.status()["node_id"]
    wait_for(
        lambda: all(m.status()["leader_id"] == leader_id for m in trio.members.values()),
        "followers know the leader",
    )
    follower = next(m for m in trio.members.values() if m is not leader)
    with pytest.raises(NotLeader) as refused:
        follower.propose(b"x", timeout_s=WAIT_S)
    assert refused.value.leader_hint == leader_id
    with pytest.raises(NotLeader):
        follower.read_barrier(timeout_s=WAIT_S)
    assert leader.read_barrier(timeout_s=WAIT_S) >= 1


def test_losing_the_leader_elects_another_and_keeps_every_committed_entry(trio) -> None:  # type: ignore[no-untyped-def]
    old = trio.leader()
    for n in range(5):
        old.propose(b"before-%d" % n, timeout_s=WAIT_S)
    old_id = old.status()["node_id"]
    trio.net.down.add(old_id)
    new = trio.leader()
    assert new is not old
    new.propose(b"after", timeout_s=WAIT_S)
    survivors = [m for i, m in trio.machines.items() if i != old_id]
    wait_for(lambda: all(len(m.applied) == 6 for m in survivors), "survivors apply")
    assert [c for _, c in survivors[0].applied] == [b"before-%d" % n for n in range(5)] + [b"after"]
    trio.net.down.clear()  # the old leader rejoins, steps down and catches up
    wait_for(lambda: len(trio.machines[old_id].applied) == 6, "old leader catches up")
    assert trio.machines[old_id].applied == survivors[0].applied


def test_single_over_the_sqlite_runner_store_survives_a_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from appliance.core.canonical import canonical_digest
    from appliance.store.runner_store import RunnerStore

    contract = {"voters": {"solo": "127.0.0.1:7001"}, "limits": {}, "schedules": [], "remote": {}}
    digest = canonical_digest(contract)
    store = RunnerStore.create_or_open(tmp_path, contract=contract, contract_digest=digest)
    machine = StateMachine()
    member = single(node_id="solo", storage=store, apply=machine)
    member.start()
    try:
        for n in range(5):
            member.propose(b"durable-%d" % n, timeout_s=WAIT_S)
    finally:
        member.stop()
        store.close()
    store = RunnerStore.create_or_open(tmp_path, contract=contract, contract_digest=digest)
    try:
        assert store.hard_state()[0] == 1 and store.last_index() == 6
        replayed = StateMachine()
        again = single(node_id="solo", storage=store, apply=replayed)
        again.start()
        try:
            again.propose(b"next", timeout_s=WAIT_S)
        finally:
            again.stop()
        assert [c for _, c in replayed.applied] == [b"durable-%d" % n for n in range(5)] + [b"next"]
    finally:
        store.close()
