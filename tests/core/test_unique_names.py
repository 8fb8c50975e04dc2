"""Names unique among live schedules, checked at apply (appliance/core/unique_names.py)."""

from __future__ import annotations

import dataclasses
import json

from appliance.capabilities import BASELINE_COMMAND_KINDS, command_kinds
from appliance.core.limits import Limits
from appliance.core.state import (
    CreateNamedSchedule,
    CreateSchedule,
    DeleteSchedule,
    NameTaken,
    SchedulerState,
    UpdateNamedSchedule,
    UpdateSchedule,
    apply,
    command_from_json,
    command_to_json,
    name_holder,
    with_unique_name,
)
from tests.core.command_helpers import T0, definition
from tests.core.test_state import rejected
from tests.runner.harness import Voter
from tests.runner.harness import definition as body


def named(name: str | None, **kwargs: object) -> object:
    return dataclasses.replace(definition(**kwargs), name=name)


def test_a_named_create_of_a_name_a_live_schedule_has_is_refused_naming_it() -> None:
    state = SchedulerState(Limits())
    first = apply(state, CreateNamedSchedule(named("nightly"), T0)).value
    refusal = rejected(
        state, CreateNamedSchedule(named("nightly", cron="5 * * * *"), T0), NameTaken
    )
    assert refusal.existing_id == first
    assert f"already the name of schedule {first}" in str(refusal)
    assert name_holder(state, "nightly") == first


def test_unnamed_schedules_are_never_refused_and_a_deleted_name_is_free_again() -> None:
    state = SchedulerState(Limits())
    for _ in range(3):
        apply(state, CreateSchedule(named(None), T0))  # unnamed: as before
    first = apply(state, CreateNamedSchedule(named("x"), T0)).value
    apply(state, DeleteSchedule(first, T0))
    again = apply(state, CreateNamedSchedule(named("x"), T0)).value
    assert again != first and name_holder(state, "x") == again


def test_a_rename_to_another_live_schedules_name_is_refused_and_keeping_ones_own_is_not() -> None:
    state = SchedulerState(Limits())
    a = apply(state, CreateNamedSchedule(named("a"), T0)).value
    b = apply(state, CreateNamedSchedule(named("b"), T0)).value
    refusal = rejected(state, UpdateNamedSchedule(b, named("a"), ("name",), T0), NameTaken)
    assert refusal.existing_id == a
    changed = apply(state, UpdateNamedSchedule(b, named("b", cron="7 * * * *"), ("cron",), T0))
    assert changed.value == ("cron",)


def test_the_owner_uses_the_checking_forms_only_where_a_name_is_set() -> None:
    assert isinstance(with_unique_name(CreateSchedule(named("n"), T0)), CreateNamedSchedule)
    assert isinstance(with_unique_name(CreateSchedule(named(None), T0)), CreateSchedule)
    rename = UpdateSchedule(1, named("n"), ("name",), T0)
    assert isinstance(with_unique_name(rename), UpdateNamedSchedule)
    other = UpdateSchedule(1, named("n"), ("cron",), T0)
    assert with_unique_name(other) is other


def test_the_checking_forms_are_gated_kinds_and_round_trip_on_the_wire() -> None:
    kinds = {"CreateNamedSchedule", "UpdateNamedSchedule"}
    assert kinds <= command_kinds() and not kinds & BASELINE_COMMAND_KINDS
    for command in (
        CreateNamedSchedule(named("n"), T0),
        UpdateNamedSchedule(2, named("n"), ("code", "name"), T0),
    ):
        wire = json.loads(json.dumps(command_to_json(command)))
        assert command_from_json(wire) == command


def test_a_duplicate_named_create_through_the_loop_is_a_definite_refusal_with_the_existing_id():
    with Voter() as v:
        created = v.command(json.dumps({"action": "create", "definition": body("dup")}))
        again = v.command(json.dumps({"action": "create", "definition": body("dup")}))
        assert again["ok"] is False and again["status"] == 400 and "outcome" not in again
        assert again["error"]["existing_id"] == created["id"]
        unnamed = {k: v for k, v in body("x").items() if k != "name"}
        for _ in range(2):
            assert v.command(json.dumps({"action": "create", "definition": unnamed}))["ok"]
        assert v.machine.read(lambda st: len(st.schedules)) == 3
