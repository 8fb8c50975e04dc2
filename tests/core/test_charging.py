"""Charging rules 2: each live record is charged the most it can still reach, switched on by a
committed ``AdoptCharging`` (appliance/core/charging.py, docs/runner-core.md "Room for a burst")."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from appliance.config.common import IDENT
from appliance.config.rfc3339 import format_utc
from appliance.config.runner import SESSION_BYTES_MAX, SESSION_PATTERN
from appliance.core.binding import check_binding_v2, check_incarnation_v2
from appliance.core.canonical import canonical_json
from appliance.core.definition import parse_definition
from appliance.core.errors import CoreError
from appliance.core.limits import CHECKPOINT_BYTES_MAX, Limits
from appliance.core.occurrence import RECORD_BYTES_MAX, new_occurrence
from appliance.core.runner_parts import ADMISSION_V2_UNNAMED_BYTES, admission_bytes_fitted
from appliance.core.schema import Problems
from appliance.core.state import (
    ADMISSION_BYTES_MAX,
    GROWTH_BYTES_MAX,
    AcknowledgeStopped,
    AcquireOwnership,
    Admit,
    AdoptCharging,
    Authority,
    Cancel,
    ClaimOccurrence,
    CreateSchedule,
    DeleteSchedule,
    FenceAfterCancel,
    FenceNotLaunched,
    InvalidCommand,
    MarkUnknown,
    Observe,
    ObservedSchedule,
    RecordOutcome,
    SchedulerState,
    apply,
    binding_for,
    charging_rules,
    command_from_json,
    command_to_json,
    current_epoch,
    from_json,
    needs_charging_reader,
)
from appliance.core.state_parts import (
    PROGRESS_BYTES_MAX,
    Schedule,
    _schedule_json,
    record_bytes_max,
)
from appliance.core.txn import _APPLY
from tests.core.test_state import T0

# The longest texts a valid config and worker can produce under rules 2.
LONG_NAMESPACE = "n" * 128
LONG_WORKER = "w" * 128
LONG_SESSION = '"' * 64 + "\\" * 64  # printable ASCII, each escapes to two JSON bytes
LONG_INCARNATION = "i" * 32
LONG_AUTHORITY = Authority(
    expires_at="2027-01-15T09:00:00.123456Z",
    timeout_seconds=86_400,
    heap_mb=4096,
    session=LONG_SESSION,
)


def modest(index: int, limits: Limits, name: str | None = None, code: str | None = None):
    return parse_definition(
        {
            "name": f"job-{index:04d}" if name is None else name,
            "code": code if code is not None else "console.log('scheduled')",
            "cron": "* * * * *",
            "timezone": "UTC",
            "policy": {
                "missed": "Skip",
                "overlap": "Concurrent",
                "retry": {"max_retries": 1, "delay_seconds": 0},
            },
        },
        limits,
    )


def observe_all(state: SchedulerState, at_s: int, slot_s: int) -> Observe:
    entries = tuple(
        ObservedSchedule(sid, state.progress[sid].cursor_s, at_s, (slot_s,), 0)
        for sid in sorted(state.schedules)
    )
    return Observe(at_s, entries)


def reloaded_same(state: SchedulerState) -> None:
    again = from_json(state.to_json())
    assert again.to_json() == state.to_json()
    assert again.budget_bytes == state.budget_bytes
    assert charging_rules(again) == charging_rules(state)


# ---- the switch ----------------------------------------------------------------------------


def test_a_new_store_is_charged_by_rules_1_exactly_as_before() -> None:
    """Every store starts on rules 1 (the log is replayed from the same initial state by every
    binary), with the same numbers as before the switch existed."""
    limits = Limits()
    state = SchedulerState(limits)
    apply(state, CreateSchedule(modest(1, limits), T0 - 60))
    apply(state, observe_all(state, T0 + 1, T0))
    assert charging_rules(state) == 1 and not needs_charging_reader(state)
    assert b'"charging"' not in state.to_json()
    assert (RECORD_BYTES_MAX, ADMISSION_BYTES_MAX) == (1686, 4923)
    record_charge = state._budgets["occurrence/1"]
    assert record_charge == RECORD_BYTES_MAX + len("admission/1") + 4 + ADMISSION_BYTES_MAX
    reloaded_same(state)


def test_the_switch_recharges_every_live_record_and_survives_a_reload() -> None:
    limits = Limits(outstanding=8, running=8)
    state = SchedulerState(limits)
    apply(state, CreateSchedule(modest(1, limits), T0 - 60))
    apply(state, AcquireOwnership("voter-a", 1, T0 - 30))
    apply(state, observe_all(state, T0 + 1, T0))
    apply(state, observe_all(state, T0 + 61, T0 + 60))
    replica = from_json(state.to_json())
    before = state.budget_bytes
    command = AdoptCharging(2)
    wire = json.loads(json.dumps(command_to_json(command)))
    assert apply(state, command).value is True
    assert apply(replica, command_from_json(wire)).value is True
    assert replica.to_json() == state.to_json() and replica.budget_bytes == state.budget_bytes
    assert charging_rules(state) == 2 and needs_charging_reader(state)
    assert state.budget_bytes < before
    record = state.occurrences[1]
    fitted = admission_bytes_fitted(record, None, state.schedules[1])
    assert (
        state._budgets["occurrence/1"] == record_bytes_max(record) + len("admission/1") + 4 + fitted
    )
    reloaded_same(state)
    # A second switch changes nothing (a replayed or repeated proposal is harmless).
    again = apply(state, AdoptCharging(2))
    assert again.value is False and not again.touched
    with pytest.raises(InvalidCommand, match="rules: must be 2"):
        apply(state, AdoptCharging(3))


def test_the_switch_is_refused_while_a_live_claim_exceeds_the_rule_2_bounds() -> None:
    """A claim committed under rules 1 with a 700-byte namespace would outgrow its rule-2 charge:
    the switch waits, refused by name, and changes nothing."""
    limits = Limits()
    state = SchedulerState(limits)
    apply(state, CreateSchedule(modest(1, limits), T0 - 60))
    apply(state, AcquireOwnership("voter-a", 1, T0 - 30))
    apply(state, observe_all(state, T0 + 1, T0))
    binding = binding_for(state, 1, namespace="n" * 700, worker_id="w", authority=LONG_AUTHORITY)
    apply(state, ClaimOccurrence(1, 1, current_epoch(state), binding, T0 + 2))
    before = state.to_json()
    with pytest.raises(InvalidCommand, match="occurrence 1 holds admission/1 beyond rules 2"):
        apply(state, AdoptCharging(2))
    assert state.to_json() == before and charging_rules(state) == 1
    apply(state, RecordOutcome(1, 1, "completed", T0 + 3))
    assert apply(state, AdoptCharging(2)).value is True  # terminal now: nothing can grow


def test_rule_2_refuses_claims_and_permits_beyond_its_bounds() -> None:
    limits = Limits()
    state = SchedulerState(limits)
    apply(state, CreateSchedule(modest(1, limits), T0 - 60))
    apply(state, AcquireOwnership("voter-a", 1, T0 - 30))
    apply(state, AdoptCharging(2))
    apply(state, observe_all(state, T0 + 1, T0))
    epoch = current_epoch(state)
    for field, value in [("namespace", "n" * 129), ("worker_id", "a b")]:
        binding = binding_for(state, 1, namespace="ns", worker_id="w", authority=LONG_AUTHORITY)
        bad = replace(binding, **{field: value})
        with pytest.raises(InvalidCommand, match=rf"binding\.{field}"):
            apply(state, ClaimOccurrence(1, 1, epoch, bad, T0 + 2))
    long_session = replace(LONG_AUTHORITY, session="s" * 129)
    binding = binding_for(state, 1, namespace="ns", worker_id="w", authority=long_session)
    with pytest.raises(InvalidCommand, match=r"authority\.session"):
        apply(state, ClaimOccurrence(1, 1, epoch, binding, T0 + 2))
    binding = binding_for(
        state, 1, namespace=LONG_NAMESPACE, worker_id=LONG_WORKER, authority=LONG_AUTHORITY
    )
    apply(state, ClaimOccurrence(1, 1, epoch, binding, T0 + 2))
    with pytest.raises(InvalidCommand, match="incarnation"):
        apply(state, Admit(binding, "i" * 33, T0 + 3))
    apply(state, Admit(binding, LONG_INCARNATION, T0 + 3))


# ---- what a valid config produces is never refused --------------------------------------------


def _valid(rule, value) -> bool:  # type: ignore[no-untyped-def]
    problems = Problems()
    rule.check(value, "x", problems)
    return not problems


@settings(max_examples=200, deadline=None)
@given(
    namespace=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,140}", fullmatch=True),
    worker=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,140}", fullmatch=True),
    session=st.from_regex(SESSION_PATTERN, fullmatch=True),
    micros=st.integers(0, 999_999),
    seconds=st.integers(0, 253_402_300_799 - 1),
)
def test_every_binding_a_valid_config_makes_passes_the_rule_2_bounds(
    namespace: str, worker: str, session: str, micros: int, seconds: int
) -> None:
    from appliance.config.runner import _remote_rule  # the config's own field rules

    fields = _remote_rule().fields
    if not (_valid(IDENT, namespace) and _valid(IDENT, worker)):
        return
    if len(session) > SESSION_BYTES_MAX or not _valid(fields["session"].rule, session):
        return
    expires = format_utc(
        datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds, microseconds=micros)
    )
    limits = Limits()
    state = SchedulerState(limits)
    apply(state, CreateSchedule(modest(1, limits), T0 - 60))
    apply(state, AcquireOwnership("voter-a", 1, T0 - 30))
    apply(state, observe_all(state, T0 + 1, T0))
    authority = Authority(expires_at=expires, timeout_seconds=300, heap_mb=128, session=session)
    binding = binding_for(state, 1, namespace=namespace, worker_id=worker, authority=authority)
    check_binding_v2(binding)
    check_incarnation_v2(uuid.uuid4().hex)


# ---- the budget at its boundary, under both rules -----------------------------------------------


def _filled(rules: int, over_bytes: int) -> tuple[SchedulerState, Observe]:
    """A store whose budget after observing one more record is GROWTH_BYTES_MAX + over_bytes."""
    limits = Limits(schedules=1024, records=4096, outstanding=1024, running=16)
    state = SchedulerState(limits)
    apply(state, CreateSchedule(modest(1, limits), T0 - 60))
    if rules == 2:
        apply(state, AdoptCharging(2))
    command = Observe(T0 + 1, (ObservedSchedule(1, state.progress[1].cursor_s, T0 + 1, (T0,), 0),))
    trial = from_json(state.to_json())
    apply(trial, command)
    record_bytes = trial.budget_bytes - state.budget_bytes
    big = "x" * 60_000
    index = 2
    while GROWTH_BYTES_MAX - state.budget_bytes - record_bytes > 64_000:
        apply(state, CreateSchedule(modest(index, limits, code=big), T0 - 60))
        index += 1
    # The last schedule's code pads the budget to the byte (its charge is linear in its length).
    probe = from_json(state.to_json())
    apply(probe, CreateSchedule(modest(index, limits, code=""), T0 - 60))
    pad = GROWTH_BYTES_MAX - record_bytes - probe.budget_bytes + over_bytes
    apply(state, CreateSchedule(modest(index, limits, code="x" * pad), T0 - 60))
    assert state.budget_bytes + record_bytes == GROWTH_BYTES_MAX + over_bytes
    return state, command


@pytest.mark.parametrize("rules", [1, 2])
def test_a_record_that_reaches_the_growth_limit_exactly_is_created(rules: int) -> None:
    state, command = _filled(rules, 0)
    report = apply(state, command).value
    assert len(report.created) == 1 and state.budget_bytes == GROWTH_BYTES_MAX
    assert state.progress[1].dropped_by(_capacity()) == 0
    reloaded_same(state)


@pytest.mark.parametrize("rules", [1, 2])
def test_one_byte_over_the_growth_limit_drops_the_record_for_capacity(rules: int) -> None:
    state, command = _filled(rules, 1)
    report = apply(state, command).value
    assert report.created == () and state.progress[1].dropped_by(_capacity()) == 1
    assert state.budget_bytes <= GROWTH_BYTES_MAX
    reloaded_same(state)


def _capacity():  # type: ignore[no-untyped-def]
    from appliance.core.state import DropReason

    return DropReason.CAPACITY


# ---- room for a burst ------------------------------------------------------------------------

BURST = 1024


def _burst_store(rules: int) -> SchedulerState:
    limits = Limits(schedules=BURST, records=4 * BURST, outstanding=BURST, running=BURST)
    state = SchedulerState(limits)
    for index in range(1, BURST + 1):
        apply(state, CreateSchedule(modest(index, limits), T0 - 60))
    apply(state, AcquireOwnership("voter-a", 1, T0 - 30))
    if rules == 2:
        apply(state, AdoptCharging(2))
    return state


def test_1024_modest_schedules_with_a_live_record_each_fit_under_rule_2_not_rule_1() -> None:
    old = _burst_store(1)
    report = apply(old, observe_all(old, T0 + 1, T0)).value
    assert len(report.created) < 700  # rule 1: about 600 fit, the rest dropped for capacity
    state = _burst_store(2)
    report = apply(state, observe_all(state, T0 + 1, T0)).value
    assert len(report.created) == BURST and state.counts().outstanding == BURST
    assert state.budget_bytes <= GROWTH_BYTES_MAX
    # Every claim, permit, Unknown note with the longest texts rule 2 admits moves bytes within
    # the charge: the budget never rises, the size stays under it.
    epoch = current_epoch(state)
    budget = state.budget_bytes
    for oid in sorted(state.occurrences):
        binding = binding_for(
            state, oid, namespace=LONG_NAMESPACE, worker_id=LONG_WORKER, authority=LONG_AUTHORITY
        )
        apply(state, ClaimOccurrence(oid, 1, epoch, binding, T0 + 2))
        apply(state, Admit(binding, LONG_INCARNATION, T0 + 3))
        apply(state, MarkUnknown(binding.invocation, "\x01" * 400, T0 + 4))
        assert state.budget_bytes <= budget
    assert state.size_bytes <= state.budget_bytes <= GROWTH_BYTES_MAX
    reloaded_same(state)


def test_the_arithmetic_in_the_docs() -> None:
    """docs/runner-core.md quotes these numbers for schedule 1024 and occurrence 1024; a change
    to any bound shows here."""
    limits = Limits(schedules=BURST, outstanding=BURST, running=BURST)
    schedule = Schedule(BURST, modest(BURST, limits), True, T0 - 60)
    schedule_charge = len(canonical_json(_schedule_json(schedule))) + 1  # "true" may be "false"
    record = new_occurrence(BURST, BURST, T0, T0 + 1)
    fitted = admission_bytes_fitted(record, None, schedule)
    assert (ADMISSION_V2_UNNAMED_BYTES, PROGRESS_BYTES_MAX) == (1592, 471)
    assert (schedule_charge, record_bytes_max(record), fitted) == (248, 1628, 1574)
    frames = sum(
        len(f"{kind}/{BURST}") + 4 for kind in ("schedule", "progress", "occurrence", "admission")
    )
    per_pair = schedule_charge + PROGRESS_BYTES_MAX + record_bytes_max(record) + fitted + frames
    v1_pair = schedule_charge + PROGRESS_BYTES_MAX + RECORD_BYTES_MAX + ADMISSION_BYTES_MAX + frames
    assert (frames, per_pair, v1_pair) == (71, 3992, 7399)
    assert BURST * per_pair < GROWTH_BYTES_MAX < BURST * v1_pair


# ---- no sequence on a created record exceeds the cap ---------------------------------------------

PROP_LIMITS = Limits(schedules=3, records=6, outstanding=5, running=4, grace_seconds=5)
NAME = st.sampled_from([None, "", "job", "\x01" * 128, "é" * 64])
action = st.tuples(
    st.sampled_from(
        [
            "observe",
            "claim",
            "claim",
            "admit",
            "admit",
            "unknown",
            "cancel",
            "fence",
            "fence_nl",
            "outcome",
            "ack",
            "switch",
            "delete",
            "acquire",
        ]
    ),
    st.integers(0, 50),
    st.integers(0, 400),
)


def _build(state: SchedulerState, kind: str, pick: int, value: int, clock_s: int, term: int):
    if kind == "switch":
        return AdoptCharging(2)
    if kind == "acquire":
        return AcquireOwnership("voter-a", term, clock_s)
    if kind == "observe":
        entries = tuple(
            ObservedSchedule(sid, state.progress[sid].cursor_s, clock_s, (clock_s - 1,), 0)
            for sid in sorted(state.schedules)
            if state.progress[sid].cursor_s < clock_s - 1
        )
        return Observe(clock_s, entries)
    if kind == "delete":  # rare: a deleted schedule's admitted records run on without it
        return DeleteSchedule(1 + pick % 3, clock_s) if value % 6 == 0 else Observe(clock_s, ())
    ids = sorted(i for i, r in state.occurrences.items() if not r.terminal or value % 9 == 0)
    if not ids or current_epoch(state) == 0:
        return Observe(clock_s, ())
    oid = ids[pick % len(ids)]
    record = state.occurrences[oid]
    try:
        binding = binding_for(
            state, oid, namespace=LONG_NAMESPACE, worker_id=LONG_WORKER, authority=LONG_AUTHORITY
        )
    except CoreError:  # the schedule was deleted: an admitted record runs on
        from appliance.core.state import admission_record

        admission = admission_record(state, oid)
        if admission is None or admission.claim is None:
            return Cancel(oid, clock_s)
        binding = replace(admission.claim, attempt=record.attempt)
    if kind == "claim":
        return ClaimOccurrence(oid, record.attempt, current_epoch(state), binding, clock_s)
    if kind == "admit":
        return Admit(binding, LONG_INCARNATION if value % 2 else "inc-1", clock_s)
    if kind == "unknown":
        return MarkUnknown(binding.invocation, "\x01" * value, clock_s)
    if kind == "cancel":
        return Cancel(oid, clock_s)
    if kind == "fence":
        return FenceAfterCancel(binding.invocation, clock_s)
    if kind == "fence_nl":
        return FenceNotLaunched(oid, record.attempt, clock_s)
    if kind == "outcome":
        outcome = ("completed", "failed", "lost", "cancelled", "timed_out")[value % 5]
        return RecordOutcome(
            oid, record.attempt, outcome, clock_s, reason="\x02" * value, execution_id="e" * value
        )
    return AcknowledgeStopped(oid, True, clock_s)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(NAME, min_size=3, max_size=3),
    start_v2=st.booleans(),
    actions=st.lists(action, min_size=5, max_size=60),
)
def test_no_command_on_a_created_record_raises_the_budget_under_either_rule(
    names, start_v2, actions
) -> None:
    state = SchedulerState(PROP_LIMITS)
    for index, name in enumerate(names, start=1):
        apply(state, CreateSchedule(modest(index, PROP_LIMITS, name=name), T0 - 60))
    apply(state, AcquireOwnership("voter-a", 1, T0 - 30))
    if start_v2:
        apply(state, AdoptCharging(2))
    replica = from_json(state.to_json())
    clock_s, term = T0, 1
    for kind, pick, value in [("observe", 0, 0), *actions]:
        clock_s += 1 + value % 90
        term += 1 if kind == "acquire" else 0
        command = _build(state, kind, pick, value, clock_s, term)
        before_json, before_budget = state.to_json(), state.budget_bytes
        wire = json.loads(json.dumps(command_to_json(command)))
        try:
            applied = apply(state, command)
        except CoreError as refused:
            assert state.to_json() == before_json and state.budget_bytes == before_budget
            with pytest.raises(type(refused)):
                apply(replica, command_from_json(wire))
            continue
        event(f"accepted {type(command).__name__} under rules {charging_rules(state)}")
        apply(replica, command_from_json(wire))
        assert replica.to_json() == state.to_json() and replica.budget_bytes == state.budget_bytes
        grows = _APPLY[type(command)][1]
        if not grows and not isinstance(command, AcquireOwnership):
            assert state.budget_bytes <= before_budget, f"{command} raised the budget"
        for name in applied.touched:
            assert len(state.part_bytes(name)) <= state._budgets[name], name
        assert state.size_bytes == len(state.to_json()) <= state.budget_bytes
        assert state.budget_bytes <= CHECKPOINT_BYTES_MAX
        reloaded_same(state)


def test_record_charge_is_exact_for_the_worst_record_of_given_fixed_fields() -> None:
    """record_bytes_max is reached: the fixed fields of a real record plus every other field at
    its worst give exactly that many bytes."""
    from appliance.core.occurrence import _worst_case_record, encode_occurrence

    worst = _worst_case_record()
    real = new_occurrence(42, 7, T0, T0 + 1)
    reached = worst._replace(
        id=real.id,
        schedule_id=real.schedule_id,
        due_s=real.due_s,
        timeline=(real.timeline[0], *worst.timeline[1:]),
    )
    assert len(encode_occurrence(reached)) == record_bytes_max(real)
    assert record_bytes_max(real) < RECORD_BYTES_MAX
    assert len(canonical_json(None)) == 4


def test_the_admission_charge_is_reached_by_the_longest_rule_2_values() -> None:
    """admission_bytes_fitted is exact: the longest claim, permit, fence and Unknown note rules 2
    admit for a record fill it to the byte (so it is neither short nor wasteful)."""
    from appliance.core.runner_parts import (
        AdmissionRecord,
        Fence,
        Permit,
        UnknownNote,
        admission_to_json,
    )

    limits = Limits()
    schedule = Schedule(7, modest(7, limits, name="\x01" * 100 + "é" * 14), True, T0 - 60)
    record = new_occurrence(42, 7, T0, T0 + 1)
    int_max, instant_max = 2**53 - 1, 253_402_300_799
    from appliance.core.admission import claim_binding

    binding = claim_binding(
        record,
        schedule.definition,
        owner="o" * 64,
        epoch=int_max,
        namespace=LONG_NAMESPACE,
        worker_id=LONG_WORKER,
        authority=LONG_AUTHORITY,
    )
    binding = replace(binding, attempt=int_max, due_time="9999-12-31T23:59:59Z")
    check_binding_v2(binding)
    longest = AdmissionRecord(
        claim=binding,
        claimed_at_s=instant_max,
        permit=Permit(int_max, LONG_INCARNATION, int_max, instant_max),
        fence=Fence(int_max, int_max, instant_max, "takeover"),
        unknown=UnknownNote(int_max, "x" * 256, instant_max),
    )
    assert len(canonical_json(admission_to_json(longest))) == admission_bytes_fitted(
        record, None, schedule
    )


@pytest.mark.parametrize("rules", [1, 2])
@pytest.mark.parametrize("over_bytes", [0, 1])
def test_run_now_sizes_its_record_by_the_same_rules_at_the_boundary(
    rules: int, over_bytes: int
) -> None:
    """``run_now`` makes room by the checkpoint's rules too: at the growth limit exactly its
    record is created, one byte over it is dropped for capacity."""
    from appliance.core.schedule_commands import RunNow

    state, _observe = _filled(rules, over_bytes)
    result = apply(state, RunNow(1, T0 + 1)).value
    if over_bytes == 0:
        assert result.occurrence_id is not None and state.budget_bytes == GROWTH_BYTES_MAX
    else:
        assert result.occurrence_id is None and result.reason == "capacity"
        assert state.budget_bytes <= GROWTH_BYTES_MAX
    reloaded_same(state)
