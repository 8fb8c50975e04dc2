"""ObserveAndClaim: an observation that claims what it created, under the claim rules exactly.

Each test is named after the rule it proves (appliance/core/observe_claim.py). The reference is
always the two-command path: ``Observe`` then ``ClaimOccurrence`` with ``binding_for``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from appliance.core.limits import Limits
from appliance.core.state import (
    AcquireOwnership,
    Admit,
    ClaimOccurrence,
    InvalidCommand,
    Observe,
    ObserveAndClaim,
    ObservedAndClaimed,
    ObservedSchedule,
    SchedulerState,
    admission_record,
    apply,
    command_from_json,
    command_to_json,
    current_epoch,
)
from appliance.core.state_parts import S
from tests.core.runner_helpers import AUTHORITY, NAMESPACE, WORKER, bind
from tests.core.test_state import MINUTE, T0, new_state, occ, rejected

CATCH_UP = {"CatchUp": {"cap": 3}}


def acquired(limits: Limits | None = None, **policy) -> SchedulerState:
    state = new_state(limits, **policy)
    apply(state, AcquireOwnership("voter-a", 1, T0 - 1))
    return state


def observation(state: SchedulerState, *slots_s: int, at_s: int | None = None) -> Observe:
    cursor = state.progress[1].cursor_s
    at_s = at_s if at_s is not None else max(slots_s) + 1
    return Observe(at_s, (ObservedSchedule(1, cursor, at_s, tuple(slots_s), 0),))


def folded(state: SchedulerState, observe: Observe, **changes) -> ObserveAndClaim:
    command = ObserveAndClaim(observe, current_epoch(state), NAMESPACE, WORKER, AUTHORITY)
    return replace(command, **changes)


def test_one_command_leaves_exactly_the_state_of_observe_then_claim():
    two, one = acquired(), acquired()
    observe = observation(two, T0)
    apply(two, observe)
    binding = bind(two, 1)
    apply(two, ClaimOccurrence(1, 1, current_epoch(two), binding, observe.at_s))

    value = apply(one, folded(one, observe)).value

    assert isinstance(value, ObservedAndClaimed)
    assert [r.id for r in value.claimed] == [1] and value.unclaimed == ()
    assert value.report.created == ((1, 1, T0),)
    assert one.to_json() == two.to_json()
    assert admission_record(one, 1).claim_for(1) == binding


def test_the_claim_made_in_the_observation_is_admitted_like_any_other():
    state = acquired()
    apply(state, folded(state, observation(state, T0)))
    granted = apply(state, Admit(bind(state, 1), "inc-1", T0 + 2)).value
    assert granted.granted_epoch == 1 and not granted.existing


def test_a_deposed_owner_observes_but_claims_nothing():
    state = acquired()
    stale = folded(state, observation(state, T0))
    apply(state, AcquireOwnership("voter-b", 2, T0))
    value = apply(state, stale).value
    assert value.claimed == ()
    assert [oid for oid, _ in value.unclaimed] == [1]
    assert value.unclaimed[0][1].startswith("stale_epoch")
    assert occ(state, 1).state is S.PENDING
    assert admission_record(state, 1) is None


def test_claims_stop_at_the_running_limit_and_the_rest_stay_pending():
    state = acquired(Limits(running=2), overlap="Concurrent", missed=CATCH_UP)
    value = apply(state, folded(state, observation(state, T0, T0 + MINUTE, T0 + 2 * MINUTE))).value
    assert [r.id for r in value.claimed] == [1, 2]
    assert [oid for oid, _ in value.unclaimed] == [3]
    assert "running" in value.unclaimed[0][1]
    assert [occ(state, i).state for i in (1, 2, 3)] == [S.RUNNING, S.RUNNING, S.PENDING]


def test_a_concurrent_schedule_gets_every_created_occurrence_claimed():
    state = acquired(overlap="Concurrent", missed=CATCH_UP)
    value = apply(state, folded(state, observation(state, T0, T0 + MINUTE))).value
    assert [r.id for r in value.claimed] == [1, 2]
    assert state.counts().running == 2


def test_skip_claims_the_new_occurrence_when_nothing_else_is_live():
    state = acquired(overlap="Skip")
    value = apply(state, folded(state, observation(state, T0))).value
    assert [r.id for r in value.claimed] == [1]


def test_queue_claims_its_only_live_occurrence_and_leaves_a_second_one_to_a_later_claim():
    state = acquired(overlap="Queue", missed=CATCH_UP)
    value = apply(state, folded(state, observation(state, T0))).value
    assert [r.id for r in value.claimed] == [1]

    other = acquired(overlap="Queue", missed=CATCH_UP)
    value = apply(other, folded(other, observation(other, T0, T0 + MINUTE))).value
    assert value.claimed == ()
    assert [oid for oid, _ in value.unclaimed] == [1, 2]
    assert all(why.startswith("overlap") for _, why in value.unclaimed)
    # The ordinary claim path still applies to the head afterwards.
    binding = bind(other, 1)
    apply(other, ClaimOccurrence(1, 1, current_epoch(other), binding, T0 + MINUTE + 2))
    assert occ(other, 1).state is S.RUNNING


def test_an_expired_grant_claims_nothing():
    state = acquired()
    expired = replace(AUTHORITY, expires_at="2020-01-01T00:00:00Z")
    value = apply(state, folded(state, observation(state, T0), authority=expired)).value
    assert value.claimed == ()
    assert value.unclaimed[0][1].startswith("grant_expired")
    assert occ(state, 1).state is S.PENDING


def test_a_malformed_owner_field_leaves_the_occurrence_pending():
    state = acquired()
    value = apply(state, folded(state, observation(state, T0), worker_id="")).value
    assert value.claimed == () and occ(state, 1).state is S.PENDING


def test_without_an_acquired_owner_the_observation_still_applies():
    state = new_state()
    command = ObserveAndClaim(observation(state, T0), 1, NAMESPACE, WORKER, AUTHORITY)
    value = apply(state, command).value
    assert value.report.created == ((1, 1, T0),) and value.claimed == ()


def test_a_refused_observation_refuses_the_whole_command():
    state = acquired()
    bad = Observe(T0 + 1, (ObservedSchedule(1, 0, T0 + 1, (T0 + 5, T0), 0),))  # unsorted slots
    rejected(state, folded(state, bad), InvalidCommand)


def test_the_command_survives_its_wire_form():
    state = acquired()
    command = folded(state, observation(state, T0, T0 + MINUTE))
    assert command_from_json(command_to_json(command)) == command


def test_a_wire_form_with_another_command_inside_is_refused():
    state = acquired()
    document = command_to_json(folded(state, observation(state, T0)))
    document["observe"] = {"command": "RetryDue", "at_s": T0}
    with pytest.raises(InvalidCommand):
        command_from_json(document)
