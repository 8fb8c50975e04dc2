"""Paced dispatch in the owner core (issue 17, "Paced dispatch"): never more attempts in flight
at the worker than it states it takes; the rest wait claimed Running, unsent, noted in their
history; an older worker that states nothing is dispatched to as before.

A scripted worker with ``max_concurrent: 2, max_queued: 2`` answers every exec and observation
with its capacity, and refuses (``pool_full``) any exec beyond four held — which the pacing must
never provoke."""

from __future__ import annotations

from dataclasses import replace

from appliance.commands.operator import OperatorCommand
from appliance.core.occurrence import OccurrenceState
from appliance.owner.events import (
    CancelAnswered,
    CancelRequest,
    DispatchRequest,
    ExecAnswered,
    LeadershipChanged,
    ObserveAnswered,
    ObserveRequest,
    OperatorRequest,
    Reply,
    SetTimer,
    Tick,
    TimerFired,
)
from appliance.owner.owner import Owner
from appliance.owner.worker_answers import (
    CancelResult,
    Capacity,
    ExecResult,
    ObserveResult,
)
from appliance.runner.machine import Machine
from tests.runner.harness import T0, definition
from tests.runner.test_owner import Bench

S = OccurrenceState
BURST = 24


class ScriptedWorker:
    """Holds what it accepted until observed (then it completes); states its capacity."""

    def __init__(self, max_concurrent: int = 2, max_queued: int = 2, states: bool = True):
        self.max_concurrent, self.max_queued, self.states = max_concurrent, max_queued, states
        self.held: set[str] = set()
        self.most_held = 0
        self.pool_full = 0
        self.accepted: list[str] = []

    def capacity(self) -> Capacity | None:
        if not self.states:
            return None
        free = self.max_concurrent + self.max_queued - len(self.held)
        slots = max(0, self.max_concurrent - len(self.held))
        return Capacity(self.max_concurrent, self.max_queued, slots, free - slots)

    def exec(self, effect: DispatchRequest) -> ExecResult:
        b = effect.binding
        eid = f"s{b['schedule_id']}-o{b['occurrence_id']}-a{b['attempt']}"
        if len(self.held) >= self.max_concurrent + self.max_queued:
            self.pool_full += 1
            return ExecResult("not_dispatched", code="pool_full", capacity=self.capacity())
        self.held.add(eid)
        self.accepted.append(eid)
        self.most_held = max(self.most_held, len(self.held))
        return ExecResult("accepted", eid, capacity=self.capacity(), protocol_answer=True)

    def observe(self, effect: ObserveRequest) -> ObserveResult:
        self.held.discard(effect.execution_id)
        return ObserveResult("completed", {"status": "completed"}, capacity=self.capacity())


def _bench(running: int = BURST) -> Bench:
    bench = Bench()
    bench.cfg = replace(bench.cfg, limits=replace(bench.cfg.limits, running=running))
    bench.machine = Machine(None, bench.cfg.limits)
    bench.owner = Owner(cfg=bench.cfg, state=bench.machine, strict=True)
    bench.acquire()
    for i in range(BURST):
        document = definition(name=f"burst-{i}", overlap="Concurrent")
        bench.feed(OperatorRequest(100 + i, OperatorCommand("create", {"definition": document})))
        bench.settle()
    bench.pending = [e for e in bench.pending if not isinstance(e, Reply)]
    bench.wall_s = T0 + 60 + 1  # every schedule is due at T0 + 60
    bench.feed(Tick())
    bench.settle()
    return bench


def _run(bench: Bench, worker: ScriptedWorker, steps_max: int = 5_000) -> list[int]:
    """Answer every effect the owner asks for, in order; the waiting counts seen on the way."""
    waiting_seen = []
    for _ in range(steps_max):
        bench.settle()
        waiting_seen.append(bench.owner.waiting_for_capacity())
        effect = next((e for e in bench.pending if not isinstance(e, Reply)), None)
        if effect is None:
            return waiting_seen
        bench.pending.remove(effect)
        if isinstance(effect, DispatchRequest):
            bench.feed(ExecAnswered(effect.token, worker.exec(effect)))
        elif isinstance(effect, ObserveRequest):
            bench.feed(ObserveAnswered(effect.token, worker.observe(effect)))
        elif isinstance(effect, SetTimer):
            bench.feed(TimerFired(effect.token))
        elif isinstance(effect, CancelRequest):
            bench.feed(CancelAnswered(effect.token, CancelResult("fenced_before_consume")))
    raise AssertionError("the owner never settled")


def _states(bench: Bench) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in bench.machine.state.occurrences.values():
        counts[record.state.value] = counts.get(record.state.value, 0) + 1
    return counts


