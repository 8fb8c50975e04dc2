"""enable (no backlog unless catch_up) and update (live occurrences keep their code)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core.command_plans import plan_enable, plan_update
from appliance.core.definition import DefinitionProblems
from appliance.core.live_code import KEPT_CODES_MAX, code_for
from appliance.core.occurrence import OccurrenceState
from appliance.core.selection import plan_observation
from appliance.core.state import (
    AcquireOwnership,
    Claim,
    DisableSchedule,
    EnableSchedule,
    InvalidCommand,
    RecordOutcome,
    UnknownSchedule,
    UpdateSchedule,
    apply,
    binding_for,
    command_from_json,
    command_to_json,
    list_view,
    needs_commands_reader,
)
from appliance.protocol.v1 import payload_sha256
from tests.core.command_helpers import (
    EVERY_MINUTE,
    MINUTE,
    T0,
    definition,
    reloads_identically,
    state_with,
)
from tests.core.runner_helpers import AUTHORITY, NAMESPACE, WORKER, admit, claim, owned_state
from tests.core.test_state import observe, rejected

S = OccurrenceState

# ---- enable ----


@settings(max_examples=100, deadline=None)
@given(
    disabled_minutes=st.integers(0, 600),
    enable_offset_s=st.integers(0, 59),
    later_s=st.integers(0, 300),
    missed=st.sampled_from(["Skip", "RunOnce", {"CatchUp": {"cap": 4}}]),
)
def test_enable_resumes_without_a_backlog(disabled_minutes, enable_offset_s, later_s, missed):
    state = state_with(missed=missed)
    apply(state, DisableSchedule(1, T0))
    enabled_at = T0 + disabled_minutes * MINUTE + enable_offset_s
    apply(state, plan_enable(state, EVERY_MINUTE, 1, enabled_at))
    assert state.progress[1].cursor_s == enabled_at
    assert state.progress[1].dropped[0] == disabled_minutes + 1  # every slot in (T0 - 1, at]
    now = enabled_at + later_s
    report = apply(state, plan_observation(state, {1: EVERY_MINUTE}, now)).value
    assert all(enabled_at < due <= now for _, _, due in report.created)


def test_enable_with_catch_up_applies_the_missed_policy_to_the_disabled_span():
    state = state_with(missed={"CatchUp": {"cap": 3}})
    apply(state, DisableSchedule(1, T0))
    apply(state, plan_enable(state, EVERY_MINUTE, 1, T0 + 10 * MINUTE, catch_up=True))
    assert state.progress[1].cursor_s == T0 - 1
    report = apply(state, plan_observation(state, {1: EVERY_MINUTE}, T0 + 10 * MINUTE)).value
    assert [due for _, _, due in report.created] == [T0 + m * MINUTE for m in (8, 9, 10)]


def test_enable_of_an_enabled_schedule_changes_nothing_and_of_a_missing_one_is_refused():
    state = state_with()
    before = state.to_json()
    assert apply(state, EnableSchedule(1, T0)).value is False
    assert state.to_json() == before
    rejected(state, EnableSchedule(9, T0), UnknownSchedule)
    rejected(state, EnableSchedule(1, T0, catch_up="yes"), InvalidCommand)


# ---- update ----


def test_update_changes_future_occurrences_and_records_the_change():
    state = state_with()
    command = plan_update(state, 1, {"code": "console.log('v2')", "name": None}, T0)
    assert command.fields == ("code", "name")
    assert apply(state, command).value == ("code", "name")  # the fields that changed
    schedule = state.schedules[1]
    assert schedule.definition.code == "console.log('v2')" and schedule.definition.name is None
    assert schedule.kept == ()  # no live occurrence needed the old code
    change = schedule.changes[-1]
    assert (change.at_s, change.fields) == (T0, ("code", "name"))
    assert change.payload_sha256 == payload_sha256("console.log('v2')")
    assert list_view(state)["schedules"][0]["changes"] == [[T0, ["code", "name"], change[2]]]
    assert needs_commands_reader(state)
    reloads_identically(state)


def test_an_update_to_the_same_definition_changes_nothing():
    state = state_with()
    before = state.to_json()
    assert apply(state, UpdateSchedule(1, state.schedules[1].definition, ("cron",), T0)).value == ()
    assert state.to_json() == before


def test_update_mid_run_keeps_the_live_claim_and_its_retries_on_the_old_code():
    state = owned_state(overlap="Concurrent", max_retries=1)
    old = state.schedules[1].definition.code
    binding = claim(state)
    admit(state, binding)
    apply(state, plan_update(state, 1, {"code": "console.log('v2')"}, T0 + 3))
    schedule = state.schedules[1]
    assert code_for(schedule, 1) == old and schedule.kept[0].until_id == 2
    # A failure retries the same occurrence, still bound to the old code's digest.
    apply(state, RecordOutcome(1, 1, "failed", T0 + 4))
    retry = binding_for(state, 1, namespace=NAMESPACE, worker_id=WORKER, authority=AUTHORITY)
    assert retry.attempt == 2 and retry.payload_sha256 == payload_sha256(old)
    claim(state, at_s=T0 + 5)  # accepted: no binding_mismatch
    # A new occurrence runs the new code.
    observe(state, T0 + MINUTE)
    fresh = binding_for(state, 2, namespace=NAMESPACE, worker_id=WORKER, authority=AUTHORITY)
    assert fresh.payload_sha256 == payload_sha256("console.log('v2')")
    # Once the old occurrence is terminal, its code is dropped.
    apply(state, RecordOutcome(1, 2, "completed", T0 + 70))
    assert state.schedules[1].kept == ()
    reloads_identically(state)


def test_a_takeover_re_claim_after_an_update_uses_the_code_the_occurrence_was_created_with():
    state = owned_state()
    old = state.schedules[1].definition.code
    claim(state)  # no permit: the takeover fences it back to Pending as attempt 2
    apply(state, plan_update(state, 1, {"code": "console.log('v2')"}, T0 + 2))
    takeover = apply(state, AcquireOwnership("voter-b", 2, T0 + 3)).value
    assert takeover.fenced == ((1, 1),)
    binding = claim(state, at_s=T0 + 4)
    assert binding.attempt == 2 and binding.payload_sha256 == payload_sha256(old)


def test_update_keeps_at_most_a_bounded_number_of_old_codes():
    state = state_with(overlap="Queue")
    for n in range(KEPT_CODES_MAX + 1):
        observe(state, T0 + n * MINUTE)  # one live (Pending) occurrence per code
        command = plan_update(state, 1, {"code": f"console.log({n})"}, T0 + n * MINUTE + 1)
        if n < KEPT_CODES_MAX:
            apply(state, command)
        else:
            rejected(state, command, InvalidCommand)
    assert len(state.schedules[1].kept) == KEPT_CODES_MAX
    for oid in range(1, KEPT_CODES_MAX + 1):
        expected = "console.log('v1')" if oid == 1 else f"console.log({oid - 2})"
        assert code_for(state.schedules[1], oid) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["create", "update", "finish"]), min_size=1, max_size=30))
def test_every_live_occurrence_runs_the_code_it_was_created_with(steps):
    state = state_with(overlap="Concurrent")
    created_with: dict[int, str] = {}
    at_s = T0
    version = 0
    for step in steps:
        at_s += MINUTE
        if step == "create":
            observe(state, at_s)
            created_with[state.next_occurrence_id - 1] = state.schedules[1].definition.code
        elif step == "update":
            version += 1
            command = plan_update(state, 1, {"code": f"v{version}"}, at_s)
            if len(state.schedules[1].kept) < KEPT_CODES_MAX:
                apply(state, command)
        else:
            live = [o for o in state.occurrences.values() if not o.terminal]
            if live:
                apply(state, Claim(live[0].id, 1, at_s))
                apply(state, RecordOutcome(live[0].id, 1, "completed", at_s))
        schedule = state.schedules[1]
        for record in state.occurrences.values():
            if not record.terminal:
                assert code_for(schedule, record.id) == created_with[record.id]
        live_ids = [o.id for o in state.occurrences.values() if not o.terminal]
        low = 0
        for kept in schedule.kept:  # every kept code is needed by some live record
            assert any(low <= oid < kept.until_id for oid in live_ids)
            low = kept.until_id


def test_plan_update_validates_the_merged_definition_by_name():
    state = state_with()
    with pytest.raises(InvalidCommand, match="jitter"):
        plan_update(state, 1, {"jitter": 3}, T0)
    with pytest.raises(InvalidCommand, match="at least one"):
        plan_update(state, 1, {}, T0)
    with pytest.raises(DefinitionProblems, match="cron"):
        plan_update(state, 1, {"cron": "61 * * * *"}, T0)
    with pytest.raises(UnknownSchedule):
        plan_update(state, 2, {"cron": "5 * * * *"}, T0)
    policy = {
        "missed": "RunOnce",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    }
    command = plan_update(state, 1, {"policy": {**policy, "jitter_seconds": 30}}, T0)
    assert command.definition.policy.jitter_seconds == 30


def test_update_refuses_malformed_fields_and_changes_nothing():
    state = state_with()
    new = definition(code="x")
    for fields in ((), ("code", "code"), ("name", "code"), ("owner",), ["code"]):
        rejected(state, UpdateSchedule(1, new, fields, T0), InvalidCommand)
    rejected(state, UpdateSchedule(2, new, ("code",), T0), UnknownSchedule)


def test_enable_and_update_round_trip_on_the_wire():
    state = state_with()
    commands = [
        plan_enable(state, EVERY_MINUTE, 1, T0 + 5),
        EnableSchedule(1, T0, True),
        plan_update(
            state,
            1,
            {
                "code": "y",
                "policy": {
                    "missed": "Skip",
                    "overlap": "Queue",
                    "retry": {"max_retries": 1, "delay_seconds": 2},
                    "jitter_seconds": 9,
                },
            },
            T0,
        ),
    ]
    for command in commands:
        assert command_from_json(command_to_json(command)) == command


def test_the_change_history_keeps_the_newest_changes_max():
    from appliance.core.schedule_commands import CHANGES_MAX

    state = state_with()
    for n in range(CHANGES_MAX + 1):
        apply(state, plan_update(state, 1, {"cron": f"{n} * * * *"}, T0 + n))
    changes = state.schedules[1].changes
    assert len(changes) == CHANGES_MAX
    assert [c.at_s for c in changes] == [T0 + n for n in range(1, CHANGES_MAX + 1)]
    assert all(c.fields == ("cron",) for c in changes)
