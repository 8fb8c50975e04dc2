"""The attempt machine (issue 31): one phase per tracked attempt, moved only through one table.

The table itself (appliance/owner/attempt_phase.py), then the owner walking attempts through it:
each path of the owner core's decisions ends in the phase the table says, and a move nobody
designed raises ``IllegalPhase`` (out of a strict owner's ``handle``)."""

from __future__ import annotations

import pytest

from appliance.commands.operator import OperatorCommand
from appliance.owner.attempt_phase import (
    TRANSITIONS,
    AttemptPhase,
    IllegalPhase,
    PhaseEvent,
    next_phase,
)
from appliance.owner.events import (
    CancelAnswered,
    CancelRequest,
    DispatchRequest,
    ExecAnswered,
    LeadershipChanged,
    ObserveAnswered,
    ObserveRequest,
    OperatorRequest,
    SetTimer,
    TimerFired,
)
from appliance.owner.worker_answers import CancelResult, ExecResult, ObserveResult
from tests.runner.test_owner import Bench, admit, dispatched

P = AttemptPhase
E = PhaseEvent


def test_every_phase_is_reachable_and_every_phase_but_none_is_a_dead_end() -> None:
    targets = set(TRANSITIONS.values())
    starts = {P.WAITING, P.SENDING, P.ADOPTED}  # where Work is created (attempts.py)
    assert targets | starts == set(P)
    sources = {phase for phase, _ in TRANSITIONS}
    assert sources == set(P)  # every phase has a way on


def test_a_move_the_table_does_not_hold_raises_naming_the_phase_and_the_event() -> None:
    assert next_phase(P.SENDING, E.EXEC_ANSWERED) is P.DECIDING
    with pytest.raises(IllegalPhase, match="occurrence 3 attempt 1: look is not allowed in phase"):
        next_phase(P.SENDING, E.LOOK, "occurrence 3 attempt 1")
    legal = set(TRANSITIONS)
    for phase in P:
        for event in E:
            if (phase, event) not in legal:
                with pytest.raises(IllegalPhase, match=f"{event.value} .* {phase.value}$"):
                    next_phase(phase, event)


def test_busy_and_observed_are_read_off_the_phase() -> None:
    busy = {p for p in P if p.busy}
    observed = {p for p in P if p.observed}
    assert busy == {P.SENDING, P.BACKING_OFF, P.LOOKING, P.CANCELLING, P.CANCELLING_OBSERVED}
    assert observed == {P.OBSERVING, P.LOOKING, P.CANCELLING_OBSERVED}


def phase(bench: Bench, occurrence_id: int = 1) -> AttemptPhase:
    return bench.owner._attempts.work[occurrence_id].phase


def test_an_accepted_dispatch_is_sending_then_observed_and_looked_at() -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    assert phase(bench) is P.SENDING
    assert bench.owner.execs_outstanding() == 1 and bench.owner.open_occurrences() == [1]
    bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", "x")))
    assert phase(bench) is P.OBSERVING and bench.owner.execs_outstanding() == 0
    bench.feed(TimerFired(bench.take(SetTimer).token))
    assert phase(bench) is P.LOOKING
    bench.feed(ObserveAnswered(bench.take(ObserveRequest).token, ObserveResult("running")))
    assert phase(bench) is P.OBSERVING


def test_not_dispatched_backs_off_then_sends_the_same_binding_again() -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("not_dispatched", code="pool_full")))
    assert phase(bench) is P.BACKING_OFF
    assert bench.owner.open_occurrences() == [1]  # busy: the drain waits for it
    bench.feed(TimerFired(bench.take(SetTimer).token))
    assert phase(bench) is P.SENDING
    assert bench.take(DispatchRequest).binding == dispatch.binding
    assert bench.owner._attempts.work[1].sends == 2


def test_a_cancel_of_an_observed_attempt_keeps_it_observed_between_requests() -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    admit(bench, dispatch.binding)
    bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", "x")))
    bench.feed(OperatorRequest(5, OperatorCommand("cancel", {"occurrence_id": 1})))
    bench.settle()
    assert phase(bench) is P.CANCELLING_OBSERVED
    cancel = bench.take(CancelRequest)
    bench.feed(CancelAnswered(cancel.token, CancelResult("stopping")))  # not confirmed: again
    assert phase(bench) is P.OBSERVING
    bench.feed(CancelAnswered(cancel.token, CancelResult("stopped")))  # answered once only
    assert phase(bench) is P.OBSERVING


def test_a_cancel_while_the_dispatch_is_in_flight_waits_for_its_answer() -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    bench.feed(OperatorRequest(5, OperatorCommand("cancel", {"occurrence_id": 1})))
    bench.settle()
    assert phase(bench) is P.SENDING  # busy: the cancel is asked again after a pause
    assert not [e for e in bench.pending if isinstance(e, CancelRequest)]
    bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", "x")))
    assert phase(bench) is P.OBSERVING  # Cancelling is observed until the cancel goes out
    retries = [e for e in bench.pending if isinstance(e, SetTimer) and e.delay_s == 0.5]
    bench.pending.remove(retries[0])
    bench.feed(TimerFired(retries[0].token))
    assert phase(bench) is P.CANCELLING_OBSERVED
    assert bench.take(CancelRequest).binding == dispatch.binding


def test_a_stale_cancel_retry_of_a_forgotten_attempt_sends_nothing() -> None:
    # The one place the explicit machine changed behaviour: a cancel retry timer that outlives
    # its attempt (here: ownership moved while the dispatch was in flight) used to send a stray
    # cancel for an attempt this owner no longer tracks; now it does nothing. The next owner
    # resumes the cancellation from the committed Cancelling (resume_cancelling).
    bench = Bench()
    dispatch = dispatched(bench)
    bench.feed(OperatorRequest(5, OperatorCommand("cancel", {"occurrence_id": 1})))
    bench.settle()
    (retry,) = [e for e in bench.pending if isinstance(e, SetTimer) and e.delay_s == 0.5]
    work = bench.owner._attempts.work[1]
    bench.feed(LeadershipChanged(False, 2, "v2"))
    assert bench.owner.epoch is None and 1 not in bench.owner._attempts.work
    bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", "x")))
    assert work.phase is P.DECIDING  # answered; not this owner's to decide any more
    out = bench.feed(TimerFired(retry.token))
    assert not [e for e in out if isinstance(e, CancelRequest | SetTimer)]
    assert work.phase is P.DECIDING


def test_a_move_nobody_designed_fails_a_strict_owner() -> None:
    bench = Bench()
    dispatch = dispatched(bench)
    work = bench.owner._attempts.work[1]
    work.phase = P.CANCEL_PAUSED  # as if a path forgot the dispatch it sent
    with pytest.raises(IllegalPhase, match="exec_answered is not allowed in phase cancel_paused"):
        bench.feed(ExecAnswered(dispatch.token, ExecResult("accepted", "x")))
