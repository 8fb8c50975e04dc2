"""``NoteCapacityWait``: a claimed attempt waiting for the worker's capacity is noted once in its
history, and nothing else changes (issue 17, "Paced dispatch")."""

from __future__ import annotations

import pytest

from appliance.core.capacity_wait import NOTE_ATTEMPTS_MAX
from appliance.core.state import (
    AcquireOwnership,
    InvalidCommand,
    NoteCapacityWait,
    RecordOutcome,
    StaleEpoch,
    apply,
    command_from_json,
    command_to_json,
    from_json,
)
from tests.core.runner_helpers import claim, owned_state
from tests.core.test_state import T0, occ, rejected


def test_a_claimed_running_attempt_of_this_epoch_gets_one_capacity_wait_entry() -> None:
    state = owned_state()
    claim(state)
    budget = state.budget_bytes
    before = occ(state)
    result = apply(state, NoteCapacityWait(1, ((1, 1),), T0 + 2))
    assert result.value == (1,)
    after = occ(state)
    assert after.state is before.state and after.attempt == before.attempt
    assert [e.reason for e in after.timeline] == ["created", "claim", "capacity_wait"]
    assert after.timeline[-1].at_s == T0 + 2
    assert state.budget_bytes == budget  # inside the record's charge: nothing grows
    assert from_json(state.to_json()).to_json() == state.to_json()  # reloads byte for byte


def test_what_moved_on_before_the_note_committed_is_skipped() -> None:
    state = owned_state()
    claim(state)
    apply(state, RecordOutcome(1, 1, "completed", T0 + 2))
    result = apply(state, NoteCapacityWait(1, ((1, 1), (1, 2), (99, 1)), T0 + 3))
    assert result.value == ()
    assert "capacity_wait" not in [e.reason for e in occ(state).timeline]


def test_a_pending_occurrence_and_a_repeated_pair_are_not_noted_twice() -> None:
    state = owned_state()
    assert apply(state, NoteCapacityWait(1, ((1, 1),), T0 + 2)).value == ()  # still Pending
    claim(state)
    assert apply(state, NoteCapacityWait(1, ((1, 1), (1, 1)), T0 + 2)).value == (1,)


def test_a_note_of_another_epoch_is_refused_and_changes_nothing() -> None:
    state = owned_state()
    claim(state)
    rejected(state, NoteCapacityWait(2, ((1, 1),), T0 + 2), StaleEpoch)
    apply(state, AcquireOwnership("voter-b", 2, T0 + 3))  # the takeover fences the claim
    rejected(state, NoteCapacityWait(1, ((1, 1),), T0 + 4), StaleEpoch)


@pytest.mark.parametrize("count", [0, NOTE_ATTEMPTS_MAX + 1])
def test_a_note_listing_none_or_too_many_is_refused(count: int) -> None:
    state = owned_state()
    claim(state)
    pairs = tuple((1, 1) for _ in range(count))
    rejected(state, NoteCapacityWait(1, pairs, T0 + 2), InvalidCommand)


def test_the_longest_note_is_accepted() -> None:
    state = owned_state()
    claim(state)
    pairs = tuple((i + 1, 1) for i in range(NOTE_ATTEMPTS_MAX))
    assert apply(state, NoteCapacityWait(1, pairs, T0 + 2)).value == (1,)


@pytest.mark.parametrize("pair", [(1,), (1, -1), (1, 2**53), ("1", 1), (1, 1.0)])
def test_a_malformed_pair_is_refused(pair: tuple) -> None:
    state = owned_state()
    claim(state)
    rejected(state, NoteCapacityWait(1, (pair,), T0 + 2), InvalidCommand)


def test_the_command_travels_the_log_unchanged() -> None:
    command = NoteCapacityWait(3, ((1, 1), (7, 2)), T0)
    document = command_to_json(command)
    assert document["attempts"] == [[1, 1], [7, 2]]
    assert command_from_json(document) == command
