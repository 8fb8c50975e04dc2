"""ObserveAndPlace (issue 33): an observation that claims what it created on the worker placed
for each schedule, under the claim rules exactly (appliance/core/observe_place.py)."""

from __future__ import annotations

from appliance.core.definition import parse_definition
from appliance.core.limits import Limits
from appliance.core.state import (
    AcquireOwnership,
    AddWorker,
    CreateSchedule,
    DrainWorker,
    Observe,
    ObserveAndPlace,
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
from tests.core.runner_helpers import AUTHORITY, NAMESPACE
from tests.core.test_fleet_amendments import GENESIS, worker
from tests.core.test_state import T0, occ, rejected


def two_schedules() -> SchedulerState:
    state = SchedulerState(Limits())
    for name in ("a", "b", "c"):
        definition = parse_definition(
            {"name": name, "code": "1", "cron": "* * * * *", "timezone": "UTC"}, Limits()
        )
        apply(state, CreateSchedule(definition, T0 - 1))
    apply(state, AcquireOwnership("voter-a", 1, T0 - 1))
    w2 = worker("worker-2")
    apply(state, AddWorker(0, T0 - 1, w2, (GENESIS, w2)))
    return state


def observation(state: SchedulerState) -> Observe:
    at_s = T0 + 1
    return Observe(
        at_s,
        tuple(
            ObservedSchedule(sid, state.progress[sid].cursor_s, at_s, (T0,), 0) for sid in (1, 2, 3)
        ),
    )


def placed(state: SchedulerState, *pairs: tuple[int, str]) -> ObserveAndPlace:
    return ObserveAndPlace(
        observation(state), current_epoch(state), NAMESPACE, tuple(pairs), AUTHORITY
    )


def test_each_created_occurrence_is_claimed_on_its_schedules_worker_or_left_pending():
    state = two_schedules()
    value = apply(state, placed(state, (1, "worker-1"), (2, "worker-2"))).value
    assert isinstance(value, ObservedAndClaimed)
    assert [r.id for r in value.claimed] == [1, 2]
    assert value.unclaimed == ((3, "placement: no worker placed for its schedule"),)
    assert admission_record(state, 1).claim.worker_id == "worker-1"
    assert admission_record(state, 2).claim.worker_id == "worker-2"
    assert occ(state, 3).state is S.PENDING


def test_a_draining_worker_refuses_the_whole_command_and_changes_nothing():
    state = two_schedules()
    apply(state, DrainWorker(1, T0, "worker-2"))
    rejected(state, placed(state, (1, "worker-1"), (2, "worker-2")))


def test_observe_and_place_travels_as_json():
    state = two_schedules()
    command = placed(state, (1, "worker-1"), (3, "worker-2"))
    assert command_from_json(command_to_json(command)) == command
