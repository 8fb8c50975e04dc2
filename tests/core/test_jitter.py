"""policy.jitter_seconds: a deterministic delay per (schedule, slot), never reaching the next
slot; the record waits Pending for its instant (SPEC §11, issue 22)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core.canonical import canonical_digest
from appliance.core.definition import DefinitionProblems, definition_to_json, parse_definition
from appliance.core.jitter import jitter_delay_s, jittered_instant_s
from appliance.core.limits import Limits
from appliance.core.occurrence import OccurrenceState
from appliance.core.pulse import Pulse
from appliance.core.selection import plan_observation
from appliance.core.state import (
    JITTER_KIND,
    Claim,
    CreateSchedule,
    InvalidCommand,
    Observe,
    ObservedSchedule,
    RetryDue,
    RetryNotDue,
    SchedulerState,
    SeedInitialSchedules,
    apply,
    command_from_json,
    command_kind,
    command_to_json,
    needs_commands_reader,
)
from tests.core.command_helpers import EVERY_MINUTE, MINUTE, T0, body, definition, state_with
from tests.core.test_state import rejected

S = OccurrenceState


@settings(max_examples=300, deadline=None)
@given(
    schedule_id=st.integers(1, 2**53 - 1),
    slot_s=st.integers(0, 253_402_300_799 - 100_000),
    jitter=st.integers(0, 3600),
    gap=st.integers(1, 100_000),
)
def test_the_delay_is_within_the_jitter_and_before_the_next_slot_and_always_the_same(
    schedule_id, slot_s, jitter, gap
):
    delay = jitter_delay_s(schedule_id, slot_s, jitter, slot_s + gap)
    assert 0 <= delay <= jitter
    assert slot_s + delay < slot_s + gap  # never at or beyond the next slot
    assert delay == jitter_delay_s(schedule_id, slot_s, jitter, slot_s + gap)


def test_the_delay_is_sha256_of_schedule_and_slot_modulo_the_span():
    digest = hashlib.sha256(f"7/{T0}".encode()).digest()
    expected = int.from_bytes(digest[:8], "big") % 601
    assert jitter_delay_s(7, T0, 600, T0 + 3600) == expected
    # Clipped to one second before the next slot: a minutely cron spans at most 59 s.
    assert jitter_delay_s(7, T0, 600, T0 + 60) == int.from_bytes(digest[:8], "big") % 60


def test_no_jitter_or_a_one_second_gap_means_no_delay():
    assert jitter_delay_s(1, T0, 0, T0 + 60) == 0
    assert jitter_delay_s(1, T0, 3600, T0 + 1) == 0


def test_delays_spread_over_the_span():
    delays = {jitter_delay_s(1, T0 + i * MINUTE, 59, T0 + (i + 1) * MINUTE) for i in range(500)}
    assert len(delays) > 40  # not a constant: the point of jitter is to spread


@pytest.mark.parametrize("jitter", [0, 1, 3600])
def test_jitter_seconds_at_its_bounds_is_accepted(jitter):
    parsed = parse_definition(body(jitter=jitter), Limits())
    assert parsed.policy.jitter_seconds == jitter
    assert parse_definition(definition_to_json(parsed), Limits()) == parsed


@pytest.mark.parametrize("jitter", [-1, 3601, 1.5, "5", True])
def test_jitter_seconds_out_of_bounds_is_refused_by_name(jitter):
    raw = body()
    raw["policy"]["jitter_seconds"] = jitter
    with pytest.raises(DefinitionProblems, match=r"policy\.jitter_seconds"):
        parse_definition(raw, Limits())


def test_no_jitter_is_omitted_so_existing_definition_digests_do_not_change():
    raw = {
        "name": "job",
        "code": "console.log('scheduled')",
        "cron": "*/5 * * * *",
        "timezone": "Europe/Berlin",
        "policy": {
            "missed": {"CatchUp": {"cap": 3}},
            "overlap": "Queue",
            "retry": {"max_retries": 2, "delay_seconds": 30},
        },
    }
    parsed = parse_definition(raw, Limits())
    assert definition_to_json(parsed) == raw
    explicit_zero = parse_definition(
        {**raw, "policy": {**raw["policy"], "jitter_seconds": 0}}, Limits()
    )
    assert definition_to_json(explicit_zero) == raw
    # Both digests were computed by the binary before jitter existed.
    assert canonical_digest(raw) == (
        "9fb047f42f1bf4fc632c4ad35a8bafad43682d4371b9cbee9e167301a5d42854"
    )
    state = SchedulerState(Limits())
    apply(state, CreateSchedule(parsed, 1_800_000_000))
    assert hashlib.sha256(state.to_json()).hexdigest() == (
        "d4d87ec9dca232f530494f20334ed63d5cedf6bd6efc22db05647c2a390c2667"
    )
    assert not needs_commands_reader(state)


def test_a_jittered_slot_waits_pending_until_its_instant_then_is_claimable():
    state = state_with(jitter=30)
    slot = T0
    wait = jittered_instant_s(1, slot, 30, slot + MINUTE)
    assert wait > slot  # this slot's delay is not zero (fixed by the hash)
    command = plan_observation(state, {1: EVERY_MINUTE}, slot + 1)
    assert command.entries[0].not_before_s == (wait,)
    apply(state, command)
    record = state.occurrences[1]
    assert (record.state, record.due_s, record.not_before_s) == (S.PENDING, slot, wait)
    rejected(state, Claim(1, 1, wait - 1), RetryNotDue)
    assert apply(state, RetryDue(wait - 1)).value == ()
    assert apply(state, RetryDue(wait)).value == (1,)
    record = state.occurrences[1]
    assert record.not_before_s is None and record.timeline[-1].reason == "jitter_due"
    assert record.due_s == slot  # the binding's due_time stays the slot
    assert apply(state, Claim(1, 1, wait)).value.state is S.RUNNING


def test_a_jittered_instant_already_passed_does_not_wait():
    state = state_with(jitter=30, missed="RunOnce")
    wait = jittered_instant_s(1, T0, 30, T0 + MINUTE)
    apply(state, Observe(wait, (ObservedSchedule(1, T0 - 1, wait, (T0,), 0, (wait,)),)))
    assert state.occurrences[1].not_before_s is None


def test_every_replica_and_every_owner_plans_the_same_instants():
    replicas = [state_with(jitter=45) for _ in range(2)]
    plans = [plan_observation(r, {1: EVERY_MINUTE}, T0 + 1) for r in replicas]
    assert plans[0] == plans[1]
    # A new owner rebuilds its pulse from the committed state and plans the same command.
    pulse = Pulse.rebuild(replicas[0], {1: EVERY_MINUTE})
    assert pulse.plan(replicas[0], {1: EVERY_MINUTE}, T0 + 1).command == plans[0]


def test_a_wait_beyond_the_schedules_jitter_is_clipped_to_it():
    # A plan made before an update lowered the jitter (or removed it) waits at most the new one.
    state = state_with(jitter=10)
    entry = ObservedSchedule(1, T0 - 1, T0 + 1, (T0,), 0, (T0 + 11,))
    apply(state, Observe(T0 + 1, (entry,)))
    assert state.occurrences[1].not_before_s == T0 + 10
    unjittered = state_with()
    apply(unjittered, Observe(T0 + 1, (entry,)))
    assert unjittered.occurrences[1].not_before_s is None


@pytest.mark.parametrize(
    "not_before", [(T0 - 1,), (T0 + 3601,), (T0, T0)], ids=["before", "beyond", "count"]
)
def test_a_malformed_wait_is_refused(not_before):
    state = state_with(jitter=3600)
    entry = ObservedSchedule(1, T0 - 1, T0 + 1, (T0,), 0, not_before)
    rejected(state, Observe(T0 + 1, (entry,)), InvalidCommand)


def test_an_unjittered_observe_keeps_its_wire_form_and_a_jittered_one_round_trips():
    plain = Observe(T0 + 1, (ObservedSchedule(1, T0 - 1, T0 + 1, (T0,), 0),))
    assert command_to_json(plain)["entries"] == [[1, T0 - 1, T0 + 1, [T0], 0]]
    jittered = Observe(T0 + 1, (ObservedSchedule(1, T0 - 1, T0 + 1, (T0,), 0, (T0 + 9,)),))
    assert command_to_json(jittered)["entries"] == [[1, T0 - 1, T0 + 1, [T0], 0, [T0 + 9]]]
    for command in (plain, jittered):
        assert command_from_json(command_to_json(command)) == command
    with pytest.raises(InvalidCommand):
        command_from_json({**command_to_json(plain), "entries": [[1, T0 - 1, T0 + 1, [T0], 0, []]]})


def test_skip_overlap_counts_a_waiting_record_as_live_work():
    state = state_with(jitter=59, overlap="Skip")
    apply(state, Observe(T0 + 1, (ObservedSchedule(1, T0 - 1, T0 + 1, (T0,), 0, (T0 + 50,)),)))
    entry = ObservedSchedule(1, T0 + 1, T0 + 61, (T0 + 60,), 0, (T0 + 70,))
    report = apply(state, Observe(T0 + 61, (entry,))).value
    assert report.created == () and report.dropped[0][1].value == "overlap"


def test_a_jittered_definition_is_gated_as_its_own_kind_and_raises_the_reader_version():
    plain, jittered = definition(), definition(jitter=5)
    assert command_kind(CreateSchedule(plain, T0)) == "CreateSchedule"
    assert command_kind(CreateSchedule(jittered, T0)) == JITTER_KIND
    assert command_kind(SeedInitialSchedules((plain, jittered), T0)) == JITTER_KIND
    assert command_kind(SeedInitialSchedules((plain,), T0)) == "SeedInitialSchedules"
    assert needs_commands_reader(state_with(jitter=5))


def test_the_reader_version_need_follows_the_schedules_and_survives_a_reload():
    from appliance.core.state import DeleteSchedule, from_json

    state = state_with(jitter=5)
    apply(state, CreateSchedule(definition(), T0))
    assert from_json(state.to_json()).extended_schedules == {1} == state.extended_schedules
    apply(state, DeleteSchedule(1, T0 + 1))
    assert not needs_commands_reader(state)


def test_history_shows_the_slot_and_the_jittered_start():
    from appliance.metrics.history import occurrence_detail

    state = state_with(jitter=30)
    wait = jittered_instant_s(1, T0, 30, T0 + MINUTE)
    apply(state, plan_observation(state, {1: EVERY_MINUTE}, T0 + 1))
    waiting = occurrence_detail(state.occurrences[1])
    assert waiting["due_at"] == "2027-01-15T08:00:00Z"
    assert waiting["starts_at"] == f"2027-01-15T08:00:{wait - T0:02d}Z"
    apply(state, RetryDue(wait))
    assert occurrence_detail(state.occurrences[1])["starts_at"] == waiting["starts_at"]
    assert occurrence_detail(state_with().occurrences.get(1) or _plain(state))["starts_at"] is None


def _plain(state):
    plain = state_with()
    apply(plain, plan_observation(plain, {1: EVERY_MINUTE}, T0 + 1))
    return plain.occurrences[1]
