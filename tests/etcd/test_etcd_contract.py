"""The Replication contract (appliance/replication/base.py) on etcd: three runner-side members
against a real 3-member etcd cluster on loopback. Each test has its own key prefix."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from appliance.replication import Leadership, NotLeader, ProposalRefused
from appliance.replication.etcd import COMMAND_BYTES_MAX, EtcdReplication, index_key
from appliance.replication.etcd_gateway import EtcdAmbiguous, EtcdGateway, prefix_end
from appliance.replication.etcd_watch import WatchCompacted, WatchStream
from tests.etcd.cluster import EtcdCluster
from tests.etcd.members import WAIT_S, StateMachine, Trio, fresh_prefix, settings, wait_for


@pytest.fixture
def trio(etcd_cluster: EtcdCluster) -> Iterator[Trio]:
    members = Trio(etcd_cluster.endpoints).start()
    yield members
    members.stop()


def test_a_proposal_returns_the_apply_result_and_every_member_applies_in_order(trio) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    results = [leader.propose(b"cmd-%d" % n, timeout_s=WAIT_S) for n in range(20)]
    assert results == [(n, n) for n in range(1, 21)]  # (index, position): dense from 1
    wait_for(lambda: all(len(m.applied) == 20 for m in trio.machines.values()), "apply on all")
    expected = [(n + 1, b"cmd-%d" % n) for n in range(20)]
    assert all(m.applied == expected for m in trio.machines.values())


def test_a_non_leader_refuses_proposals_and_barriers_naming_the_leader(trio) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    followers = [m for m in trio.members.values() if m is not leader]
    wait_for(
        lambda: all(f.status()["leader_id"] == leader.node_id for f in followers), "leader known"
    )
    for follower in followers:
        assert not follower.is_leader()
        with pytest.raises(NotLeader) as refused:
            follower.propose(b"x", timeout_s=WAIT_S)
        assert refused.value.leader_hint == leader.node_id
        with pytest.raises(NotLeader):
            follower.read_barrier(timeout_s=WAIT_S)
    assert all(m.applied == [] for m in trio.machines.values())


def test_a_read_barrier_covers_every_committed_proposal(trio) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    for n in range(5):
        leader.propose(b"%d" % n, timeout_s=WAIT_S)
    assert leader.read_barrier(timeout_s=WAIT_S) == 5
    assert leader.status()["applied_index"] == 5


def test_concurrent_proposals_each_get_exactly_one_index(trio) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda n: leader.propose(b"%d" % n, timeout_s=WAIT_S), range(100)))
    assert sorted(r[0] for r in results) == list(range(1, 101))
    applied = trio.machines[leader.node_id].applied
    assert sorted(c for _, c in applied) == sorted(b"%d" % n for n in range(100))


def test_subscribers_hear_the_current_leadership_at_once_and_every_change(trio) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    seen: list[Leadership] = []
    leader.subscribe(seen.append)
    assert seen == [Leadership(True, seen[0].term, leader.node_id)]
    leader.stop()  # graceful: revokes the lease so another member leads at once
    successor = trio.leader(exclude=(leader.node_id,))
    heard: list[Leadership] = []
    successor.subscribe(heard.append)
    assert heard[0].is_leader and heard[0].term > seen[0].term  # a new tenure, a higher term


def test_a_command_of_exactly_the_size_limit_is_accepted_and_one_byte_more_refused(trio) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    assert leader.propose(b"x" * COMMAND_BYTES_MAX, timeout_s=WAIT_S)[0] == 1
    with pytest.raises(ProposalRefused):
        leader.propose(b"x" * (COMMAND_BYTES_MAX + 1), timeout_s=WAIT_S)


def test_a_stopped_member_refuses_proposals(trio) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    leader.stop()
    with pytest.raises(Exception, match="stopped"):
        leader.propose(b"late", timeout_s=WAIT_S)


def test_a_restarted_member_applies_only_after_its_checkpoint(etcd_cluster) -> None:  # type: ignore[no-untyped-def]
    prefix = fresh_prefix()
    first_machine = StateMachine()
    first = EtcdReplication(
        node_id="a", settings=settings(etcd_cluster.endpoints, prefix), apply=first_machine
    )
    first.start()
    try:
        wait_for(first.is_leader, "leadership")
        for n in range(3):
            first.propose(b"%d" % n, timeout_s=WAIT_S)
    finally:
        first.stop()
    again_machine = StateMachine()
    again = EtcdReplication(
        node_id="a",
        settings=settings(etcd_cluster.endpoints, prefix),
        apply=again_machine,
        applied_index=2,
    )
    again.start()
    try:
        wait_for(again.is_leader, "leadership again")
        assert again.propose(b"after", timeout_s=WAIT_S)[0] == 4
        assert again_machine.applied == [(3, b"2"), (4, b"after")]
    finally:
        again.stop()


def test_a_deposed_tenure_can_never_append_again(trio) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    leader.propose(b"one", timeout_s=WAIT_S)
    stale = leader._tenure
    assert stale is not None
    leader.stop()
    successor = trio.leader(exclude=(leader.node_id,))
    successor.propose(b"two", timeout_s=WAIT_S)
    refused = successor.append_txn(stale, 3, [b"zombie/1\nthree"])
    assert not refused.succeeded
    accepted = successor.append_txn(successor._tenure, 3, [b"x/1\nthree"])  # the guard itself
    assert accepted.succeeded


def test_log_history_compaction_is_survived_by_re_reading_keys(etcd_cluster) -> None:  # type: ignore[no-untyped-def]
    prefix = fresh_prefix()
    writer = EtcdReplication(
        node_id="w", settings=settings(etcd_cluster.endpoints, prefix), apply=StateMachine()
    )
    writer.start()
    try:
        wait_for(writer.is_leader, "leadership")
        for n in range(5):
            writer.propose(b"%d" % n, timeout_s=WAIT_S)
        gateway = EtcdGateway(etcd_cluster.endpoints)
        revision, _ = gateway.range(b"/none")
        gateway.call("/v3/kv/compaction", {"revision": str(revision)}, idempotent=True)
        log_prefix = prefix.encode() + b"/log/"
        stream = WatchStream(gateway.endpoint(), log_prefix, prefix_end(log_prefix), 1)
        with pytest.raises(WatchCompacted):
            next(iter(stream.batches()))
        late_machine = StateMachine()
        late = EtcdReplication(
            node_id="late", settings=settings(etcd_cluster.endpoints, prefix), apply=late_machine
        )
        late.start()
        try:
            wait_for(lambda: len(late_machine.applied) == 5, "catch-up after compaction")
            writer.propose(b"after", timeout_s=WAIT_S)
            wait_for(lambda: len(late_machine.applied) == 6, "watch after compaction")
            assert [c for _, c in late_machine.applied] == [b"0", b"1", b"2", b"3", b"4", b"after"]
        finally:
            late.stop()
        gateway.close()
    finally:
        writer.stop()


def test_the_log_layout_in_etcd_is_one_key_per_index(trio, etcd_cluster) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    leader.propose(b"hello", timeout_s=WAIT_S)
    req = urllib.request.Request(
        etcd_cluster.endpoints[0] + "/v3/kv/range",
        data=json.dumps(
            {"key": base64.b64encode(index_key(trio.prefix.encode(), 1)).decode()}
        ).encode(),
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=5) as answer:
        kvs = json.loads(answer.read())["kvs"]
    assert len(kvs) == 1
    assert index_key(b"/p", 7) == b"/p/log/00000000000000000007"


@pytest.mark.parametrize("reached_etcd", [True, False])
def test_an_append_whose_answer_was_lost_is_resent_and_applied_exactly_once(
    trio, reached_etcd: bool
) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    leader.propose(b"before", timeout_s=WAIT_S)
    real_txn = leader.gateway.txn
    lost: list[bool] = []

    def loses_one_answer(compare, success, failure=(), **kwargs):  # type: ignore[no-untyped-def]
        appends = any("request_put" in op for op in success)
        if appends and not lost:
            lost.append(True)
            if reached_etcd:
                real_txn(compare, success, failure, **kwargs)  # applied, answer lost
            raise EtcdAmbiguous("answer lost (injected)")
        return real_txn(compare, success, failure, **kwargs)

    leader.gateway.txn = loses_one_answer  # type: ignore[method-assign]
    assert leader.propose(b"once", timeout_s=WAIT_S) == (2, 2)
    assert leader.propose(b"after", timeout_s=WAIT_S) == (3, 3)
    assert lost == [True]
    wait_for(lambda: all(len(m.applied) == 3 for m in trio.machines.values()), "apply on all")
    for machine in trio.machines.values():
        assert machine.applied == [(1, b"before"), (2, b"once"), (3, b"after")]


def test_a_leader_whose_campaign_key_is_deleted_steps_down_and_says_so(trio, etcd_cluster) -> None:  # type: ignore[no-untyped-def]
    leader = trio.leader()
    seen: list[Leadership] = []
    leader.subscribe(seen.append)
    tenure = leader._tenure
    admin = EtcdGateway(etcd_cluster.endpoints)
    key = base64.b64encode(trio.prefix.encode() + b"/leader").decode()
    admin.call("/v3/kv/deleterange", {"key": key}, idempotent=True)
    admin.close()
    wait_for(lambda: leader._tenure is not tenure, "step down", timeout_s=5)
    # The callback runs on the election thread after the tenure is dropped: await it.
    wait_for(lambda: any(not s.is_leader for s in seen[1:]), "the step-down is announced")
    wait_for(lambda: sum(m.is_leader() for m in trio.members.values()) == 1, "a new tenure")
    successor = next(m for m in trio.members.values() if m.is_leader())
    assert successor._tenure.create_revision > tenure.create_revision  # type: ignore[union-attr]
