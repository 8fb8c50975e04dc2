"""The applies of the policy commands: schedules, observation, claim, outcomes, cancellation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from appliance.core.claims import ClaimBlock, claim_block
from appliance.core.commands import (
    AcknowledgeStopped,
    Cancel,
    Claim,
    ConfirmCancelled,
    CreateSchedule,
    DeleteSchedule,
    DisableSchedule,
    FenceNotLaunched,
    Observe,
    ObservedSchedule,
    ObserveReport,
    RecordOutcome,
    RetryDue,
)
from appliance.core.definition import (
    JITTER_SECONDS_MAX,
    Definition,
    MissedCatchUp,
    OverlapPolicy,
)
from appliance.core.errors import CoreError
from appliance.core.occurrence import (
    INT_MAX,
    OUTCOME_EVENTS,
    Event,
    Occurrence,
    new_occurrence,
    transition,
)
from appliance.core.state_errors import (
    ClaimRefused,
    InvalidCommand,
    RetryNotDue,
    ScheduleLimitReached,
)
from appliance.core.state_parts import (
    DROP_REASONS,
    PAUSED_PART,
    RECENT_DROPS_MAX,
    DropEvent,
    DropReason,
    Progress,
    S,
    Schedule,
)
from appliance.core.txn import Txn, _check_id, _check_instant, register


def check_definition_limits(txn: Txn, definition: Definition) -> None:
    """What a parsed definition must satisfy against the replicated limits, at apply time."""
    missed = definition.policy.missed
    if isinstance(missed, MissedCatchUp) and not 1 <= missed.cap <= txn.limits.outstanding:
        raise InvalidCommand("definition.policy.missed.CatchUp.cap: must be in [1, outstanding]")
    jitter_s = definition.policy.jitter_seconds
    if type(jitter_s) is not int or not 0 <= jitter_s <= JITTER_SECONDS_MAX:
        raise InvalidCommand(
            f"definition.policy.jitter_seconds: must be an integer in [0, {JITTER_SECONDS_MAX}]"
        )


@register(CreateSchedule, grows=True)
def _create_schedule(txn: Txn, cmd: CreateSchedule) -> int:
    _check_instant("at_s", cmd.at_s)
    if not isinstance(cmd.definition, Definition):
        raise InvalidCommand("definition: must be a parsed Definition")
    check_definition_limits(txn, cmd.definition)
    if txn.schedule_count >= txn.limits.schedules:
        raise ScheduleLimitReached(f"schedules: limit of {txn.limits.schedules} schedules reached")
    schedule_id = txn.next_schedule_id
    if schedule_id > INT_MAX:
        raise ScheduleLimitReached("schedules: id space exhausted")
    txn.next_schedule_id += 1
    txn.put_schedule(Schedule(schedule_id, cmd.definition, True, cmd.at_s))
    # Creation schedules strictly after creation time: the cursor starts at the creation instant.
    txn.put_progress(schedule_id, Progress(cursor_s=cmd.at_s))
    txn.make_room()
    return schedule_id


@register(DisableSchedule)
def _disable_schedule(txn: Txn, cmd: DisableSchedule) -> bool:
    _check_instant("at_s", cmd.at_s)
    schedule = txn.require_schedule(cmd.schedule_id)
    if not schedule.enabled:
        return False
    txn.put_schedule(replace(schedule, enabled=False))
    return True


@register(DeleteSchedule)
def _delete_schedule(txn: Txn, cmd: DeleteSchedule) -> tuple[int, ...]:
    """Remove the definition; never-admitted (Pending) occurrences end Cancelled, since nothing
    can dispatch them without the code; admitted ones run on to a terminal state."""
    _check_instant("at_s", cmd.at_s)
    txn.require_schedule(cmd.schedule_id)
    cancelled = txn.state.pending_ids(cmd.schedule_id)
    for oid in cancelled:
        record = txn.require_occurrence(oid)
        txn.put_occurrence(transition(record, Event.SCHEDULE_DELETED, cmd.at_s))
    txn.delete_schedule(cmd.schedule_id)
    return cancelled


def _validate_entry(entry: ObservedSchedule, seen: set[int]) -> None:
    if not isinstance(entry, ObservedSchedule):
        raise InvalidCommand("entries: must be ObservedSchedule values")
    _check_id("schedule_id", entry.schedule_id)
    if entry.schedule_id in seen:
        raise InvalidCommand(f"entries: schedule {entry.schedule_id} appears twice")
    seen.add(entry.schedule_id)
    _check_instant("base_cursor_s", entry.base_cursor_s)
    _check_instant("cursor_s", entry.cursor_s)
    if entry.cursor_s < entry.base_cursor_s:
        raise InvalidCommand("cursor_s: must not be before base_cursor_s")
    if type(entry.missed) is not int or not 0 <= entry.missed <= INT_MAX:
        raise InvalidCommand("missed: must be a non-negative integer")
    previous = entry.base_cursor_s
    for slot in entry.slots_s:
        _check_instant("slots_s", slot)
        if not previous < slot <= entry.cursor_s:
            raise InvalidCommand("slots_s: must increase strictly within (base_cursor_s, cursor_s]")
        previous = slot
    if entry.not_before_s:
        if len(entry.not_before_s) != len(entry.slots_s):
            raise InvalidCommand("not_before_s: must have one instant per slot")
        for slot, not_before in zip(entry.slots_s, entry.not_before_s, strict=True):
            _check_instant("not_before_s", not_before)
            if not slot <= not_before <= slot + JITTER_SECONDS_MAX:
                raise InvalidCommand(
                    f"not_before_s: must be in [slot, slot + {JITTER_SECONDS_MAX}] for each slot"
                )


def _admit_slot(txn: Txn, record: Occurrence, skip_overlap: bool) -> DropReason | None:
    """Overlap, then capacity: why this slot cannot become ``record``, or None."""
    if skip_overlap and txn.nonterminal(record.schedule_id):
        return DropReason.OVERLAP
    if txn.outstanding >= txn.limits.outstanding:
        return DropReason.CAPACITY
    extra_budget = len(_OCCURRENCE_PREFIX) + len(str(record.id)) + 4
    extra_budget += txn.new_record_charge(record)  # by the checkpoint's charging rules
    if not txn.make_room(extra_budget, extra_records=1):
        return DropReason.CAPACITY
    return None


_OCCURRENCE_PREFIX = "occurrence/"


def _saturating(a: int, b: int) -> int:
    return min(a + b, INT_MAX)


@register(Observe, grows=True)
def _observe(txn: Txn, cmd: Observe) -> ObserveReport:
    _check_instant("at_s", cmd.at_s)
    seen: set[int] = set()
    for entry in cmd.entries:
        _validate_entry(entry, seen)
    at_s = cmd.at_s
    if txn.extra(PAUSED_PART) is not None:
        # Paused: nothing is selected and no cursor moves; resume decides about the span.
        ignored = tuple((entry.schedule_id, "paused") for entry in cmd.entries)
        return ObserveReport((), (), ignored, ())
    created: list[tuple[int, int, int]] = []
    dropped: list[tuple[int, DropReason, int]] = []
    ignored: list[tuple[int, str]] = []
    for entry in cmd.entries:
        schedule_id = entry.schedule_id
        schedule = txn.schedule(schedule_id)
        if schedule is None:
            ignored.append((schedule_id, "deleted"))
            continue
        if not schedule.enabled:
            ignored.append((schedule_id, "disabled"))
            continue
        progress = txn.progress(schedule_id)
        if progress is None:
            raise CoreError(f"invariant: schedule {schedule_id} has no progress")
        cursor_s = progress.cursor_s
        if entry.cursor_s <= cursor_s:
            ignored.append((schedule_id, "stale"))
            continue
        # The missed count is exact only for a plan made from this very cursor; a replayed or
        # overlapping plan keeps its unconsumed slots but not its count.
        missed = entry.missed if entry.base_cursor_s == cursor_s else 0
        overlap = capacity = 0
        skip_overlap = schedule.definition.policy.overlap is OverlapPolicy.SKIP
        waits = entry.not_before_s
        jitter_s = schedule.definition.policy.jitter_seconds if waits else 0
        for index, slot in enumerate(entry.slots_s):
            if slot <= cursor_s:
                continue  # consumed already: a slot is never armed twice
            # A plan made before an update lowered the jitter waits at most the new jitter.
            not_before = min(waits[index], slot + jitter_s) if waits else None
            # A jittered record waits (like a retry) until its instant, unless it has passed.
            wait_s = not_before if not_before is not None and not_before > at_s else None
            occurrence_id = txn.next_occurrence_id
            record = new_occurrence(occurrence_id, schedule_id, slot, at_s, wait_s)
            reason = _admit_slot(txn, record, skip_overlap)
            if reason is DropReason.OVERLAP:
                overlap += 1
            elif reason is DropReason.CAPACITY:
                capacity += 1
            else:
                txn.next_occurrence_id += 1
                txn.add_occurrence(record)
                created.append((schedule_id, occurrence_id, slot))
        totals, recent = progress.dropped, progress.recent
        if missed or overlap or capacity:
            counts = (missed, overlap, capacity)  # in DROP_REASONS order
            for reason, count in zip(DROP_REASONS, counts, strict=True):
                if count:
                    recent = (*recent, DropEvent(at_s, reason, count))
                    dropped.append((schedule_id, reason, count))
            totals = tuple(  # type: ignore[assignment]
                _saturating(n, c) for n, c in zip(totals, counts, strict=True)
            )
            recent = recent[-RECENT_DROPS_MAX:]
        txn.put_progress(schedule_id, Progress(entry.cursor_s, totals, recent))
    return ObserveReport(tuple(created), tuple(dropped), tuple(ignored), tuple(txn.retired))


@register(Claim)
def _claim(txn: Txn, cmd: Claim) -> Occurrence:
    """Pending → Running. The running limit and the overlap order gate here; they never drop."""
    _check_instant("at_s", cmd.at_s)
    record = txn.require_occurrence(cmd.occurrence_id, cmd.attempt)
    if record.state is S.PENDING:
        if txn.extra(PAUSED_PART) is not None:
            raise ClaimRefused(f"occurrence {record.id}: scheduling is paused (resume first)")
        schedule = txn.schedule(record.schedule_id)
        # The committed Pending ids; empty only for a record created in this very apply
        # (ObserveAndClaim claims one only when it is its schedule's sole live record).
        pending = txn.state.pending_ids(record.schedule_id)
        head = pending[0] if pending else record.id
        busy = txn.state._index.reserving[record.schedule_id]
        overlap = (
            OverlapPolicy.CONCURRENT if schedule is None else schedule.definition.policy.overlap
        )
        block = claim_block(
            retry_waiting=record.retry_waiting,
            running=txn.running,
            running_max=txn.limits.running,
            overlap=overlap,
            first_in_line=not busy and head == record.id,
        )
        if block is ClaimBlock.RETRY_WAITING:
            raise RetryNotDue(f"occurrence {record.id}: retry-waiting until {record.not_before_s}")
        if block is ClaimBlock.RUNNING_LIMIT:
            raise ClaimRefused(f"running: limit of {txn.limits.running} reached")
        if schedule is None:
            raise ClaimRefused(f"occurrence {record.id}: its schedule was deleted")
        if block is ClaimBlock.OVERLAP:
            why = "schedule has active work" if busy else f"occurrence {head} is first"
            raise ClaimRefused(f"occurrence {record.id}: {why}")
    claimed = transition(record, Event.CLAIM, cmd.at_s)
    txn.put_occurrence(claimed)
    return claimed


@register(RecordOutcome)
def _record_outcome(txn: Txn, cmd: RecordOutcome) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    try:
        event = Event(cmd.outcome)
    except ValueError:
        event = None
    if event not in OUTCOME_EVENTS:
        outcomes = ", ".join(sorted(e.value for e in OUTCOME_EVENTS))
        raise InvalidCommand(f"outcome: must be one of {outcomes}")
    for field, value in (("reason", cmd.reason), ("execution_id", cmd.execution_id)):
        if value is not None and not isinstance(value, str):
            raise InvalidCommand(f"{field}: must be a string or null")
    record = txn.require_occurrence(cmd.occurrence_id, cmd.attempt)
    result = transition(record, event, cmd.at_s, reason=cmd.reason, execution_id=cmd.execution_id)
    # Only a confirmed failure of work nobody asked to stop retries (Cancelling + failed is final).
    if result.state is S.FAILED and record.state in (S.RUNNING, S.UNKNOWN):
        schedule = txn.schedule(record.schedule_id)
        retry = schedule.definition.policy.retry if schedule is not None else None
        if retry is not None and result.retries_used < retry.max_retries:
            result = transition(
                result, Event.RETRY, cmd.at_s, retry_delay_seconds=retry.delay_seconds
            )
    txn.put_occurrence(result)
    return result


@register(Cancel)
def _cancel(txn: Txn, cmd: Cancel) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    result = transition(txn.require_occurrence(cmd.occurrence_id), Event.CANCEL, cmd.at_s)
    txn.put_occurrence(result)
    return result


@register(ConfirmCancelled)
def _confirm_cancelled(txn: Txn, cmd: ConfirmCancelled) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    record = txn.require_occurrence(cmd.occurrence_id, cmd.attempt)
    result = transition(record, Event.CANCEL_CONFIRMED, cmd.at_s)
    txn.put_occurrence(result)
    return result


@register(RetryDue)
def _retry_due(txn: Txn, cmd: RetryDue) -> tuple[int, ...]:
    """Make every retry whose not-before is at or before ``at_s`` claimable."""
    _check_instant("at_s", cmd.at_s)
    ready = []
    for oid in txn.state.retry_waiting_ids():
        record = txn.require_occurrence(oid)
        if record.not_before_s is not None and record.not_before_s <= cmd.at_s:
            # A retry has spent one; a record that never ran waited for its jittered instant.
            event = Event.RETRY_DUE if record.retries_used else Event.JITTER_DUE
            txn.put_occurrence(transition(record, event, cmd.at_s))
            ready.append(oid)
    return tuple(ready)


# ``guard(txn, record)`` raises when the record's attempt cannot be proven never launched.
FENCE_GUARDS: list[Callable[[Txn, Occurrence], None]] = []


@register(FenceNotLaunched)
def _fence_not_launched(txn: Txn, cmd: FenceNotLaunched) -> Occurrence:
    """A provably never-admitted attempt: claim again as attempt + 1, no retry spent."""
    _check_instant("at_s", cmd.at_s)
    record = txn.require_occurrence(cmd.occurrence_id, cmd.attempt)
    for guard in FENCE_GUARDS:
        guard(txn, record)  # e.g. the runner's: no fence where a permit exists
    result = transition(record, Event.FENCED_NOT_LAUNCHED, cmd.at_s)
    if result.state is S.PENDING and txn.schedule(record.schedule_id) is None:
        result = transition(result, Event.SCHEDULE_DELETED, cmd.at_s)
    txn.put_occurrence(result)
    return result


@register(AcknowledgeStopped)
def _acknowledge_stopped(txn: Txn, cmd: AcknowledgeStopped) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    record = txn.require_occurrence(cmd.occurrence_id)
    result = transition(
        record,
        Event.ACKNOWLEDGE_STOPPED,
        cmd.at_s,
        attested=cmd.dispatcher_and_work_quiesced is True,
    )
    txn.put_occurrence(result)
    return result
