"""The owner's side of worker retention (issue 19 item 5): every exec and observation carries
the committed state's floor W, and a worker's ``retired`` answer is never acted on."""

from __future__ import annotations

from dataclasses import replace

from appliance.core.limits import Limits
from appliance.owner.events import (
    DispatchRequest,
    ExecAnswered,
    ObserveAnswered,
    ObserveRequest,
    Propose,
    SetTimer,
    Tick,
    TimerFired,
)
from appliance.owner.owner import Owner
from appliance.owner.worker_answers import ExecResult, ObserveResult
from appliance.runner.machine import Machine
from tests.runner.harness import T0
from tests.runner.test_owner import Bench, admit, dispatched, occurrence


class SmallBench(Bench):
    """One record retained: each new occurrence retires the previous terminal one."""

    def __init__(self) -> None:
        super().__init__()
        self.cfg = replace(self.cfg, limits=Limits(records=1, outstanding=1, running=1))
        self.machine = Machine(None, self.cfg.limits)
        self.owner = Owner(cfg=self.cfg, state=self.machine, strict=True)


def observe_once(bench: Bench, result: ObserveResult) -> ObserveRequest:
    timer = bench.take(SetTimer)
    bench.feed(TimerFired(timer.token))
    request = bench.take(ObserveRequest)
    bench.feed(ObserveAnswered(request.token, result))
    bench.feed(Tick())
    bench.settle()
    return request


def test_exec_and_observation_carry_the_committed_w_as_it_rises() -> None:
    bench = SmallBench()
    dispatch = dispatched(bench)
    assert dispatch.retained_through == 0
    admit(bench, dispatch.binding)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", "s1-o1-a1")))
    first = observe_once(bench, ObserveResult("completed", {"status": "completed"}))
    assert first.retained_through == 0
    assert occurrence(bench).state.value == "Succeeded"
    bench.wall_s = T0 + 120
    bench.feed(Tick())
    bench.settle()  # the next slot's record retires occurrence 1: W = 1
    assert bench.machine.read(lambda st: st.retained_through()) == 1
    second = bench.take(DispatchRequest)
    assert second.binding["occurrence_id"] == 2 and second.retained_through == 1


def test_a_retired_answer_is_logged_and_never_acted_on() -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    committed = len(bench.committed)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("retired", code="retired")))
    bench.settle()
    (event,) = bench.events("dispatch_retired")
    assert event["occurrence"] == 1 and event["attempt"] == 1
    assert not any(isinstance(e, Propose | DispatchRequest) for e in bench.pending)
    observe_once(bench, ObserveResult("retired", detail="at or below the floor W"))
    assert len(bench.committed) == committed  # no fence, no outcome, no claim
    assert not any(isinstance(e, DispatchRequest) for e in bench.pending)
    assert occurrence(bench).state.value == "Running"
