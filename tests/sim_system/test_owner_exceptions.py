"""A bug in the owner is a bug (issue 31): under the whole-system simulator an exception raised
inside an owner fails the seed, names the rule and where it was raised; ``--lenient`` keeps
production's behaviour (logged as ``loop_error``, counted, the run goes on)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.owner import ownership
from appliance.sim.system import __main__ as sim_cli
from appliance.sim.system.checkers import RULE_OWNER_RAISED
from appliance.sim.system.world import SystemOptions, run_system_seed


class InjectedBug(RuntimeError):
    """The deliberate bug these tests put into the owner."""


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise InjectedBug("injected")


def test_the_simulator_runs_its_owners_strict_by_default() -> None:
    assert SystemOptions().strict


def test_an_exception_inside_a_serial_decision_fails_the_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every acquisition reads the committed takeover inside a serial decision (a continuation
    # resumed with the commit's outcome): the exception leaves the suspended decision.
    monkeypatch.setattr(ownership, "acquired_of", _raise)
    result = run_system_seed(1)
    assert not result.ok
    assert result.rule == RULE_OWNER_RAISED
    assert "InjectedBug('injected')" in result.violation
    assert "in _raise" in result.violation  # where it was raised


def test_an_exception_handling_an_event_directly_fails_the_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An admission request is handled at once, outside any serial decision.
    monkeypatch.setattr(ownership, "admit_command", _raise)
    result = run_system_seed(1)
    assert not result.ok
    assert result.rule == RULE_OWNER_RAISED
    assert "AdmissionRequest" in result.violation


def test_without_the_bug_the_same_seed_passes() -> None:
    result = run_system_seed(1)
    assert result.ok, result.violation
    assert "loop_error" not in result.reached


def test_a_lenient_run_logs_and_counts_the_exception_as_production_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ownership, "admit_command", _raise)
    result = run_system_seed(1, SystemOptions(strict=False))
    assert result.rule != RULE_OWNER_RAISED
    assert result.reached["loop_error"] > 0


def test_the_command_line_is_strict_and_prints_the_failing_seed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ownership, "acquired_of", _raise)
    assert sim_cli.main(["--seeds", "1", "--start", "5"]) == 1
    out = capsys.readouterr().out
    assert "FAIL seed 5: at " in out and RULE_OWNER_RAISED in out
    assert "--start 5" in out and "--lenient" not in out
