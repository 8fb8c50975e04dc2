"""The one-shot submit capability (SPEC §7, seeds/000): no copy, no pickle, no second use, and
the worker's durable consume record is re-checked immediately before submission."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable

import pytest

from appliance.engine import (
    CapabilityError,
    Engine,
    ExecutionStatus,
    SubmitRefused,
    UnknownExecution,
)

from .conftest import request


@pytest.fixture
def idle_engine(make_engine: Callable[..., Engine]) -> Engine:
    """An engine that starts no children unless work is submitted."""
    return make_engine(warm_children=0, max_concurrent=1, max_queued=1)


def test_capability_refuses_copy(idle_engine: Engine) -> None:
    capability = idle_engine.reserve().capability(request("1"), lambda: True)
    with pytest.raises(CapabilityError):
        copy.copy(capability)


def test_capability_refuses_deepcopy(idle_engine: Engine) -> None:
    capability = idle_engine.reserve().capability(request("1"), lambda: True)
    with pytest.raises(CapabilityError):
        copy.deepcopy(capability)
    with pytest.raises(CapabilityError):
        copy.deepcopy({"nested": [capability]})


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_capability_refuses_pickling(idle_engine: Engine, protocol: int) -> None:
    capability = idle_engine.reserve().capability(request("1"), lambda: True)
    with pytest.raises(CapabilityError):
        pickle.dumps(capability, protocol=protocol)


def test_reservation_refuses_copy_and_pickling(idle_engine: Engine) -> None:
    reservation = idle_engine.reserve()
    with pytest.raises(CapabilityError):
        copy.copy(reservation)
    with pytest.raises(CapabilityError):
        copy.deepcopy(reservation)
    with pytest.raises(CapabilityError):
        pickle.dumps(reservation)
    reservation.release()


def test_capability_refuses_a_second_use(idle_engine: Engine) -> None:
    capability = idle_engine.reserve().capability(request("'once'"), lambda: True)
    first = capability.submit()
    with pytest.raises(CapabilityError):
        capability.submit()
    report = idle_engine.wait(first.execution_id, 20)
    assert report.result == "once"
    assert idle_engine.stats().submitted_total == 1


def test_recheck_runs_once_before_the_engine_knows_the_execution(idle_engine: Engine) -> None:
    the_request = request("'checked'")
    seen: list[str] = []

    def recheck() -> bool:
        with pytest.raises(UnknownExecution):  # not submitted yet while re-checking
            idle_engine.status(the_request.execution_id)
        seen.append("recheck")
        return True

    capability = idle_engine.reserve().capability(the_request, recheck)
    assert seen == []  # binding does not re-check; only use does
    capability.submit()
    assert seen == ["recheck"]
    assert idle_engine.wait(the_request.execution_id, 20).status is ExecutionStatus.COMPLETED


def test_recheck_refusal_submits_nothing_and_frees_the_capacity(idle_engine: Engine) -> None:
    the_request = request("'must not run'")
    capability = idle_engine.reserve().capability(the_request, lambda: False)
    with pytest.raises(SubmitRefused):
        capability.submit()
    with pytest.raises(UnknownExecution):
        idle_engine.status(the_request.execution_id)
    assert idle_engine.stats().reserved == 0
    assert idle_engine.stats().submitted_total == 0
    with pytest.raises(CapabilityError):  # a refused capability is still spent
        capability.submit()


def test_recheck_that_raises_refuses_submission(idle_engine: Engine) -> None:
    def broken_store() -> bool:
        raise OSError("disk gone")

    capability = idle_engine.reserve().capability(request("1"), broken_store)
    with pytest.raises(SubmitRefused, match="disk gone"):
        capability.submit()
    assert idle_engine.stats().reserved == 0


def test_recheck_must_confirm_with_true_not_merely_truthy(idle_engine: Engine) -> None:
    capability = idle_engine.reserve().capability(request("1"), lambda: "yes")  # type: ignore[arg-type,return-value]
    with pytest.raises(SubmitRefused):
        capability.submit()


def test_a_reservation_binds_only_one_capability(idle_engine: Engine) -> None:
    reservation = idle_engine.reserve()
    reservation.capability(request("1"), lambda: True)
    with pytest.raises(CapabilityError):
        reservation.capability(request("2"), lambda: True)
    reservation.release()


def test_released_reservation_cannot_bind_a_capability(idle_engine: Engine) -> None:
    reservation = idle_engine.reserve()
    reservation.release()
    with pytest.raises(CapabilityError):
        reservation.capability(request("1"), lambda: True)


def test_release_after_submission_does_not_free_running_capacity(idle_engine: Engine) -> None:
    reservation = idle_engine.reserve()
    submitted = reservation.capability(request("'x'"), lambda: True).submit()
    reservation.release()  # no effect: the execution owns the capacity now
    assert idle_engine.stats().reserved == 1
    idle_engine.wait(submitted.execution_id, 20)
    assert idle_engine.stats().reserved == 0


def test_reservation_released_after_binding_makes_the_capability_useless(
    idle_engine: Engine,
) -> None:
    reservation = idle_engine.reserve()
    capability = reservation.capability(request("'x'"), lambda: True)
    reservation.release()
    with pytest.raises(CapabilityError):
        capability.submit()
    assert idle_engine.stats().reserved == 0  # returned exactly once
    assert idle_engine.stats().submitted_total == 0
