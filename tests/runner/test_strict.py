"""A bug is a bug (issue 31): the owner and its loop take ``strict``. Strict (the simulator, the
tests) raises an exception from inside a decision; production logs ``loop_error``, answers the
waiting caller with a failure and goes on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from appliance.commands.operator import OperatorCommand
from appliance.owner import contract_state
from appliance.owner.events import BarrierDone, LogRecord, OperatorRequest, ReadBarrier, ReplyFailed
from appliance.owner.owner import Owner
from tests.runner.harness import Voter, wait_until
from tests.runner.test_owner import Bench


class InjectedBug(RuntimeError):
    """The deliberate bug these tests put into the owner."""


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise InjectedBug("injected")


def _status_request(bench: Bench) -> list[Any]:
    """``status`` up to its barrier's answer, which resumes the decision that raises."""
    bench.feed(OperatorRequest(9, OperatorCommand("status", {})))
    barrier = bench.take(ReadBarrier)
    return bench.feed(BarrierDone(barrier.token, None, {"term": 1}))


@pytest.fixture
def broken_status(monkeypatch: pytest.MonkeyPatch) -> None:
    # ``status`` renders the contract in force inside its serial decision (after its barrier).
    monkeypatch.setattr(contract_state, "contract_summary", _raise)


def _bench(strict: bool) -> Bench:
    bench = Bench()
    bench.owner = Owner(cfg=bench.cfg, state=bench.machine, strict=strict)
    bench.acquire()
    return bench


def test_a_strict_owner_raises_an_exception_out_of_a_serial_decision(broken_status: None) -> None:
    bench = _bench(strict=True)
    with pytest.raises(InjectedBug):
        _status_request(bench)


def test_a_strict_owner_raises_an_exception_out_of_an_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = _bench(strict=True)
    monkeypatch.setattr(bench.owner, "_dispatch", _raise)
    with pytest.raises(InjectedBug):
        bench.feed(OperatorRequest(9, OperatorCommand("status", {})))


def test_a_lenient_owner_logs_loop_error_and_fails_only_the_caller(broken_status: None) -> None:
    bench = _bench(strict=False)
    out = _status_request(bench)
    errors = [e for e in out if isinstance(e, LogRecord) and e.event == "loop_error"]
    assert len(errors) == 1 and "InjectedBug" in errors[0].fields["error"]
    assert [e.request for e in out if isinstance(e, ReplyFailed)] == [9]
    # The owner goes on: the next decision is made as before.
    bench.feed(OperatorRequest(10, OperatorCommand("pause", {})))
    bench.settle()
    assert bench.events("operator")[-1]["action"] == "pause"


# The loop's thread ends with the exception: that is the point, not a leak to warn about.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_strict_loop_stops_and_keeps_the_exception(broken_status: None) -> None:
    voter = Voter()  # strict, as every loop test
    voter.__enter__()
    try:
        reply = voter.command(json.dumps({"action": "status"}))
        assert reply["ok"] is False
        wait_until(lambda: voter.runner.failure is not None, "the loop's failure kept")
        assert isinstance(voter.runner.failure, InjectedBug)
        assert voter.events("loop_error")  # still logged, as production does
        with pytest.raises(AssertionError, match="the runner loop raised"):
            voter.assert_no_loop_failure()
    finally:
        voter.runner.drain_and_stop(0.0)
        voter.replication.stop()
    assert not voter.runner._thread.is_alive()


def test_a_lenient_loop_logs_loop_error_and_goes_on(broken_status: None) -> None:
    with Voter(strict=False) as voter:
        reply = voter.command(json.dumps({"action": "status"}))
        assert reply["ok"] is False and reply["error"]["code"] == "unavailable"
        assert voter.events("loop_error")
        paused = voter.command(json.dumps({"action": "pause"}))
        assert paused["ok"] is True, paused
        assert voter.runner.failure is None
