"""Differential test: the whole-system simulator's committed log (appliance/sim/system: owners
taking over, proposals lost and committed late, a faulty worker, cancels) applied through
etcd-backed replication and through the built-in single-voter Raft yields byte-identical
checkpoints (``SchedulerState.to_json``)."""

from __future__ import annotations

import pytest

from appliance.raft import MemoryLogStorage
from appliance.replication import single
from appliance.replication.etcd import EtcdReplication
from appliance.runner.machine import Machine
from appliance.sim.system.world import LIMITS, SystemOptions, SystemSim
from tests.etcd.members import WAIT_S, fresh_prefix, settings, wait_for

SEEDS = (1, 7, 42)


def simulated_log(seed: int) -> tuple[list[bytes], bytes]:
    sim = SystemSim(seed, SystemOptions())
    assert sim.run().ok
    committed = sim.ledger.committed
    return [committed[index] for index in sorted(committed)], sim.ledger.reference.state.to_json()


def through_raft(commands: list[bytes]) -> bytes:
    machine = Machine(None, LIMITS)
    member = single(node_id="solo", storage=MemoryLogStorage(), apply=machine.apply)
    member.start()
    try:
        for command in commands:
            member.propose(command, timeout_s=WAIT_S)
    finally:
        member.stop()
    return machine.read(lambda state: state.to_json())


def through_etcd(endpoints: list[str], commands: list[bytes]) -> list[bytes]:
    prefix = fresh_prefix()
    machines = [Machine(None, LIMITS) for _ in range(3)]
    members = [
        EtcdReplication(node_id=f"e{i}", settings=settings(endpoints, prefix), apply=m.apply)
        for i, m in enumerate(machines)
    ]
    for member in members:
        member.start()
    try:
        wait_for(lambda: sum(m.is_leader() for m in members) == 1, "one etcd leader")
        leader = next(m for m in members if m.is_leader())
        for command in commands:
            leader.propose(command, timeout_s=WAIT_S)
        wait_for(
            lambda: all(m.applied_index == len(commands) for m in machines), "every member applies"
        )
    finally:
        for member in members:
            member.stop()
    return [m.read(lambda state: state.to_json()) for m in machines]


@pytest.mark.parametrize("seed", SEEDS)
def test_etcd_and_raft_replication_yield_byte_identical_checkpoints(etcd_cluster, seed) -> None:  # type: ignore[no-untyped-def]
    commands, simulated = simulated_log(seed)
    assert len(commands) > 15  # a real workload, not a trivial one
    raft = through_raft(commands)
    etcd = through_etcd(etcd_cluster.endpoints, commands)
    assert raft == simulated
    assert etcd == [raft, raft, raft]
