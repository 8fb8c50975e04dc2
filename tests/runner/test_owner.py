"""The owner core on its own: events in, effects out, no threads or clocks (a transcript test
bench that commits each ``Propose`` through the real apply, in order)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from appliance.commands.operator import OperatorCommand
from appliance.core.admission import Admit
from appliance.core.binding import binding_from_json
from appliance.owner.applied import Accepted
from appliance.owner.attempts import (
    OBSERVE_AFTER_QUEUE_S,
    OBSERVE_FIRST_POLL_S,
    OBSERVE_QUEUED_FIRST_POLL_S,
)
from appliance.owner.binding import execution_id
from appliance.owner.events import (
    AdmissionRequest,
    BarrierDone,
    DispatchRequest,
    ExecAnswered,
    FailedAnswer,
    LeadershipChanged,
    LogRecord,
    ObserveAnswered,
    ObserveRequest,
    OperatorRequest,
    ProposalDone,
    Propose,
    ReadBarrier,
    Reply,
    SetTimer,
    Tick,
    TimerFired,
)
from appliance.owner.owner import Owner
from appliance.owner.worker_answers import Capacity, ExecResult, ObserveResult
from appliance.runner.machine import Machine, encode_command
from tests.runner.harness import T0, config, definition


class Bench:
    """Feeds an Owner; commits proposals through a real Machine only when told to."""

    def __init__(self) -> None:
        self.cfg = config()
        self.machine = Machine(None, self.cfg.limits)
        self.owner = Owner(cfg=self.cfg, state=self.machine, strict=True)
        self.wall_s = float(T0 + 1)
        self.index = 0
        self.pending: list[Any] = []  # effects not yet answered
        self.logs: list[LogRecord] = []
        self.committed: list[Any] = []  # every command committed, in order

    def feed(self, event: Any) -> list[Any]:
        out = self.owner.handle(event, self.wall_s)
        self.logs += [e for e in out if isinstance(e, LogRecord)]
        self.pending += [e for e in out if not isinstance(e, LogRecord)]
        return out

    def take(self, kind: type) -> Any:
        for effect in self.pending:
            if isinstance(effect, kind):
                self.pending.remove(effect)
                return effect
        raise AssertionError(f"no {kind.__name__} among {self.pending}")

    def commit(self, propose: Propose) -> list[Any]:
        self.index += 1
        self.committed.append(propose.command)
        result = self.machine.apply(self.index, encode_command(propose.command))
        return self.feed(ProposalDone(propose.token, result))

    def settle(self) -> None:
        """Answer every barrier and commit every proposal, in order, until none is pending."""
        while any(isinstance(e, Propose | ReadBarrier) for e in self.pending):
            effect = next(e for e in self.pending if isinstance(e, Propose | ReadBarrier))
            self.pending.remove(effect)
            if isinstance(effect, ReadBarrier):
                self.feed(BarrierDone(effect.token, None, {"term": 1}))
            else:
                self.commit(effect)

    def acquire(self) -> None:
        self.feed(LeadershipChanged(True, 1, "v1"))
        self.feed(Tick())
        self.settle()
        assert self.owner.epoch == 1

    def events(self, name: str) -> list[dict[str, Any]]:
        return [dict(r.fields) for r in self.logs if r.event == name]


def test_ownership_is_a_barrier_then_the_committed_transition() -> None:
    bench = Bench()
    bench.feed(LeadershipChanged(True, 1, "v1"))
    bench.feed(Tick())
    barrier = bench.take(ReadBarrier)
    assert bench.owner.epoch is None and not bench.pending  # nothing proposed before the barrier
    bench.feed(BarrierDone(barrier.token, None))
    propose = bench.take(Propose)
    assert type(propose.command).__name__ == "AcquireOwnership"
    bench.commit(propose)
    assert bench.owner.epoch is None  # a new store: the initial schedules are committed first
    seed = bench.take(Propose)
    assert type(seed.command).__name__ == "SeedInitialSchedules"
    bench.commit(seed)
    assert bench.owner.epoch == 1
    assert bench.events("ownership_acquired")[0]["epoch"] == 1


def test_a_serial_decision_holds_other_events_until_its_answer_arrives() -> None:
    bench = Bench()
    bench.acquire()
    create = OperatorCommand("create", {"definition": definition()})
    bench.feed(OperatorRequest(7, create))
    propose = bench.take(Propose)
    bench.feed(OperatorRequest(8, OperatorCommand("list", {})))  # waits behind the create
    assert not any(isinstance(e, Reply) for e in bench.pending)
    out = bench.commit(propose)
    replies = [e for e in out if isinstance(e, Reply)]
    assert [r.request for r in replies] == [7, 8]
    assert replies[0].value["id"] == 1 and len(replies[1].value["schedules"]) == 1


def dispatched(bench: Bench) -> DispatchRequest:
    """Create a schedule and let its first slot be claimed; the dispatch effect."""
    bench.acquire()
    bench.feed(OperatorRequest(1, OperatorCommand("create", {"definition": definition()})))
    bench.settle()
    bench.wall_s = T0 + 60
    bench.feed(Tick())
    bench.settle()  # the folded observation and claim
    dispatch: DispatchRequest = bench.take(DispatchRequest)
    assert dispatch.binding["occurrence_id"] == 1
    return dispatch


def admit(bench: Bench, binding: Any) -> None:
    """The worker asks for its permit and the Admit commits."""
    bench.feed(AdmissionRequest(99, binding, "inc-1"))
    bench.settle()


def occurrence(bench: Bench) -> Any:
    return bench.machine.read(lambda st: st.occurrences[1])


def proposed_kinds(bench: Bench) -> list[str]:
    return [type(e.command).__name__ for e in bench.pending if isinstance(e, Propose)]


def test_an_uncertain_dispatch_without_a_permit_is_fenced_and_claimed_again() -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("uncertain", detail="ambiguous send")))
    assert proposed_kinds(bench) == ["FenceDispatch"]
    bench.settle()
    record = occurrence(bench)
    assert (record.state.value, record.attempt, record.retries_used) == ("Pending", 2, 0)
    (fenced,) = bench.events("dispatch_fenced")
    assert fenced["state"] == "Pending" and "ambiguous send" in fenced["reason"]
    bench.feed(Tick())
    bench.settle()  # the fenced occurrence is claimed again, as its next attempt
    again = bench.take(DispatchRequest)
    assert again.binding["attempt"] == 2 and again.binding != dispatch.binding


def test_an_uncertain_dispatch_after_a_permit_is_observed_then_unknown_never_sent_again() -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    admit(bench, dispatch.binding)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("uncertain", detail="ambiguous send")))
    bench.settle()
    assert occurrence(bench).state.value == "Running"  # observed: Unknown only if it stays lost
    deadline_s = bench.owner._attempts.work[1].deadline_s
    for i in range(3):  # polls: observe again, never dispatch again
        if i == 2:
            bench.wall_s = deadline_s
        timer = bench.take(SetTimer)
        bench.feed(TimerFired(timer.token))
        observe = bench.take(ObserveRequest)
        bench.feed(ObserveAnswered(observe.token, ObserveResult(None, detail="HTTP 404")))
        bench.feed(Tick())
        bench.settle()
        assert not any(isinstance(e, DispatchRequest) for e in bench.pending)
    assert "FenceDispatch" not in [type(c).__name__ for c in bench.committed]
    record = occurrence(bench)
    assert record.state.value == "Unknown" and record.attempt == 1
    (unknown,) = [e for e in bench.events("outcome") if e["state"] == "Unknown"]
    assert "permit committed" in unknown["reason"] and "HTTP 404" in unknown["reason"]


def observe_once(bench: Bench, result: ObserveResult) -> None:
    bench.feed(TimerFired(bench.take(SetTimer).token))
    bench.feed(ObserveAnswered(bench.take(ObserveRequest).token, result))
    bench.settle()


def test_an_execution_waiting_for_a_slot_at_the_worker_restarts_the_deadline() -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    admit(bench, dispatch.binding)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", "s1-o1-a1")))
    first_deadline_s = bench.owner._attempts.work[1].deadline_s
    queued = ObserveResult("running", {"status": "running", "started_at": None})
    bench.wall_s = first_deadline_s + 5  # long past it, still queued behind the engine's slots
    observe_once(bench, queued)
    assert occurrence(bench).state.value == "Running"
    moved_s = bench.owner._attempts.work[1].deadline_s
    assert moved_s == bench.wall_s + bench.cfg.remote.timeout_seconds + 30
    started = ObserveResult("running", {"status": "running", "started_at": "2026-01-01T00:00Z"})
    bench.wall_s = moved_s - 1
    observe_once(bench, started)  # first seen started: the run's timeout began since the last
    started_s = bench.owner._attempts.work[1].deadline_s
    assert started_s == bench.wall_s + bench.cfg.remote.timeout_seconds + 30
    bench.wall_s = started_s - 1
    observe_once(bench, started)  # still running: the deadline stays
    assert bench.owner._attempts.work[1].deadline_s == started_s
    assert occurrence(bench).state.value == "Running"
    bench.wall_s = started_s
    observe_once(bench, started)
    record = occurrence(bench)
    assert record.state.value == "Unknown" and record.attempt == 1


@pytest.mark.parametrize(
    ("capacity", "first_s"),
    [
        (None, OBSERVE_FIRST_POLL_S),  # an older worker: nothing said
        (Capacity(4, 16, 1, 16), OBSERVE_FIRST_POLL_S),  # a slot was free: it runs at once
        (Capacity(4, 16, 0, 16), OBSERVE_FIRST_POLL_S),  # it took the last slot
        (Capacity(4, 16, 0, 15), OBSERVE_QUEUED_FIRST_POLL_S),  # queued behind busy slots
    ],
)
def test_the_first_look_at_an_execution_accepted_into_a_queue_comes_later(
    capacity: Capacity | None, first_s: float
) -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    admit(bench, dispatch.binding)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", "s1-o1-a1", capacity=capacity)))
    assert bench.take(SetTimer).delay_s == first_s


def due_catch_up(bench: Bench, slots: int) -> None:
    """Ownership, then one Concurrent schedule with ``slots`` missed slots caught up at once."""
    bench.acquire()
    catch_up = definition(overlap="Concurrent", missed={"CatchUp": {"cap": slots}})
    bench.feed(OperatorRequest(1, OperatorCommand("create", {"definition": catch_up})))
    bench.settle()
    bench.wall_s = T0 + slots * 60 + 1
    bench.feed(Tick())
    bench.settle()


def accept_catch_up(bench: Bench, capacities: list[Capacity]) -> list[str]:
    """One Concurrent schedule catching up ``len(capacities)`` missed slots at once, each
    dispatch admitted and accepted with the next capacity; their execution ids, in order."""
    due_catch_up(bench, len(capacities))
    ids = []
    for capacity in capacities:
        dispatch = bench.take(DispatchRequest)
        admit(bench, dispatch.binding)
        binding = dispatch.binding
        eid = execution_id(binding["schedule_id"], binding["occurrence_id"], binding["attempt"])
        bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", eid, capacity=capacity)))
        ids.append(eid)
    return ids


def accepted_pair(bench: Bench) -> tuple[str, str]:
    """Two occurrences accepted by a two-slot worker: the first runs, the second waits in its
    queue behind a busy slot. Their execution ids; their first looks are pending (the running
    one's after 50 ms, the queued one's after OBSERVE_QUEUED_FIRST_POLL_S)."""
    ids = accept_catch_up(bench, [Capacity(2, 16, 1, 16), Capacity(2, 16, 0, 15)])
    assert timer_delays(bench) == [OBSERVE_FIRST_POLL_S, OBSERVE_QUEUED_FIRST_POLL_S]
    return ids[0], ids[1]


def timer_delays(bench: Bench) -> list[float]:
    return sorted(e.delay_s for e in bench.pending if isinstance(e, SetTimer))


def fire_timers(bench: Bench, delay_s: float | None = None) -> list[str]:
    """Fire the pending timers (those of ``delay_s`` only, when given); the execution ids of
    the observations they asked for."""
    for timer in [e for e in bench.pending if isinstance(e, SetTimer)]:
        if delay_s is None or timer.delay_s == delay_s:
            bench.pending.remove(timer)
            bench.feed(TimerFired(timer.token))
    return sorted(e.execution_id for e in bench.pending if isinstance(e, ObserveRequest))


def answer(bench: Bench, eid: str, result: ObserveResult) -> None:
    (observe,) = [
        e for e in bench.pending if isinstance(e, ObserveRequest) and e.execution_id == eid
    ]
    bench.pending.remove(observe)
    bench.feed(ObserveAnswered(observe.token, result))
    bench.settle()


DRAINED = Capacity(2, 16, 1, 16)  # a free slot: nothing waits in the worker's queue
STARTED = {"status": "running", "started_at": "2026-01-01T00:00Z"}
WAITING = {"status": "running", "started_at": None}


@pytest.mark.parametrize(
    ("capacity", "brought_forward"),
    [
        (DRAINED, True),
        (Capacity(2, 16, 0, 16), True),  # every slot busy, nothing queued: it took a slot
        (Capacity(2, 16, 0, 15), False),  # one still queued: it may be that one
        (None, False),  # an older worker: nothing said
    ],
)
def test_an_execution_waiting_in_the_queue_is_looked_at_soon_once_the_queue_moved_past_it(
    capacity: Capacity | None, brought_forward: bool
) -> None:
    bench = Bench()
    running, queued = accepted_pair(bench)
    assert fire_timers(bench, OBSERVE_FIRST_POLL_S) == [running]
    answer(bench, running, ObserveResult("completed", {"status": "completed"}, capacity=capacity))
    if not brought_forward:
        assert timer_delays(bench) == [OBSERVE_QUEUED_FIRST_POLL_S]
        return
    assert timer_delays(bench) == [OBSERVE_AFTER_QUEUE_S, OBSERVE_QUEUED_FIRST_POLL_S]
    assert fire_timers(bench, OBSERVE_AFTER_QUEUE_S) == [queued]
    answer(bench, queued, ObserveResult("completed", {"status": "completed"}, capacity=DRAINED))
    assert fire_timers(bench) == []  # the look it replaced is void: no second observation
    assert [e["state"] for e in bench.events("outcome")] == ["Succeeded", "Succeeded"]


def test_a_drained_queue_brings_a_look_forward_once_per_wait() -> None:
    bench = Bench()
    running, queued = accepted_pair(bench)
    fire_timers(bench, OBSERVE_FIRST_POLL_S)
    answer(bench, running, ObserveResult("running", STARTED, capacity=DRAINED))
    assert fire_timers(bench) == sorted([running, queued])  # one look each, 0.4 s one void
    answer(bench, queued, ObserveResult("running", STARTED, capacity=DRAINED))
    answer(bench, running, ObserveResult("running", STARTED, capacity=DRAINED))
    # neither waits now: the drained answer moves nothing; the queued one's backoff began anew
    assert timer_delays(bench) == [2 * OBSERVE_FIRST_POLL_S, 4 * OBSERVE_FIRST_POLL_S]
    fire_timers(bench)
    answer(bench, queued, ObserveResult("running", WAITING, capacity=Capacity(2, 16, 0, 15)))
    answer(bench, running, ObserveResult("running", STARTED, capacity=DRAINED))
    # seen waiting again, then drained: brought forward (its 0.2 s look is void), once
    assert timer_delays(bench) == [OBSERVE_AFTER_QUEUE_S, 0.2, 0.4]
    assert fire_timers(bench, OBSERVE_AFTER_QUEUE_S) == [queued]
    answer(bench, queued, ObserveResult("running", STARTED, capacity=DRAINED))
    assert timer_delays(bench) == [0.1, 0.2, 0.4]
    assert fire_timers(bench) == sorted([running, queued])  # one look each


def four_accepted_behind_one_slot(bench: Bench) -> list[str]:
    """Four occurrences accepted by a one-slot worker (its front is two): the first takes the
    slot, three queue behind it and the third of those is deferred. Their execution ids; their
    first looks are pending."""
    ids = accept_catch_up(bench, [Capacity(1, 16, 0, room) for room in (16, 15, 14, 13)])
    assert timer_delays(bench) == [OBSERVE_FIRST_POLL_S] + [OBSERVE_QUEUED_FIRST_POLL_S] * 3
    return ids


def test_an_execution_deep_in_the_queue_is_looked_at_when_it_reaches_the_front() -> None:
    bench = Bench()
    first, ahead, next_up, deep = four_accepted_behind_one_slot(bench)
    assert fire_timers(bench) == sorted([first, ahead, next_up])  # the deep one: no request
    window_s = bench.cfg.remote.timeout_seconds + 30
    assert timer_delays(bench) == [window_s / 2]  # its look once half its window is left
    answer(bench, next_up, ObserveResult("running", WAITING, capacity=Capacity(1, 16, 0, 13)))
    answer(bench, first, ObserveResult("completed", {"status": "completed"}))
    assert fire_timers(bench, OBSERVE_AFTER_QUEUE_S) == [ahead]  # nobody left the queue yet
    answer(bench, ahead, ObserveResult("running", STARTED, capacity=Capacity(1, 16, 0, 14)))
    # the one ahead started: the deep one reached the front and is looked at soon
    assert fire_timers(bench, OBSERVE_AFTER_QUEUE_S) == [deep]


def test_the_oldest_beyond_what_the_worker_still_queues_are_looked_at_soon() -> None:
    bench = Bench()
    first, ahead, next_up, deep = four_accepted_behind_one_slot(bench)
    assert fire_timers(bench, OBSERVE_FIRST_POLL_S) == [first]
    # one unit still queued at the worker: of the three seen waiting, the newest; the two older
    # ones have started (FIFO) and are looked at soon, the deferred newest one is not
    one_queued = Capacity(1, 16, 0, 15)
    answer(bench, first, ObserveResult("completed", {"status": "completed"}, capacity=one_queued))
    assert fire_timers(bench, OBSERVE_AFTER_QUEUE_S) == sorted([ahead, next_up])
    answer(bench, ahead, ObserveResult("completed", {"status": "completed"}, capacity=one_queued))
    answer(bench, next_up, ObserveResult("running", STARTED, capacity=one_queued))
    assert fire_timers(bench, OBSERVE_AFTER_QUEUE_S) == [deep]  # it reached the front


def test_a_deferred_look_still_comes_before_the_deadline() -> None:
    bench = Bench()
    due_catch_up(bench, 3)
    for room in (15, 14, 13):  # all three behind a busy slot: the third is deferred
        dispatch = bench.take(DispatchRequest)
        admit(bench, dispatch.binding)
        capacity = Capacity(1, 16, 0, room)
        bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", "x", capacity=capacity)))
    deep = bench.owner._attempts.work[3]
    fire_timers(bench)
    assert sorted(o.execution_id for o in bench.pending if isinstance(o, ObserveRequest)) == [
        execution_id(1, 1, 1),
        execution_id(1, 2, 1),
    ]
    window_s = bench.cfg.remote.timeout_seconds + 30
    bench.wall_s = deep.deadline_s - window_s / 2  # half its window left: looked at now
    fire_timers(bench)
    assert execution_id(1, 3, 1) in [
        o.execution_id for o in bench.pending if isinstance(o, ObserveRequest)
    ]


@pytest.mark.parametrize(
    "document",
    [{"status": "running"}, {"status": "running", "started_at": "2026-01-01T00:00Z"}, None],
)
def test_only_a_stated_null_start_moves_the_deadline(document: Any) -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    admit(bench, dispatch.binding)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", "s1-o1-a1")))
    bench.wall_s = bench.owner._attempts.work[1].deadline_s
    observe_once(bench, ObserveResult("running", document))
    assert occurrence(bench).state.value == "Unknown"


def test_not_dispatched_re_sends_the_same_binding_after_a_timer() -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("not_dispatched", code="pool_full")))
    assert not proposed_kinds(bench)  # nothing to commit: the attempt stays Running
    (resend,) = bench.events("dispatch_not_dispatched")
    timer = bench.take(SetTimer)
    assert timer.delay_s == resend["delay_s"] > 0
    bench.feed(TimerFired(timer.token))
    again = bench.take(DispatchRequest)
    assert (again.binding, again.code) == (dispatch.binding, dispatch.code)
    assert occurrence(bench).state.value == "Running" and occurrence(bench).attempt == 1


def test_a_fence_refused_because_an_admit_committed_first_logs_the_refusal_and_observes() -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("uncertain", detail="read timeout")))
    fence = bench.take(Propose)
    assert type(fence.command).__name__ == "FenceDispatch"
    # The worker's Admit reaches the log first (proposed while the fence was on its way).
    admit_first = Admit(binding_from_json(dispatch.binding), "inc-1", int(bench.wall_s))
    bench.index += 1
    assert isinstance(bench.machine.apply(bench.index, encode_command(admit_first)), Accepted)
    bench.commit(fence)
    bench.settle()
    (refused,) = bench.events("dispatch_fenced_refused")  # its own reason, no duplicate field
    assert "permit exists" in refused["reason"]
    assert occurrence(bench).state.value == "Running"
    bench.feed(TimerFired(bench.take(SetTimer).token))
    assert bench.take(ObserveRequest).execution_id.endswith("-a1")


def gated_fence_bench() -> Bench:
    bench = Bench()
    bench.owner = Owner(
        cfg=bench.cfg,
        state=bench.machine,
        strict=True,
        gate=lambda kind: "not yet: v2 (binary 0.0.9)" if kind == "FenceDispatch" else None,
    )
    return bench


def test_a_gated_fence_falls_back_to_unknown_naming_the_gate() -> None:
    bench = gated_fence_bench()
    dispatch = dispatched(bench)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("uncertain", detail="ambiguous send")))
    assert proposed_kinds(bench) == ["MarkUnknown"]  # the fence itself is never proposed
    bench.settle()
    record = occurrence(bench)
    assert record.state.value == "Unknown" and record.attempt == 1
    (unknown,) = bench.events("outcome")
    assert "not every voter applies FenceDispatch yet" in unknown["reason"]
    assert "ambiguous send" in unknown["reason"]
    assert "not yet: v2 (binary 0.0.9)" in unknown["reason"]
    # Still observed (a confirmed outcome would win), never dispatched or fenced again.
    for _ in range(3):
        bench.feed(TimerFired(bench.take(SetTimer).token))
        observe = bench.take(ObserveRequest)
        bench.feed(ObserveAnswered(observe.token, ObserveResult(None, detail="404")))
        bench.feed(Tick())
        assert not proposed_kinds(bench)
        assert not any(isinstance(e, DispatchRequest) for e in bench.pending)


def test_a_gated_fence_at_the_deadline_is_unknown_once_then_observed_slowly() -> None:
    bench = gated_fence_bench()
    dispatch = dispatched(bench)
    # A worker that answers "accepted" but never asked for a permit, then cannot be read.
    bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", "s1-o1-a1")))
    bench.wall_s = bench.owner._attempts.work[1].deadline_s
    bench.feed(TimerFired(bench.take(SetTimer).token))
    observe = bench.take(ObserveRequest)
    bench.feed(ObserveAnswered(observe.token, ObserveResult(None, detail="unreachable")))
    assert proposed_kinds(bench) == ["MarkUnknown"]
    bench.settle()
    assert occurrence(bench).state.value == "Unknown"
    (unknown,) = bench.events("outcome")
    assert "no permit committed and no answer" in unknown["reason"]
    assert "not every voter applies FenceDispatch yet" in unknown["reason"]
    slow = bench.take(SetTimer)
    assert slow.delay_s == bench.owner.unknown_poll_s  # no loop: the slow Unknown poll
    bench.feed(TimerFired(slow.token))
    observe = bench.take(ObserveRequest)
    bench.feed(ObserveAnswered(observe.token, ObserveResult(None, detail="unreachable")))
    assert not proposed_kinds(bench) and len(bench.events("outcome")) == 1


def test_a_failed_proposal_of_a_claim_is_adopted_once_it_is_seen_committed() -> None:
    bench = Bench()
    bench.acquire()
    bench.feed(OperatorRequest(1, OperatorCommand("create", {"definition": definition()})))
    bench.settle()
    bench.wall_s = T0 + 60
    bench.feed(Tick())
    folded = bench.take(Propose)
    bench.index += 1
    bench.machine.apply(bench.index, encode_command(folded.command))  # it did commit...
    bench.feed(ProposalDone(folded.token, FailedAnswer("timed out")))  # ...but no one said so
    assert not any(isinstance(e, DispatchRequest) for e in bench.pending)
    bench.feed(Tick())
    bench.settle()
    assert [e["occurrence"] for e in bench.events("claim_adopted")] == [1]
    assert sum(isinstance(e, DispatchRequest) for e in bench.pending) == 1


def test_a_gated_kind_is_a_definite_refusal_and_nothing_is_proposed() -> None:
    bench = Bench()
    bench.owner = Owner(
        cfg=bench.cfg,
        state=bench.machine,
        strict=True,
        gate=lambda kind: "waits for v2" if kind == "CreateNamedSchedule" else None,
    )
    bench.acquire()
    out = bench.feed(OperatorRequest(3, OperatorCommand("create", {"definition": definition()})))
    assert not any(isinstance(e, Propose) for e in out)
    (reply,) = [e for e in out if isinstance(e, Reply)]
    assert reply.value["status"] == 400 and "waits for v2" in reply.value["error"]["message"]


def test_while_a_decision_waits_for_its_commit_no_wake_is_asked_for() -> None:
    bench = Bench()
    bench.acquire()
    bench.feed(OperatorRequest(1, OperatorCommand("create", {"definition": definition()})))
    bench.settle()
    assert bench.owner.next_due_s() == T0 + 60
    bench.wall_s = T0 + 61
    bench.feed(Tick())
    folded = bench.take(Propose)  # the observation waits for its commit
    assert bench.owner.next_due_s() is None  # a driver waking for the past due slot would spin
    bench.commit(folded)
    bench.settle()
    assert bench.owner.next_due_s() == T0 + 120


def test_the_claims_of_one_pulse_are_proposed_together() -> None:
    bench = Bench()
    bench.cfg = replace(bench.cfg, limits=replace(bench.cfg.limits, running=2))
    bench.machine = Machine(None, bench.cfg.limits)
    bench.owner = Owner(cfg=bench.cfg, state=bench.machine, strict=True)
    due_catch_up(bench, 4)  # four created, two claimed in the observation (the running limit)
    # Paced dispatch: the first send probes the worker alone; its answer states no capacity
    # (an older worker), so the second one follows as before pacing.
    dispatches = [bench.take(DispatchRequest)]
    bench.feed(ExecAnswered(dispatches[0].token, ExecResult("accepted", "x")))
    dispatches.append(bench.take(DispatchRequest))
    bench.feed(ExecAnswered(dispatches[1].token, ExecResult("accepted", "x")))
    for timer in [bench.take(SetTimer) for _ in dispatches]:
        bench.feed(TimerFired(timer.token))
    for observe in [bench.take(ObserveRequest) for _ in dispatches]:
        bench.feed(ObserveAnswered(observe.token, ObserveResult("completed")))
    bench.settle()  # both outcomes committed, one after the other (the second one waited)
    out = bench.feed(Tick())
    claims = [e for e in out if isinstance(e, Propose)]
    assert [type(e.command).__name__ for e in claims] == ["ClaimOccurrence"] * 2


def test_a_command_on_one_schedule_updates_the_pulse_as_a_full_rebuild_would() -> None:
    from appliance.core.pulse import Pulse

    bench = Bench()
    bench.acquire()
    request = iter(range(100, 200))

    def command(action: str, **args: Any) -> None:
        token = next(request)
        bench.feed(OperatorRequest(token, OperatorCommand(action, args)))
        bench.settle()
        (reply,) = [e for e in bench.pending if isinstance(e, Reply) and e.request == token]
        assert reply.value["ok"] is True, reply.value
        owner = bench.owner
        assert owner._calendars.pulse is not None
        rebuilt = bench.machine.read(lambda st: Pulse.rebuild(st, owner._calendars.compiled))
        assert owner._calendars.pulse._next == rebuilt._next, action
        assert owner._calendars.pulse.next_due_s() == rebuilt.next_due_s(), action

    for i, cron in enumerate(["* * * * *", "*/5 * * * *", "0 3 * * *"]):
        command("create", definition=definition(f"job-{i}", cron))
    assert len(bench.owner._calendars.pulse or ()) == 3
    command("update", id=1, cron="30 2 * * *")  # the earliest moves later
    command("disable", id=2)
    command("enable", id=2)
    command("delete", id=3)
    command("update", id=2, timezone="Asia/Kathmandu")
    assert len(bench.owner._calendars.pulse or ()) == 2
