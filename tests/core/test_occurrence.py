"""The occurrence state machine (SPEC §3 "States" and "Accounting"; seeds/000)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core.canonical import canonical_json
from appliance.core.errors import CoreError, IllegalTransition
from appliance.core.occurrence import (
    EXECUTION_ID_BYTES_MAX,
    INSTANT_MAX_S,
    INT_MAX,
    REASON_BYTES_MAX,
    RECORD_BYTES_MAX,
    RESERVING,
    TERMINAL,
    TIMELINE_ENTRIES_MAX,
    TRANSITIONS,
    AttestationRequired,
    Event,
    Occurrence,
    OccurrenceState,
    bound_text,
    encode_occurrence,
    new_occurrence,
    occurrence_from_json,
    occurrence_to_json,
    transition,
)

S = OccurrenceState
E = Event
T0 = 1_800_000_000


def record_in(state: OccurrenceState, attempt: int = 1) -> Occurrence:
    return Occurrence(id=7, schedule_id=3, due_s=T0, state=state, attempt=attempt)


def test_every_pair_outside_the_table_raises_naming_state_and_event_and_changes_nothing():
    for state, event in itertools.product(OccurrenceState, Event):
        if (state, event) in TRANSITIONS:
            continue
        record = record_in(state)
        with pytest.raises(IllegalTransition) as caught:
            transition(record, event, T0 + 1, attested=True)
        assert state.value in str(caught.value)
        assert event.value in str(caught.value)
        assert record == record_in(state)


def test_terminal_states_have_no_way_out_except_failed_retry():
    exits = {(s, e) for (s, e) in TRANSITIONS if s in TERMINAL}
    assert exits == {(S.FAILED, E.RETRY)}


@pytest.mark.parametrize(
    ("outcome", "state"),
    [
        (E.COMPLETED, S.SUCCEEDED),
        (E.FAILED, S.FAILED),
        (E.TIMED_OUT, S.FAILED),
        (E.OUT_OF_MEMORY, S.FAILED),
        (E.CANCELLED, S.CANCELLED),
        (E.LOST, S.UNKNOWN),
        (E.UNREACHABLE, S.UNKNOWN),
    ],
)
def test_engine_outcomes_map_to_states_as_specified(outcome, state):
    assert transition(record_in(S.RUNNING), outcome, T0).state is state


@pytest.mark.parametrize("outcome", [E.FAILED, E.TIMED_OUT, E.OUT_OF_MEMORY])
def test_failures_keep_their_reason(outcome):
    failed = transition(record_in(S.RUNNING), outcome, T0, reason="ReferenceError: x")
    assert failed.failure_reason == "ReferenceError: x"
    assert transition(record_in(S.RUNNING), outcome, T0).failure_reason == outcome.value


def test_claim_moves_pending_to_running_with_the_same_attempt():
    claimed = transition(record_in(S.PENDING), E.CLAIM, T0 + 5)
    assert (claimed.state, claimed.attempt) == (S.RUNNING, 1)
    assert claimed.timeline[-1].reason == "claim"
    assert claimed.timeline[-1].at_s == T0 + 5


def test_cancel_of_pending_ends_it_at_once_because_it_was_never_admitted():
    assert transition(record_in(S.PENDING), E.CANCEL, T0).state is S.CANCELLED


def test_cancel_of_running_only_requests_it_and_confirmation_cancels():
    cancelling = transition(record_in(S.RUNNING), E.CANCEL, T0)
    assert cancelling.state is S.CANCELLING
    assert cancelling.reserving
    assert transition(cancelling, E.CANCEL_CONFIRMED, T0 + 1).state is S.CANCELLED


@pytest.mark.parametrize(("outcome", "state"), [(E.COMPLETED, S.SUCCEEDED), (E.FAILED, S.FAILED)])
def test_completion_may_win_the_cancellation_race_and_keeps_its_real_result(outcome, state):
    cancelling = record_in(S.CANCELLING)
    assert transition(cancelling, outcome, T0).state is state


@pytest.mark.parametrize(
    ("outcome", "state"),
    [
        (E.COMPLETED, S.SUCCEEDED),
        (E.FAILED, S.FAILED),
        (E.TIMED_OUT, S.FAILED),
        (E.CANCELLED, S.CANCELLED),
    ],
)
def test_unknown_resolves_to_the_confirmed_outcome(outcome, state):
    assert transition(record_in(S.UNKNOWN), outcome, T0).state is state


def test_unknown_never_retries():
    with pytest.raises(IllegalTransition):
        transition(record_in(S.UNKNOWN), E.RETRY, T0)


def test_only_failed_retries():
    for state in OccurrenceState:
        if state is S.FAILED:
            continue
        with pytest.raises(IllegalTransition):
            transition(record_in(state), E.RETRY, T0)


def test_retry_keeps_identity_increments_attempt_and_waits_delay_seconds():
    failed = transition(record_in(S.RUNNING), E.FAILED, T0 + 10)
    retried = transition(failed, E.RETRY, T0 + 10, retry_delay_seconds=30)
    assert (retried.id, retried.state, retried.attempt) == (7, S.PENDING, 2)
    assert retried.retries_used == 1
    assert retried.not_before_s == T0 + 40
    assert retried.retry_waiting
    ready = transition(retried, E.RETRY_DUE, T0 + 40)
    assert ready.not_before_s is None
    assert not ready.retry_waiting


def test_retry_with_zero_delay_is_claimable_at_once():
    failed = transition(record_in(S.RUNNING), E.FAILED, T0)
    assert transition(failed, E.RETRY, T0, retry_delay_seconds=0).not_before_s is None


@pytest.mark.parametrize("state", [S.RUNNING, S.UNKNOWN])
def test_fenced_attempt_returns_to_pending_as_next_attempt_without_spending_a_retry(state):
    fenced = transition(record_in(state, attempt=3), E.FENCED_NOT_LAUNCHED, T0)
    assert (fenced.state, fenced.attempt, fenced.retries_used) == (S.PENDING, 4, 0)
    assert fenced.not_before_s is None


def test_fenced_cancelling_attempt_is_cancelled():
    assert transition(record_in(S.CANCELLING), E.FENCED_NOT_LAUNCHED, T0).state is S.CANCELLED


@pytest.mark.parametrize("state", [S.UNKNOWN, S.CANCELLING])
def test_acknowledge_stopped_needs_explicit_attestation(state):
    record = record_in(state)
    with pytest.raises(AttestationRequired):
        transition(record, E.ACKNOWLEDGE_STOPPED, T0)
    assert record == record_in(state)
    assert transition(record, E.ACKNOWLEDGE_STOPPED, T0, attested=True).state is S.ABANDONED


@pytest.mark.parametrize("state", [S.PENDING, S.RUNNING, S.SUCCEEDED, S.FAILED])
def test_acknowledge_stopped_only_accepts_unknown_or_cancelling(state):
    with pytest.raises(IllegalTransition):
        transition(record_in(state), E.ACKNOWLEDGE_STOPPED, T0, attested=True)


def test_reservations_are_held_by_running_cancelling_and_unknown_only():
    assert {S.RUNNING, S.CANCELLING, S.UNKNOWN} == RESERVING
    assert {S.CANCELLED, S.SUCCEEDED, S.FAILED, S.ABANDONED} == TERMINAL


def test_timeline_is_bounded_and_keeps_the_creation_entry():
    record = new_occurrence(1, 1, T0, T0)
    for step in range(3 * TIMELINE_ENTRIES_MAX):
        record = transition(record, E.CLAIM, T0 + step)
        record = transition(record, E.FENCED_NOT_LAUNCHED, T0 + step)
    assert len(record.timeline) == TIMELINE_ENTRIES_MAX
    assert record.timeline[0].reason == "created"
    assert record.timeline[-1].attempt == record.attempt == 1 + 3 * TIMELINE_ENTRIES_MAX


def test_bound_text_counts_json_escaping_bytes():
    assert bound_text("abc", 3) == "abc"
    assert bound_text("abcd", 3) == "abc"
    # A control character escapes to six bytes (\\u0001).
    assert bound_text("\x01\x01", 6) == "\x01"
    assert bound_text("é" * 10, 4) == "éé"


def test_record_json_round_trips_and_never_passes_record_bytes_max():
    record = new_occurrence(INT_MAX, INT_MAX, INSTANT_MAX_S, INSTANT_MAX_S)
    for step in range(2 * TIMELINE_ENTRIES_MAX):
        record = transition(record, E.CLAIM, INSTANT_MAX_S)
        record = transition(
            record,
            E.OUT_OF_MEMORY,
            INSTANT_MAX_S,
            reason="\x00" * 10 * REASON_BYTES_MAX,
            execution_id="\x01" * 10 * EXECUTION_ID_BYTES_MAX,
        )
        record = transition(record, E.RETRY, INSTANT_MAX_S, retry_delay_seconds=86_400 + step)
    encoded = canonical_json(occurrence_to_json(record))
    assert len(encoded) <= RECORD_BYTES_MAX
    assert occurrence_from_json(occurrence_to_json(record)) == record


@settings(max_examples=200, deadline=None)
@given(
    reason=st.text(max_size=40),
    execution_id=st.one_of(st.none(), st.text(max_size=40)),
    events=st.lists(st.sampled_from(list(Event)), max_size=25),
    at_s=st.integers(0, INSTANT_MAX_S - 86_400),
)
def test_the_hand_written_encoder_is_byte_identical_to_canonical_json(
    reason, execution_id, events, at_s
):
    record = new_occurrence(42, 7, at_s, at_s)
    for event in events:
        try:
            record = transition(
                record, event, at_s, reason=reason, execution_id=execution_id, attested=True
            )
        except CoreError:
            continue
        assert encode_occurrence(record) == canonical_json(occurrence_to_json(record))
        assert occurrence_from_json(json.loads(encode_occurrence(record))) == record
