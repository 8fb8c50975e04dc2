"""Faults against etcd: its leader member killed, a runner paused past its lease, a runner cut
off from etcd. Each test gets its own 3-member etcd cluster (faults leave marks)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.replication import NotLeader
from appliance.replication.etcd import EtcdReplication
from tests.etcd.cluster import EtcdCluster, require_etcd
from tests.etcd.members import WAIT_S, StateMachine, Trio, fresh_prefix, settings, wait_for
from tests.etcd.proxy import CuttableProxy


@pytest.fixture
def cluster(tmp_path) -> Iterator[EtcdCluster]:  # type: ignore[no-untyped-def]
    require_etcd()
    etcd = EtcdCluster(tmp_path)
    try:
        etcd.start()
        yield etcd
    finally:
        etcd.stop()


def propose_somewhere(trio: Trio, command: bytes, deadline_s: float) -> tuple[int, int]:
    """Retry through whoever leads until the command is applied (re-proposing only after a
    definite refusal, so nothing is applied twice)."""
    while time.monotonic() < deadline_s:
        for member in trio.members.values():
            if not member.is_leader():
                continue
            try:
                return member.propose(command, timeout_s=WAIT_S)  # type: ignore[no-any-return]
            except NotLeader:
                continue
        time.sleep(0.02)
    raise AssertionError(f"{command!r} was not committed in time")


def test_killing_the_etcd_leader_member_lets_proposals_continue_after_re_election(cluster) -> None:  # type: ignore[no-untyped-def]
    trio = Trio(cluster.endpoints).start()
    try:
        leader = trio.leader()
        for n in range(5):
            leader.propose(b"before-%d" % n, timeout_s=WAIT_S)
        cluster.kill(cluster.leader())
        deadline_s = time.monotonic() + 20
        after = [propose_somewhere(trio, b"after-%d" % n, deadline_s) for n in range(5)]
        assert [index for index, _ in after] == list(range(6, 11))
        expected = [b"before-%d" % n for n in range(5)] + [b"after-%d" % n for n in range(5)]
        wait_for(
            lambda: all([c for _, c in m.applied] == expected for m in trio.machines.values()),
            "every runner applies the same log once",
        )
    finally:
        trio.stop()


def test_a_runner_paused_past_its_lease_stops_at_its_deadline_and_its_append_fails(cluster) -> None:  # type: ignore[no-untyped-def]
    trio = Trio(cluster.endpoints, ttl_s=2).start()
    try:
        old = trio.leader()
        old.propose(b"one", timeout_s=WAIT_S)
        wake = threading.Event()
        keepalive = old.gateway.lease_keepalive

        def paused(lease_id: int, **_: object) -> int:  # the elector freezes, as under SIGSTOP
            wake.wait(30)
            return keepalive(lease_id)

        old.gateway.lease_keepalive = paused  # type: ignore[method-assign]
        tenure = old._tenure
        assert tenure is not None
        wait_for(lambda: not old.is_leader(), "the local lease deadline", timeout_s=5)
        assert time.monotonic() >= tenure.deadline_s - 0.05  # not before the deadline...
        with pytest.raises(NotLeader):
            old.propose(b"refused", timeout_s=WAIT_S)  # ...and no work after it
        new = trio.leader(exclude=(old.node_id,))
        assert new.propose(b"two", timeout_s=WAIT_S)[0] == 2
        wake.set()  # the paused runner wakes and replays the append it had prepared
        stale = old.append_txn(tenure, 3, [b"zombie/1\nzombie"])
        assert not stale.succeeded
        wait_for(lambda: old.status()["role"] != "leader", "old steps down")
        wait_for(lambda: len(trio.machines[old.node_id].applied) == 2, "old catches up")
        assert [c for _, c in trio.machines[old.node_id].applied] == [b"one", b"two"]
    finally:
        trio.stop()


def test_a_runner_cut_from_etcd_loses_leadership_and_another_takes_over(cluster) -> None:  # type: ignore[no-untyped-def]
    proxies = [CuttableProxy(cluster.client_port[n]) for n in cluster.names]
    prefix = fresh_prefix()
    cut_machine = StateMachine()
    cut_member = EtcdReplication(
        node_id="cut", settings=settings([p.url for p in proxies], prefix), apply=cut_machine
    )
    trio = Trio(cluster.endpoints, prefix=prefix)
    try:
        cut_member.start()
        wait_for(cut_member.is_leader, "the proxied runner leads first")
        cut_member.propose(b"first", timeout_s=WAIT_S)
        trio.start()
        seen: list[bool] = []
        cut_member.subscribe(lambda lead: seen.append(lead.is_leader))
        for proxy in proxies:
            proxy.cut()
        wait_for(lambda: not cut_member.is_leader(), "leadership lost", timeout_s=5)
        wait_for(lambda: seen[-1] is False, "subscribers told", timeout_s=5)
        successor = trio.leader()
        assert successor.propose(b"second", timeout_s=WAIT_S)[0] == 2
        with pytest.raises(NotLeader):
            cut_member.propose(b"from the cut runner", timeout_s=WAIT_S)
        for proxy in proxies:
            proxy.heal()
        wait_for(lambda: len(cut_machine.applied) == 2, "the healed runner catches up")
        assert [c for _, c in cut_machine.applied] == [b"first", b"second"]
        assert not cut_member.is_leader()
    finally:
        trio.stop()
        cut_member.stop()
        for proxy in proxies:
            proxy.close()


def test_a_sigstopped_leader_process_cannot_append_after_it_wakes(cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    prefix = fresh_prefix()
    out = open(tmp_path / "a.out", "wb")  # noqa: SIM115 - handed to the child
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.etcd.member_proc", "a", prefix, "2", *cluster.endpoints],
        stdout=out,
        cwd=Path(__file__).resolve().parents[2],
    )
    out.close()
    machine = StateMachine()
    other = EtcdReplication(
        node_id="b", settings=settings(cluster.endpoints, prefix), apply=machine
    )
    try:
        wait_for(
            lambda: (tmp_path / "a.out").read_bytes().count(b'"ok"') >= 20,
            "the child leads and appends",
        )
        other.start()
        child.send_signal(signal.SIGSTOP)
        wait_for(other.is_leader, "ownership moves to b", timeout_s=10)
        first_of_b = other.propose(b"b-1", timeout_s=WAIT_S)[0]
        child.send_signal(signal.SIGCONT)
        for n in range(2, 6):
            other.propose(b"b-%d" % n, timeout_s=WAIT_S)
        time.sleep(0.5)  # let the woken child try whatever it had prepared
    finally:
        child.send_signal(signal.SIGCONT)
        child.terminate()
        child.wait(timeout=10)
        other.stop()
    after_wake = [c for i, c in machine.applied if i >= first_of_b]
    assert after_wake == [b"b-%d" % n for n in range(1, 6)]  # not one entry from the child
    indexes = [i for i, _ in machine.applied]
    assert indexes == list(range(1, len(indexes) + 1))
    events = [json.loads(line) for line in (tmp_path / "a.out").read_text().splitlines()]
    assert {"leadership": False} in events  # the child noticed it lost the lease
    committed_by_child = [e["ok"] for e in events if "ok" in e]
    assert committed_by_child, "the child committed before its pause"
    assert all(index < first_of_b for index in committed_by_child)