def test_a_burst_on_a_pool_of_2_plus_2_runs_four_at_a_time_and_all_succeed() -> None:
    bench = _bench()
    assert len(bench.machine.state.occurrences) == BURST
    assert all(r.state is S.RUNNING for r in bench.machine.state.occurrences.values())
    sends = [e for e in bench.pending if isinstance(e, DispatchRequest)]
    assert len(sends) == 1  # nothing stated yet: one probe, the rest wait claimed Running
    assert bench.owner.waiting_for_capacity() == BURST - 1
    worker = ScriptedWorker()
    waiting_seen = _run(bench, worker)
    assert _states(bench) == {"Succeeded": BURST}
    assert worker.most_held == 4 and worker.pool_full == 0  # paced: never past what it takes
    assert len(worker.accepted) == BURST  # each attempt sent once, attempt 1
    assert all(eid.endswith("-a1") for eid in worker.accepted)
    assert max(waiting_seen) == BURST - 1 and waiting_seen[-1] == 0
    # The wait is in each waiting occurrence's replicated history, once.
    noted = [
        r
        for r in bench.machine.state.occurrences.values()
        if [e.reason for e in r.timeline].count("capacity_wait") == 1
    ]
    assert len(noted) == BURST - 1
    notes = [c for c in bench.committed if type(c).__name__ == "NoteCapacityWait"]
    assert len(notes) == 1 and len(notes[0].attempts) == BURST - 1  # one entry for the pass
    waits = bench.events("capacity_wait")
    assert len(waits) == BURST - 1 and len(bench.events("capacity_send")) == BURST - 1


def test_status_counts_the_waiting_attempts_and_shows_the_worker_capacity() -> None:
    bench = _bench()
    first = next(e for e in bench.pending if isinstance(e, DispatchRequest))
    bench.pending.remove(first)
    worker = ScriptedWorker()
    bench.feed(ExecAnswered(first.token, worker.exec(first)))
    bench.feed(OperatorRequest(7, OperatorCommand("status", {})))
    bench.settle()
    reply = next(e for e in bench.pending if isinstance(e, Reply) and e.request == 7)
    dispatch = reply.value["dispatch"]
    assert dispatch["pacing"] == "paced"
    assert dispatch["in_flight"] == 4  # the probe, then three more the worker has room for
    assert dispatch["waiting_for_capacity"] == BURST - 4
    assert dispatch["worker_capacity"]["max_concurrent"] == 2


def test_an_older_worker_that_states_no_capacity_gets_everything_at_once() -> None:
    bench = _bench()
    worker = ScriptedWorker(max_concurrent=64, max_queued=0, states=False)
    first = next(e for e in bench.pending if isinstance(e, DispatchRequest))
    bench.pending.remove(first)
    bench.feed(ExecAnswered(first.token, worker.exec(first)))
    sends = [e for e in bench.pending if isinstance(e, DispatchRequest)]
    assert len(sends) == BURST - 1  # pacing off: as before, all the claims go out
    assert bench.owner.waiting_for_capacity() == 0
    _run(bench, worker)
    assert _states(bench) == {"Succeeded": BURST}


def test_a_waiting_attempt_cancelled_is_fenced_at_the_worker_and_ends_cancelled() -> None:
    bench = _bench()
    waiting = sorted(bench.owner._attempts.waits.waiting_ids())[-1]
    bench.feed(OperatorRequest(9, OperatorCommand("cancel", {"occurrence_id": waiting})))
    bench.settle()
    assert bench.machine.state.occurrences[waiting].state is S.CANCELLING
    _run(bench, ScriptedWorker())
    assert bench.machine.state.occurrences[waiting].state is S.CANCELLED
    assert _states(bench) == {"Succeeded": BURST - 1, "Cancelled": 1}


def test_a_waiting_attempt_after_ownership_moved_is_never_sent() -> None:
    bench = _bench()
    assert bench.owner.waiting_for_capacity() == BURST - 1
    bench.feed(LeadershipChanged(False, 2, "v2"))
    assert bench.owner.waiting_for_capacity() == 0
    worker = ScriptedWorker()
    _run(bench, worker)
    assert len(worker.accepted) <= 1  # only the probe, sent before ownership moved


def test_a_grant_that_expires_while_an_attempt_waits_fences_it_without_unknown() -> None:
    bench = _bench()
    expires_s = bench.cfg.remote.expires_at.timestamp()
    first = next(e for e in bench.pending if isinstance(e, DispatchRequest))
    bench.pending.remove(first)
    bench.wall_s = expires_s  # the grant expires before the worker answers
    worker = ScriptedWorker()
    bench.feed(ExecAnswered(first.token, worker.exec(first)))
    bench.settle()
    states = _states(bench)
    assert "Unknown" not in states
    fenced = [c for c in bench.committed if type(c).__name__ == "FenceDispatch"]
    assert len(fenced) == BURST - 1  # every waiting attempt: no permit can be granted any more
    assert all("capacity_wait" in c.reason for c in fenced)
