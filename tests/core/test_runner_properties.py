"""Runner-command properties over random sequences (accepted and refused alike).

Random takeovers, bound claims (some with a wrong field or a stale epoch), admissions from two
worker incarnations, lost acknowledgements, cancels, fences, outcomes, acknowledgements and
retention, applied to a state and, over the wire, to a replica:

* a refused command changes nothing, and is refused the same way on the replica;
* replicas stay byte-identical; a reload re-encodes to the same bytes with the same budget;
* the size never passes the budget, nor the budget the cap;
* a permit, once granted, never changes its incarnation or epoch while its record is retained,
  and no invocation ever gets a second (non-``existing``) permit.
"""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from appliance.core.errors import CoreError
from appliance.core.limits import CHECKPOINT_BYTES_MAX, Limits
from appliance.core.state import (
    AcknowledgeStopped,
    AcquireOwnership,
    Admit,
    Cancel,
    ClaimOccurrence,
    FenceAfterCancel,
    Granted,
    MarkUnknown,
    Observe,
    ObservedSchedule,
    RecordOutcome,
    RetryDue,
    SchedulerState,
    admission_record,
    apply,
    command_from_json,
    command_to_json,
    current_epoch,
    from_json,
)
from tests.core.runner_helpers import bind
from tests.core.test_state import T0, definition

LIMITS = Limits(schedules=2, records=5, outstanding=4, running=3, grace_seconds=5)
NODES = ("voter-a", "voter-b")
INCARNATIONS = ("inc-1", "inc-2")
WRONG = [("owner", "voter-z"), ("epoch", 99), ("worker_id", "other"), ("due_time", "x" * 20)]

action = st.tuples(
    st.sampled_from(
        [
            "acquire",
            "observe",
            "observe",
            "claim",
            "claim",
            "admit",
            "admit",
            "unknown",
            "cancel",
            "fence",
            "outcome",
            "ack",
            "retry_due",
        ]
    ),
    st.integers(0, 20),
    st.integers(0, 400),
)


def build(state: SchedulerState, kind: str, pick: int, value: int, clock_s: int, term: int):
    ids = sorted(state.occurrences) or [1]
    oid = ids[pick % len(ids)]
    record = state.occurrences.get(oid)
    if kind == "acquire":
        return AcquireOwnership(NODES[pick % 2], term, clock_s)
    if kind == "observe":
        cursor = state.progress[1].cursor_s
        slot = (clock_s // 60) * 60
        slots = (slot,) if slot > cursor else ()
        return Observe(clock_s, (ObservedSchedule(1, cursor, max(clock_s, cursor), slots, 0),))
    if kind == "retry_due":
        return RetryDue(clock_s)
    if record is None or current_epoch(state) == 0:
        return RetryDue(clock_s)
    binding = bind(state, oid)
    if value % 5 == 0:
        field, wrong = WRONG[value % len(WRONG)]
        binding = replace(binding, **{field: wrong})
    if kind == "claim":
        epoch = binding.epoch if value % 7 else binding.epoch - 1
        return ClaimOccurrence(oid, binding.attempt, epoch, binding, clock_s)
    if kind == "admit":
        admission = admission_record(state, oid)
        claim = admission.claim_for(record.attempt) if admission else None
        if claim is not None and value % 5:
            binding = claim  # the worker repeats the committed claim verbatim
        return Admit(binding, INCARNATIONS[pick % 2], clock_s)
    if kind == "unknown":
        return MarkUnknown(binding.invocation, "lost ack", clock_s)
    if kind == "cancel":
        return Cancel(oid, clock_s)
    if kind == "fence":
        return FenceAfterCancel(binding.invocation, clock_s)
    if kind == "outcome":
        outcome = ("completed", "failed", "lost", "cancelled")[value % 4]
        return RecordOutcome(oid, record.attempt, outcome, clock_s)
    return AcknowledgeStopped(oid, True, clock_s)


def permits(state: SchedulerState) -> dict[tuple[int, int], tuple[str, int]]:
    out = {}
    for oid in state.occurrences:
        admission = admission_record(state, oid)
        if admission is not None and admission.permit is not None:
            p = admission.permit
            out[(oid, p.attempt)] = (p.incarnation, p.granted_epoch)
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, min_size=10, max_size=50))
def test_random_runner_sequences_keep_every_invariant(actions):
    state = SchedulerState(LIMITS)
    from appliance.core.state import CreateSchedule

    apply(
        state,
        CreateSchedule(definition(overlap="Concurrent", max_retries=1, limits=LIMITS), T0 - 60),
    )
    replica = from_json(state.to_json())
    clock_s, term = T0, 1
    granted_ever: set[tuple[int, int]] = set()
    for kind, pick, value in actions:
        clock_s += 1 + value % 40
        if kind == "acquire":
            term += pick % 3 - (1 if pick % 5 == 0 else 0)  # sometimes a stale term
        command = build(state, kind, pick, value, clock_s, max(term, 1))
        before = state.to_json()
        held = permits(state)
        wire = json.loads(json.dumps(command_to_json(command)))
        try:
            applied = apply(state, command)
        except CoreError as refused:
            assert state.to_json() == before
            event(f"refused {type(command).__name__}: {type(refused).__name__}")
            try:
                apply(replica, command_from_json(wire))
            except CoreError as replica_refused:
                assert type(replica_refused) is type(refused)
            else:
                raise AssertionError("the replica accepted what the state refused") from None
            continue
        event(f"accepted {type(command).__name__}")
        apply(replica, command_from_json(wire))
        assert replica.to_json() == state.to_json()
        if isinstance(applied.value, Granted) and not applied.value.existing:
            key = (applied.value.invocation.occurrence_id, applied.value.invocation.attempt)
            assert key not in granted_ever, "a second permit for one invocation"
            granted_ever.add(key)
        now = permits(state)
        for key, permit in held.items():
            if key[0] in state.occurrences and key in now:
                assert now[key] == permit
        assert state.size_bytes == len(state.to_json()) <= state.budget_bytes
        assert state.budget_bytes <= CHECKPOINT_BYTES_MAX
        again = from_json(state.to_json())
        assert again.to_json() == state.to_json()
        assert again.budget_bytes == state.budget_bytes
