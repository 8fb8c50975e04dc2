"""``FenceDispatch``: the owner fences its own unadmitted claim (issue 23).

The fence is a proof of "never launched": it commits only where no permit exists, and once
committed it refuses every later admission of that invocation. Which of ``Admit`` and
``FenceDispatch`` wins is decided by the order of the log, never by the owner's guess.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from appliance.core.limits import Limits
from appliance.core.state import (
    AcquireOwnership,
    Admit,
    AttemptMismatch,
    AttemptNotRunning,
    Cancel,
    DeleteSchedule,
    Fenced,
    FenceDispatch,
    InvalidCommand,
    MarkUnknown,
    PermitExists,
    RetryDue,
    StaleEpoch,
    admission_record,
    apply,
    command_from_json,
    command_to_json,
    current_epoch,
)
from tests.core.runner_helpers import admit, claim, owned_state
from tests.core.test_state import T0, occ, rejected


def fence(state, binding, at_s=T0 + 5, *, epoch=None, not_before_s=None, reason="uncertain"):
    epoch = current_epoch(state) if epoch is None else epoch
    return FenceDispatch(binding.invocation, epoch, reason, not_before_s, at_s)


def test_a_fence_of_an_unadmitted_claim_makes_the_next_attempt_pending_without_a_retry():
    state = owned_state()
    binding = claim(state)
    retries = occ(state).retries_used
    result = apply(state, fence(state, binding)).value
    assert (result.state.value, result.attempt) == ("Pending", 2)
    assert occ(state).retries_used == retries  # a fenced attempt spends no retry
    assert occ(state).timeline[-1].reason == "fenced_not_launched"
    recorded = admission_record(state, 1).fence
    assert (recorded.attempt, recorded.epoch, recorded.cause) == (1, 1, "dispatch")


def test_after_the_fence_the_late_admission_of_that_attempt_is_refused_as_fenced():
    state = owned_state()
    binding = claim(state)
    apply(state, fence(state, binding))
    error = rejected(state, Admit(binding, "inc-1", T0 + 6), Fenced)
    assert error.code == "fenced"
    # The next attempt's claim keeps the fence, and the late exec of attempt 1 stays refused.
    again = claim(state, at_s=T0 + 7)
    assert again.attempt == 2
    rejected(state, Admit(binding, "inc-1", T0 + 8), Fenced)
    assert not admit(state, again, at_s=T0 + 8).existing


def test_an_admit_committed_first_refuses_the_fence_and_nothing_changes():
    state = owned_state()
    binding = claim(state)
    admit(state, binding)
    error = rejected(state, fence(state, binding), PermitExists)
    assert error.code == "permit_exists"
    assert occ(state).state.value == "Running"


def test_a_fence_of_an_unknown_attempt_without_a_permit_is_allowed():
    state = owned_state()
    binding = claim(state)
    apply(state, MarkUnknown(binding.invocation, "legacy", T0 + 2))
    assert apply(state, fence(state, binding)).value.state.value == "Pending"


def test_a_fence_with_a_backoff_waits_for_retry_due():
    state = owned_state()
    binding = claim(state)
    apply(state, fence(state, binding, not_before_s=T0 + 9))
    assert occ(state).not_before_s == T0 + 9
    assert state.next_retry_due_s() == T0 + 9
    assert apply(state, RetryDue(T0 + 8)).value == ()
    assert apply(state, RetryDue(T0 + 9)).value == (1,)
    assert occ(state).not_before_s is None


def test_a_backoff_before_the_fence_instant_is_refused():
    state = owned_state()
    binding = claim(state)
    rejected(state, fence(state, binding, at_s=T0 + 5, not_before_s=T0 + 4), InvalidCommand)
    # At the boundary: not before the fence instant itself is accepted.
    assert apply(state, fence(state, binding, at_s=T0 + 5, not_before_s=T0 + 5)).value.attempt == 2


def test_a_fence_by_an_older_epoch_is_refused():
    state = owned_state()
    binding = claim(state)
    rejected(state, fence(state, binding, epoch=2), StaleEpoch)
    apply(state, AcquireOwnership("voter-b", 2, T0 + 3))  # the takeover fenced it already
    assert occ(state).attempt == 2
    rejected(state, fence(state, binding, epoch=1), AttemptMismatch)


def test_a_fence_of_a_claim_from_an_earlier_epoch_is_refused():
    # Only the owner's own claim: an older claim with a permit is the takeover's to keep.
    state = owned_state(Limits(running=2), overlap="Concurrent")
    binding = claim(state)
    admit(state, binding)
    apply(state, AcquireOwnership("voter-b", 2, T0 + 3))
    rejected(state, fence(state, binding, epoch=2), StaleEpoch)


@pytest.mark.parametrize(("attempt", "error"), [(0, InvalidCommand), (2, AttemptMismatch)])
def test_a_fence_of_another_attempt_is_refused(attempt, error):
    state = owned_state()
    binding = claim(state)
    other = replace(binding.invocation, attempt=attempt)
    rejected(state, FenceDispatch(other, 1, "x", None, T0 + 5), error)


def test_a_fence_of_a_cancelling_attempt_is_refused():
    state = owned_state()
    binding = claim(state)
    apply(state, Cancel(1, T0 + 2))
    rejected(state, fence(state, binding), AttemptNotRunning)


def test_a_fence_of_a_deleted_schedule_ends_the_occurrence_cancelled():
    state = owned_state()
    binding = claim(state)
    apply(state, DeleteSchedule(1, T0 + 2))
    assert apply(state, fence(state, binding, not_before_s=T0 + 30)).value.state.value == (
        "Cancelled"
    )


def test_the_fence_command_round_trips_through_its_wire_form():
    state = owned_state()
    binding = claim(state)
    command = fence(state, binding, not_before_s=T0 + 9, reason="dispatch uncertain: reset")
    assert command_from_json(command_to_json(command)) == command
