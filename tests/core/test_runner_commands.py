"""The runner's checkpoint commands: ownership epochs, bound claims, quorum admission, fences.

Each test is named after the rule it proves (SPEC §6, seeds/000, docs/protocol.md). ``rejected``
proves a refused command changed nothing, byte for byte.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from appliance.core.limits import Limits
from appliance.core.state import (
    ADMISSION_REFUSAL_CODES,
    AcknowledgeStopped,
    AcquireOwnership,
    Admit,
    AlreadySeeded,
    AttemptMismatch,
    AttemptNotRunning,
    Authority,
    BindingMismatch,
    Cancel,
    Claim,
    ClaimOccurrence,
    ClaimRefused,
    CreateSchedule,
    DeleteSchedule,
    FenceAfterCancel,
    Fenced,
    FenceNotLaunched,
    GrantExpired,
    IncarnationMismatch,
    InvalidCommand,
    MarkUnknown,
    NotAcquired,
    PermitExists,
    RecordOutcome,
    SchedulerState,
    SeedInitialSchedules,
    StaleEpoch,
    StaleTerm,
    admission_record,
    apply,
    binding_from_json,
    binding_to_json,
    command_from_json,
    command_to_json,
    current_epoch,
    current_ownership,
    from_json,
    needs_cancelling_reader,
    permit_to_json,
)
from tests.core.runner_helpers import (
    EXPIRES_AT_S,
    admit,
    bind,
    claim,
    owned_state,
)
from tests.core.test_state import MINUTE, T0, definition, new_state, observe, occ, rejected

# -- ownership -------------------------------------------------------------------------------------


def test_each_acquisition_raises_the_epoch_by_one():
    state = new_state()
    assert current_epoch(state) == 0
    assert apply(state, AcquireOwnership("voter-a", 1, T0)).value.epoch == 1
    assert apply(state, AcquireOwnership("voter-b", 2, T0 + 1)).value.epoch == 2
    assert apply(state, AcquireOwnership("voter-b", 2, T0 + 2)).value.epoch == 3
    ownership = current_ownership(state)
    assert (ownership.node, ownership.term, ownership.epoch) == ("voter-b", 2, 3)


def test_a_lower_term_is_refused_and_changes_nothing():
    state = new_state()
    apply(state, AcquireOwnership("voter-a", 5, T0))
    error = rejected(state, AcquireOwnership("voter-b", 4, T0 + 1), StaleTerm)
    assert error.code == "stale_term"


def test_another_node_in_the_same_term_is_refused():
    state = new_state()
    apply(state, AcquireOwnership("voter-a", 5, T0))
    rejected(state, AcquireOwnership("voter-b", 5, T0 + 1), StaleTerm)


@pytest.mark.parametrize("node", ["", "x" * 65, "bad node", "é"])
def test_a_malformed_node_id_is_refused(node):
    rejected(new_state(), AcquireOwnership(node, 1, T0), InvalidCommand)


def test_a_node_id_of_64_characters_is_accepted():
    state = new_state()
    apply(state, AcquireOwnership("n" * 64, 1, T0))
    assert current_ownership(state).node == "n" * 64


# -- initial schedules -----------------------------------------------------------------------------


def test_initial_schedules_are_created_once_with_ids_in_config_order():
    state = SchedulerState(Limits())
    definitions = tuple(definition() for _ in range(3))
    rejected(state, SeedInitialSchedules(definitions, T0), NotAcquired)
    takeover = apply(state, AcquireOwnership("voter-a", 1, T0)).value
    assert takeover.needs_seed
    assert apply(state, SeedInitialSchedules(definitions, T0)).value == (1, 2, 3)
    apply(state, DeleteSchedule(2, T0 + 1))
    rejected(state, SeedInitialSchedules(definitions, T0 + 2), AlreadySeeded)
    takeover = apply(state, AcquireOwnership("voter-b", 2, T0 + 3)).value
    assert not takeover.needs_seed
    rejected(state, SeedInitialSchedules(definitions, T0 + 4), AlreadySeeded)
    assert sorted(state.schedules) == [1, 3]


def test_an_empty_initial_list_still_marks_the_store_seeded():
    state = SchedulerState(Limits())
    apply(state, AcquireOwnership("voter-a", 1, T0))
    assert apply(state, SeedInitialSchedules((), T0)).value == ()
    assert current_ownership(state).seeded


def test_seeding_beyond_the_schedules_limit_is_refused_whole():
    state = SchedulerState(Limits(schedules=2))
    apply(state, AcquireOwnership("voter-a", 1, T0))
    rejected(state, SeedInitialSchedules((definition(),) * 3, T0))
    assert not current_ownership(state).seeded


# -- claims ----------------------------------------------------------------------------------------


def test_a_bound_claim_runs_the_attempt_and_records_its_binding():
    state = owned_state()
    binding = claim(state)
    assert occ(state).state.value == "Running"
    assert admission_record(state, 1).claim == binding
    assert binding.due_time == "2027-01-15T08:00:00Z"


def test_a_claim_of_another_epoch_is_refused():
    state = owned_state()
    binding = bind(state)
    error = rejected(state, ClaimOccurrence(1, 1, 2, replace(binding, epoch=2), T0 + 1), StaleEpoch)
    assert error.code == "stale_epoch"
    apply(state, AcquireOwnership("voter-b", 2, T0))
    rejected(state, ClaimOccurrence(1, 1, 1, binding, T0 + 1), StaleEpoch)


def test_a_claim_before_any_owner_is_refused():
    state = new_state()
    observe(state, T0)
    apply(state, AcquireOwnership("voter-a", 1, T0))
    binding = bind(state)
    fresh = new_state()
    observe(fresh, T0)
    rejected(fresh, ClaimOccurrence(1, 1, 1, binding, T0 + 1), NotAcquired)


def test_a_claim_for_another_attempt_is_refused():
    state = owned_state()
    binding = replace(bind(state), attempt=2)
    rejected(state, ClaimOccurrence(1, 2, 1, binding, T0 + 1), AttemptMismatch)


@pytest.mark.parametrize(
    "field, value",
    [
        ("owner", "voter-z"),
        ("epoch", 7),
        ("occurrence_id", 9),
        ("attempt", 3),
        ("schedule_id", 4),
        ("schedule_name", "other"),
        ("payload_sha256", "0" * 64),
        ("due_time", "2027-01-15T08:01:00Z"),
    ],
)
def test_a_claim_whose_binding_disagrees_with_the_state_is_refused(field, value):
    state = owned_state()
    command = ClaimOccurrence(1, 1, 1, replace(bind(state), **{field: value}), T0 + 1)
    error = rejected(state, command, BindingMismatch)
    assert field in str(error)


def test_a_claim_at_or_after_the_grant_expiry_is_refused():
    state = owned_state()
    binding = bind(state)
    rejected(state, ClaimOccurrence(1, 1, 1, binding, EXPIRES_AT_S), GrantExpired)
    apply(state, ClaimOccurrence(1, 1, 1, binding, EXPIRES_AT_S - 1))


def test_a_bound_claim_respects_the_running_limit():
    state = owned_state(Limits(running=1), overlap="Concurrent")
    observe(state, T0 + MINUTE)
    claim(state, 1)
    rejected(state, ClaimOccurrence(2, 1, 1, bind(state, 2), T0 + MINUTE + 2), ClaimRefused)


@pytest.mark.parametrize(
    "authority",
    [
        Authority("2027-01-15T08:00:00", 300, 128, "s"),  # no offset
        Authority("yesterday", 300, 128, "s"),
        Authority("2027-01-15T09:00:00Z", 0, 128, "s"),
        Authority("2027-01-15T09:00:00Z", 86_401, 128, "s"),
        Authority("2027-01-15T09:00:00Z", 300, 15, "s"),
        Authority("2027-01-15T09:00:00Z", 300, 4097, "s"),
    ],
)
def test_an_authority_out_of_its_bounds_is_refused(authority):
    state = owned_state()
    command = ClaimOccurrence(1, 1, 1, replace(bind(state), authority=authority), T0 + 1)
    rejected(state, command, InvalidCommand)


def test_authority_limits_at_their_bounds_are_accepted():
    for timeout_s, heap_mb in ((1, 16), (86_400, 4096)):
        state = owned_state()
        authority = Authority("2027-01-15T10:00:00+01:00", timeout_s, heap_mb, "")
        apply(state, ClaimOccurrence(1, 1, 1, replace(bind(state), authority=authority), T0))


# -- admission -------------------------------------------------------------------------------------


def test_admission_grants_one_permit_for_the_exact_running_attempt():
    state = owned_state()
    binding = claim(state)
    granted = admit(state, binding)
    assert not granted.existing
    assert granted.granted_epoch == 1
    record = admission_record(state, 1)
    assert record.permit.incarnation == "inc-1"
    assert permit_to_json(granted) == {
        "invocation": {
            "namespace": binding.namespace,
            "schedule_id": 1,
            "occurrence_id": 1,
            "attempt": 1,
        },
        "incarnation": "inc-1",
        "granted_epoch": 1,
        "granted_at": "2027-01-15T08:00:02Z",
    }


def test_the_same_incarnation_asking_again_gets_the_same_permit_and_nothing_changes():
    state = owned_state()
    binding = claim(state)
    first = admit(state, binding)
    before = state.to_json()
    again = apply(state, Admit(binding, "inc-1", T0 + 30))
    assert again.touched == frozenset() and state.to_json() == before
    assert again.value.existing
    assert again.value.granted_at_s == first.granted_at_s


def test_another_worker_incarnation_is_refused_once_a_permit_exists():
    state = owned_state()
    binding = claim(state)
    admit(state, binding)
    error = rejected(state, Admit(binding, "inc-2", T0 + 3), IncarnationMismatch)
    assert error.code == "incarnation_mismatch"


def test_a_new_epoch_never_yields_a_second_permit_for_an_admitted_invocation():
    state = owned_state()
    binding = claim(state)
    admit(state, binding)
    takeover = apply(state, AcquireOwnership("voter-b", 2, T0 + 5)).value
    assert takeover.reobserve == (1,) and takeover.fenced == ()
    newer = replace(binding, owner="voter-b", epoch=2)
    rejected(state, Admit(newer, "inc-1", T0 + 6), BindingMismatch)
    rejected(state, Admit(binding, "inc-2", T0 + 6), IncarnationMismatch)
    assert admit(state, binding, "inc-1", T0 + 6).existing  # the old permit stays valid


@pytest.mark.parametrize(
    "field, value",
    [
        ("namespace", "other-namespace"),
        ("schedule_name", "other"),
        ("owner", "voter-z"),
        ("epoch", 2),
        ("worker_id", "worker-2"),
        ("payload_sha256", "0" * 64),
        ("due_time", "2027-01-15T08:01:00Z"),
        ("authority", Authority("2027-01-15T09:00:00Z", 301, 128, "ops")),
        ("authority", Authority("2027-01-15T09:00:00Z", 300, 129, "ops")),
        ("authority", Authority("2027-01-15T09:00:00Z", 300, 128, "other")),
        ("authority", Authority("2027-01-15T09:00:01Z", 300, 128, "ops")),
    ],
)
def test_admission_refuses_a_binding_that_differs_in_any_field(field, value):
    state = owned_state()
    binding = claim(state)
    error = rejected(state, Admit(replace(binding, **{field: value}), "inc-1", T0 + 2))
    assert error.code == "binding_mismatch"
    assert field in str(error)


def test_admission_for_another_schedule_id_is_refused():
    state = owned_state()
    binding = claim(state)
    rejected(state, Admit(replace(binding, schedule_id=5), "inc-1", T0 + 2), BindingMismatch)


@pytest.mark.parametrize("attempt", [2, 3])
def test_admission_for_another_attempt_is_refused(attempt):
    state = owned_state()
    binding = claim(state)
    error = rejected(state, Admit(replace(binding, attempt=attempt), "i", T0 + 2))
    assert error.code == "attempt_not_running"


def test_admission_of_a_pending_or_finished_attempt_is_refused():
    state = owned_state()
    pending = bind(state)
    rejected(state, Admit(pending, "inc-1", T0 + 2), AttemptNotRunning)
    binding = claim(state)
    apply(state, RecordOutcome(1, 1, "completed", T0 + 3))
    rejected(state, Admit(binding, "inc-1", T0 + 4), AttemptNotRunning)


def test_admission_of_an_old_epoch_claim_after_takeover_is_refused_as_fenced():
    state = owned_state()
    binding = claim(state)
    takeover = apply(state, AcquireOwnership("voter-b", 2, T0 + 5)).value
    assert takeover.fenced == ((1, 1),)
    error = rejected(state, Admit(binding, "inc-1", T0 + 6), Fenced)
    assert error.code == "fenced"


def test_admission_of_a_claim_whose_epoch_is_no_longer_current_is_refused_as_stale():
    # A claim committed by an old owner after the takeover (Raft may commit an old-term entry
    # later) is still of the old epoch: admission refuses it.
    state = owned_state()
    old_binding = bind(state)
    apply(state, AcquireOwnership("voter-a", 1, T0))  # epoch 2; the same node re-acquires
    rejected(state, ClaimOccurrence(1, 1, 1, old_binding, T0 + 1), StaleEpoch)
    fresh = claim(state)
    assert fresh.epoch == 2
    state2 = from_json(state.to_json())
    apply(state2, AcquireOwnership("voter-b", 2, T0 + 2))
    assert admission_record(state2, 1).fence is not None


def test_admission_at_or_after_the_grant_expiry_is_refused():
    state = owned_state()
    binding = claim(state)
    error = rejected(state, Admit(binding, "inc-1", EXPIRES_AT_S), GrantExpired)
    assert error.code == "grant_expired"
    assert not admit(state, binding, "inc-1", EXPIRES_AT_S - 1).existing


def test_an_existing_permit_is_returned_even_after_the_expiry_because_nothing_new_is_granted():
    state = owned_state()
    binding = claim(state)
    admit(state, binding)
    assert admit(state, binding, "inc-1", EXPIRES_AT_S + 100).existing


def test_admission_for_a_retired_occurrence_is_refused_by_the_high_water_mark():
    state = owned_state(Limits(records=1, outstanding=1, running=1))
    binding = claim(state)
    admit(state, binding)
    apply(state, RecordOutcome(1, 1, "completed", T0 + 3))
    report = apply(state, _observe_next(state, T0 + MINUTE)).value
    assert report.retired == (1,)
    assert admission_record(state, 1) is None
    assert state.extra["retired"] == {"through": 1}
    error = rejected(state, Admit(binding, "inc-1", T0 + MINUTE + 2), AttemptNotRunning)
    assert "retired" in str(error)


def _observe_next(state, slot_s):
    from appliance.core.state import Observe, ObservedSchedule

    cursor = state.progress[1].cursor_s
    return Observe(slot_s + 1, (ObservedSchedule(1, cursor, slot_s + 1, (slot_s,), 0),))


def test_every_refusal_code_is_one_of_the_protocol_codes():
    assert {
        "binding_mismatch",
        "attempt_not_running",
        "stale_epoch",
        "fenced",
        "grant_expired",
        "incarnation_mismatch",
    } == ADMISSION_REFUSAL_CODES


def test_an_unknown_attempt_may_still_be_admitted_by_its_current_claim():
    state = owned_state()
    binding = claim(state)
    apply(state, MarkUnknown(binding.invocation, "exec: connection reset", T0 + 2))
    assert occ(state).state.value == "Unknown"
    assert admission_record(state, 1).unknown.reason == "exec: connection reset"
    assert not admit(state, binding, "inc-1", T0 + 3).existing
    assert occ(state).state.value == "Unknown"  # only an observed outcome resolves it


@pytest.mark.parametrize("incarnation", ["", None, 7, "x" * 769])
def test_a_malformed_incarnation_is_refused(incarnation):
    state = owned_state()
    binding = claim(state)
    rejected(state, Admit(binding, incarnation, T0 + 2), InvalidCommand)


# -- takeover --------------------------------------------------------------------------------------


def test_takeover_fences_unadmitted_claims_and_keeps_admitted_ones():
    state = owned_state(Limits(running=4), overlap="Concurrent")
    for minute in (1, 2, 3):
        observe(state, T0 + minute * MINUTE)
    admitted = claim(state, 1)
    admit(state, admitted)
    claim(state, 2)  # claimed, never admitted
    cancelling = claim(state, 3)
    admit(state, cancelling)
    apply(state, Cancel(3, T0 + 4 * MINUTE))
    claim(state, 4)
    apply(state, MarkUnknown(bind(state, 4).invocation, "lost ack", T0 + 4 * MINUTE))
    retries_before = occ(state, 2).retries_used
    takeover = apply(state, AcquireOwnership("voter-b", 2, T0 + 5 * MINUTE)).value
    assert takeover.fenced == ((2, 1), (4, 1))
    assert takeover.reobserve == (1,)
    assert takeover.resume_cancelling == (3,)
    assert (occ(state, 2).state.value, occ(state, 2).attempt) == ("Pending", 2)
    assert occ(state, 2).retries_used == retries_before  # a fence spends no retry
    assert (occ(state, 4).state.value, occ(state, 4).attempt) == ("Pending", 2)
    assert occ(state, 1).state.value == "Running"
    fence = admission_record(state, 2).fence
    assert (fence.attempt, fence.epoch, fence.cause) == (1, 2, "takeover")
    # The fenced occurrence is claimed again by the new owner, as the next attempt.
    again = claim(state, 2, T0 + 5 * MINUTE + 1)
    assert (again.attempt, again.epoch, again.owner) == (2, 2, "voter-b")
    assert not admit(state, again, "inc-9", T0 + 5 * MINUTE + 2).existing


def test_takeover_cancels_a_never_admitted_cancelling_occurrence():
    state = owned_state()
    claim(state)
    apply(state, Cancel(1, T0 + 2))
    takeover = apply(state, AcquireOwnership("voter-b", 2, T0 + 3)).value
    assert takeover.fenced == ((1, 1),)
    assert occ(state).state.value == "Cancelled"


def test_takeover_ends_a_fenced_occurrence_of_a_deleted_schedule_cancelled():
    state = owned_state()
    claim(state)
    apply(state, DeleteSchedule(1, T0 + 2))
    apply(state, AcquireOwnership("voter-b", 2, T0 + 3))
    assert occ(state).state.value == "Cancelled"


def test_a_legacy_unbound_claim_is_never_admissible_and_is_fenced_at_takeover():
    state = owned_state()
    apply(state, Claim(1, 1, T0 + 1))
    rejected(state, Admit(bind(state), "inc-1", T0 + 2), BindingMismatch)
    assert apply(state, AcquireOwnership("voter-a", 2, T0 + 3)).value.fenced == ((1, 1),)


# -- cancellation, fences, acknowledgement ---------------------------------------------------------


def test_fence_after_cancel_commits_cancelled_and_refuses_later_admission():
    state = owned_state()
    binding = claim(state)
    apply(state, Cancel(1, T0 + 2))
    assert needs_cancelling_reader(state)
    rejected(state, Admit(binding, "inc-1", T0 + 3), AttemptNotRunning)
    apply(state, FenceAfterCancel(binding.invocation, T0 + 3))
    assert occ(state).state.value == "Cancelled"
    assert not needs_cancelling_reader(state)
    assert admission_record(state, 1).fence.cause == "cancel"
    rejected(state, Admit(binding, "inc-1", T0 + 4), Fenced)


def test_fence_after_cancel_is_refused_when_a_permit_exists():
    state = owned_state()
    binding = claim(state)
    admit(state, binding)
    apply(state, Cancel(1, T0 + 3))
    error = rejected(state, FenceAfterCancel(binding.invocation, T0 + 4), PermitExists)
    assert error.code == "permit_exists"


def test_the_policy_fence_is_refused_too_when_a_permit_exists():
    unadmitted = owned_state()
    claim(unadmitted)
    apply(unadmitted, FenceNotLaunched(1, 1, T0 + 2))
    assert (occ(unadmitted).state.value, occ(unadmitted).attempt) == ("Pending", 2)
    state = owned_state()
    admit(state, claim(state))
    rejected(state, FenceNotLaunched(1, 1, T0 + 3), PermitExists)


def test_fence_after_cancel_needs_a_committed_cancelling():
    state = owned_state()
    binding = claim(state)
    rejected(state, FenceAfterCancel(binding.invocation, T0 + 2), InvalidCommand)


def test_commands_naming_an_invocation_check_schedule_and_namespace():
    state = owned_state()
    binding = claim(state)
    wrong_schedule = replace(binding.invocation, schedule_id=9)
    rejected(state, MarkUnknown(wrong_schedule, "x", T0 + 2), InvalidCommand)
    wrong_namespace = replace(binding.invocation, namespace="elsewhere")
    rejected(state, MarkUnknown(wrong_namespace, "x", T0 + 2), InvalidCommand)
    wrong_attempt = replace(binding.invocation, attempt=2)
    rejected(state, MarkUnknown(wrong_attempt, "x", T0 + 2), AttemptMismatch)


def test_acknowledge_stopped_abandons_without_touching_a_granted_permit():
    state = owned_state()
    binding = claim(state)
    admit(state, binding)
    apply(state, MarkUnknown(binding.invocation, "observe: unreachable", T0 + 5))
    permit = admission_record(state, 1).permit
    apply(state, AcknowledgeStopped(1, True, T0 + 6))
    assert occ(state).state.value == "Abandoned"
    assert admission_record(state, 1).permit == permit
    assert admit(state, binding, "inc-1", T0 + 7).existing  # still the one permit


def test_a_later_confirmed_outcome_resolves_unknown():
    state = owned_state()
    binding = claim(state)
    admit(state, binding)
    apply(state, MarkUnknown(binding.invocation, "lost ack", T0 + 3))
    apply(state, RecordOutcome(1, 1, "completed", T0 + 9))
    assert occ(state).state.value == "Succeeded"


# -- wire, reload, budget --------------------------------------------------------------------------


def test_runner_commands_round_trip_through_canonical_json():
    state = owned_state()
    binding = bind(state)
    commands = [
        AcquireOwnership("voter-a", 3, T0),
        SeedInitialSchedules((definition(),), T0),
        ClaimOccurrence(1, 1, 1, binding, T0 + 1),
        Admit(binding, "inc-1", T0 + 2),
        MarkUnknown(binding.invocation, "why", T0 + 3),
        FenceAfterCancel(binding.invocation, T0 + 4),
    ]
    for command in commands:
        wire = json.loads(json.dumps(command_to_json(command)))
        assert command_from_json(wire) == command


def test_a_binding_with_an_unknown_or_missing_field_is_refused_by_name():
    binding = bind(owned_state())
    body = binding_to_json(binding)
    assert binding_from_json(body) == binding
    with pytest.raises(InvalidCommand, match=r"binding\.extra"):
        binding_from_json({**body, "extra": 1})
    missing = dict(body)
    del missing["worker_id"]
    with pytest.raises(InvalidCommand, match=r"binding\.worker_id"):
        binding_from_json(missing)
    with pytest.raises(InvalidCommand, match=r"authority\.bogus"):
        binding_from_json({**body, "authority": {**body["authority"], "bogus": 1}})


def test_runner_parts_reload_byte_identically_with_the_same_budget():
    state = owned_state(Limits(running=3), overlap="Concurrent")
    observe(state, T0 + MINUTE)
    binding = claim(state, 1)
    admit(state, binding)
    claim(state, 2)
    apply(state, AcquireOwnership("voter-b", 2, T0 + 2 * MINUTE))
    again = from_json(state.to_json())
    assert again.to_json() == state.to_json()
    assert again.budget_bytes == state.budget_bytes
    assert state.size_bytes == len(state.to_json()) <= state.budget_bytes


def test_claims_permits_and_fences_move_within_the_records_reserve():
    state = owned_state()
    budget = state.budget_bytes
    binding = claim(state)
    assert state.budget_bytes == budget  # the claim part was reserved at creation
    admit(state, binding)
    apply(state, Cancel(1, T0 + 3))
    assert state.budget_bytes == budget
    assert state.size_bytes <= state.budget_bytes


def test_a_terminal_records_admission_part_is_charged_its_size():
    state = owned_state()
    binding = claim(state)
    admit(state, binding)
    apply(state, RecordOutcome(1, 1, "completed", T0 + 3))
    # Terminal: every part is charged exactly its bytes (nothing writes them again) except the
    # constant-budget singletons and the schedule's live reservations.
    part = state.part_bytes("admission/1")
    again = from_json(state.to_json())
    assert again.budget_bytes == state.budget_bytes
    assert len(part) < 1000


def test_creation_reserves_room_for_the_runner_parts_so_claims_always_fit():
    # Fill the growth budget with live records; every one can still be claimed and admitted.
    from appliance.core.state import GROWTH_BYTES_MAX

    state = owned_state(
        Limits(records=65536, outstanding=65536, running=65536), overlap="Concurrent"
    )
    minute = 1
    while True:
        report = apply(state, _observe_next(state, T0 + minute * MINUTE)).value
        minute += 1
        if report.dropped:
            break
    assert state.budget_bytes <= GROWTH_BYTES_MAX
    for oid in sorted(state.occurrences):
        later = Authority("2099-01-01T00:00:00Z", 300, 128, "ops")
        binding = claim(state, oid, T0 + minute * MINUTE, authority=later)
        admit(state, binding, "inc-1", T0 + minute * MINUTE)
    assert state.size_bytes <= state.budget_bytes <= GROWTH_BYTES_MAX


def test_the_checkpoint_budget_covers_a_worst_case_admission_part():
    from appliance.core.canonical import canonical_json
    from appliance.core.runner_parts import (
        ADMISSION_BYTES_MAX,
        _worst_case_admission,
        admission_to_json,
    )

    assert len(canonical_json(admission_to_json(_worst_case_admission()))) == ADMISSION_BYTES_MAX
    assert ADMISSION_BYTES_MAX < 8 * 1024


def test_creating_a_schedule_works_without_ownership_for_the_policy_core():
    state = SchedulerState(Limits())
    assert apply(state, CreateSchedule(definition(), T0)).value == 1
