"""Claims with their binding, quorum admission, and the outcomes that need the binding.

Theory of operation
-------------------
The owner claims a Pending occurrence (``ClaimOccurrence``) with the full binding; the worker that
received the dispatch asks for a permit (``Admit``) and the permit exists only once that command
is committed. Admission is ONE compare-and-set over the checkpoint (SPEC §6), checked in this
order so each refusal names the rule that failed:

0. an occurrence at or below the retention floor W (``SchedulerState.retained_through``: every
   id up to it has left the checkpoint) is ``attempt_not_running`` — checked first, before the
   existing-permit rule, because the worker prunes its records of exactly those invocations
   (docs/worker.md, "Retention"): nothing at or below W may ever be admitted again;
1. the invocation already holds a permit: the same binding and the same worker incarnation get
   the *same* permit back (``existing``: the answer to it was lost); a different binding is
   ``binding_mismatch``, another incarnation ``incarnation_mismatch``. Deduplication is by
   invocation ``(namespace, schedule, occurrence, attempt)``, never by epoch;
2. a committed terminal fence for the invocation: ``fenced``;
3. the exact attempt must be the record's current one, Running (or Unknown: a lost exec
   acknowledgement does not prove the worker gave up, and granting keeps "Unknown may have run"
   true): otherwise ``attempt_not_running`` (also for a retired or never-created occurrence);
4. the binding equals the committed claim field by field: otherwise ``binding_mismatch``;
5. the claim's epoch is the current ownership epoch: otherwise ``stale_epoch`` — after a takeover
   no older claim can ever be admitted, which is what makes the takeover fence sound;
6. the grant has not expired (``at_s < expires_at``): otherwise ``grant_expired``.

A definite "not launched" (``FenceAfterCancel``, after the worker answered
``fenced_before_consume``; ``FenceDispatch``, the owner's own uncertain or unanswered dispatch) is
committed only when no permit exists for the invocation; the fence then refuses any later
admission (rule 2 comes before every other rule that could let it through). ``Admit`` and
``FenceDispatch`` of one invocation are ordered by the log: whichever commits first wins — a
committed permit refuses the fence (``permit_exists``), a committed fence refuses the permit
(``fenced``). A permit is never removed by anything but retention.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from appliance.core.amendments import check_claim_contract
from appliance.core.binding import (
    Authority,
    Binding,
    Invocation,
    binding_from_json,
    binding_to_json,
    check_binding,
    check_binding_v2,
    check_incarnation,
    check_incarnation_v2,
    check_invocation,
    due_time_matches,
    expires_at_s,
    first_difference,
    instant_text,
    invocation_from_json,
    invocation_to_json,
)
from appliance.core.commands import Claim
from appliance.core.definition import Definition
from appliance.core.live_code import code_for, digest_for
from appliance.core.occurrence import REASON_BYTES_MAX, Event, Occurrence, bound_text, transition
from appliance.core.policy_apply import FENCE_GUARDS, _claim
from appliance.core.runner_errors import (
    AttemptNotRunning,
    BindingMismatch,
    Fenced,
    GrantExpired,
    IncarnationMismatch,
    NotAcquired,
    PermitExists,
    StaleEpoch,
)
from appliance.core.runner_parts import (
    RETIRED_PART,
    AdmissionRecord,
    Fence,
    Permit,
    UnknownNote,
    admission_of,
    admission_part,
    admission_to_json,
    ownership_of,
    retired_through,
)
from appliance.core.serialisation import register_command_type
from appliance.core.state_errors import InvalidCommand
from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import CHARGING_V2, S
from appliance.core.txn import Txn, _check_instant, on_retire, register
from appliance.protocol.v1 import payload_sha256

# A new permit only for the exact current attempt in one of these states (see rule 3 above).
ADMISSION_STATES = frozenset({S.RUNNING, S.UNKNOWN})


# ---- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimOccurrence:
    """Pending → Running for ``attempt``, bound to ``binding``, by the owner of ``epoch``."""

    occurrence_id: int
    attempt: int
    epoch: int
    binding: Binding
    at_s: int


@dataclass(frozen=True)
class Admit:
    """A worker incarnation asks for the permit of ``binding``'s invocation."""

    binding: Binding
    incarnation: str
    at_s: int


@dataclass(frozen=True)
class MarkUnknown:
    """A lost acknowledgement or an ambiguous send: the attempt may have run."""

    invocation: Invocation
    reason: str
    at_s: int


@dataclass(frozen=True)
class FenceAfterCancel:
    """The worker answered ``fenced_before_consume``: fence the invocation (not launched)."""

    invocation: Invocation
    at_s: int


@dataclass(frozen=True)
class FenceDispatch:
    """The owner of ``epoch`` fences its own claim that holds no permit (an uncertain or
    unanswered dispatch): definitely not launched, the occurrence is Pending again as the next
    attempt (no retry spent), claimable from ``not_before_s`` (None: at once)."""

    invocation: Invocation
    epoch: int
    reason: str
    not_before_s: int | None
    at_s: int


@dataclass(frozen=True)
class Granted:
    """The value of an applied :class:`Admit`: the permit, and whether it existed already."""

    invocation: Invocation
    incarnation: str
    granted_epoch: int
    granted_at_s: int
    existing: bool


def permit_to_json(granted: Granted) -> dict:
    """The ``permit`` object of the admission answer (docs/protocol.md)."""
    return {
        "invocation": invocation_to_json(granted.invocation),
        "incarnation": granted.incarnation,
        "granted_epoch": granted.granted_epoch,
        "granted_at": instant_text(granted.granted_at_s),
    }


# ---- helpers -----------------------------------------------------------------------------------


def _record_and_admission(txn: Txn, inv: Invocation) -> tuple[Occurrence, AdmissionRecord]:
    record = txn.require_occurrence(inv.occurrence_id, inv.attempt)
    if record.schedule_id != inv.schedule_id:
        raise InvalidCommand(
            f"invocation.schedule_id: occurrence {record.id} belongs to schedule "
            f"{record.schedule_id}, not {inv.schedule_id}"
        )
    admission = admission_of(txn.extra, record.id) or AdmissionRecord()
    claim = admission.claim_for(inv.attempt)
    if claim is not None and claim.namespace != inv.namespace:
        raise InvalidCommand(f"invocation.namespace: the claim's namespace is {claim.namespace!r}")
    return record, admission


def _put_admission(txn: Txn, occurrence_id: int, admission: AdmissionRecord) -> None:
    txn.put_extra(admission_part(occurrence_id), admission_to_json(admission))


def _current_epoch(txn: Txn) -> int:
    ownership = ownership_of(txn.extra)
    return 0 if ownership is None else ownership.epoch


# ---- applies -----------------------------------------------------------------------------------


@register(ClaimOccurrence)
def _claim_occurrence(txn: Txn, cmd: ClaimOccurrence) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    check_binding(cmd.binding)
    if txn.rules == CHARGING_V2:
        check_binding_v2(cmd.binding)  # the bounds the record's reserve was sized by
    b = cmd.binding
    ownership = ownership_of(txn.extra)
    if ownership is None:
        raise NotAcquired("claim: no owner has acquired this store")
    if cmd.epoch != ownership.epoch:
        raise StaleEpoch(f"epoch: {cmd.epoch} is not the current ownership epoch")
    expected = {
        "epoch": cmd.epoch,
        "owner": ownership.node,
        "occurrence_id": cmd.occurrence_id,
        "attempt": cmd.attempt,
    }
    for field, value in expected.items():
        if getattr(b, field) != value:
            raise BindingMismatch(f"binding.{field}: {getattr(b, field)!r}, expected {value!r}")
    record = txn.require_occurrence(cmd.occurrence_id, cmd.attempt)
    schedule = txn.schedule(record.schedule_id)
    if schedule is None and txn.rules == CHARGING_V2:
        raise BindingMismatch(f"binding.schedule_id: schedule {record.schedule_id} was deleted")
    if b.schedule_id != record.schedule_id:
        raise BindingMismatch(f"binding.schedule_id: occurrence is of {record.schedule_id}")
    if schedule is not None:
        definition = schedule.definition
        if b.schedule_name != definition.name:
            raise BindingMismatch("binding.schedule_name: not the schedule's name")
        # The code the occurrence was created with (an update keeps it: live_code.py).
        if b.payload_sha256 != digest_for(schedule, record.id):
            raise BindingMismatch(
                "binding.payload_sha256: not the SHA-256 of the occurrence's code"
            )
    if not due_time_matches(b.due_time, record.due_s):
        raise BindingMismatch(
            f"binding.due_time: the occurrence is due {instant_text(record.due_s)}"
        )
    check_claim_contract(txn.extra, b)  # the amended worker id and authority (core/amendments.py)
    if cmd.at_s >= expires_at_s(b.authority.expires_at):
        raise GrantExpired(f"authority.expires_at: the grant expired ({b.authority.expires_at})")
    claimed = _claim(txn, Claim(cmd.occurrence_id, cmd.attempt, cmd.at_s))
    previous = admission_of(txn.extra, record.id) or AdmissionRecord()
    # The permit and the Unknown note belong to an earlier attempt; the latest fence is kept.
    _put_admission(
        txn, record.id, AdmissionRecord(claim=b, claimed_at_s=cmd.at_s, fence=previous.fence)
    )
    return claimed


def _refuse_missing(txn: Txn, occurrence_id: int) -> None:
    if occurrence_id <= retired_through(txn.extra):
        raise AttemptNotRunning(f"occurrence {occurrence_id}: retired from retention")
    if occurrence_id < txn.state.next_occurrence_id:
        raise AttemptNotRunning(f"occurrence {occurrence_id}: retired from retention")
    raise AttemptNotRunning(f"occurrence {occurrence_id}: never created")


@register(Admit)
def _admit(txn: Txn, cmd: Admit) -> Granted:
    _check_instant("at_s", cmd.at_s)
    check_binding(cmd.binding)
    check_incarnation(cmd.incarnation)
    if txn.rules == CHARGING_V2:
        check_incarnation_v2(cmd.incarnation)
    b = cmd.binding
    floor = txn.state.retained_through()
    if b.occurrence_id <= floor:  # rule 0: before the existing-permit rule (module doc)
        raise AttemptNotRunning(
            f"occurrence {b.occurrence_id}: retired from retention (every occurrence through "
            f"{floor} left the checkpoint)"
        )
    record = txn.occurrence(b.occurrence_id)
    if record is None:
        _refuse_missing(txn, b.occurrence_id)
        raise AttemptNotRunning("unreachable")  # _refuse_missing always raises
    admission = admission_of(txn.extra, record.id) or AdmissionRecord()
    permit = admission.permit_for(b.attempt)
    claim = admission.claim_for(b.attempt)
    if permit is not None:
        difference = "claim" if claim is None else first_difference(claim, b)
        if difference is not None:
            raise BindingMismatch(f"binding.{difference}: differs from the admitted claim")
        if permit.incarnation != cmd.incarnation:
            raise IncarnationMismatch("incarnation: the permit belongs to another incarnation")
        return Granted(
            b.invocation, permit.incarnation, permit.granted_epoch, permit.granted_at_s, True
        )
    if admission.fence_for(b.attempt) is not None:
        raise Fenced(f"occurrence {record.id} attempt {b.attempt}: fenced (never launched)")
    if record.attempt != b.attempt or record.state not in ADMISSION_STATES:
        raise AttemptNotRunning(
            f"occurrence {record.id}: attempt {record.attempt} is {record.state.value}, "
            f"asked for attempt {b.attempt}"
        )
    if claim is None:
        raise BindingMismatch(f"occurrence {record.id}: attempt {b.attempt} has no bound claim")
    difference = first_difference(claim, b)
    if difference is not None:
        raise BindingMismatch(f"binding.{difference}: differs from the committed claim")
    epoch = _current_epoch(txn)
    if claim.epoch != epoch:
        raise StaleEpoch(f"epoch: the claim is of epoch {claim.epoch}, the current one is {epoch}")
    if cmd.at_s >= expires_at_s(b.authority.expires_at):
        raise GrantExpired(f"authority.expires_at: the grant expired ({b.authority.expires_at})")
    granted = Permit(b.attempt, cmd.incarnation, epoch, cmd.at_s)
    _put_admission(txn, record.id, replace(admission, permit=granted))
    return Granted(b.invocation, cmd.incarnation, epoch, cmd.at_s, False)


@register(MarkUnknown)
def _mark_unknown(txn: Txn, cmd: MarkUnknown) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    check_invocation(cmd.invocation)
    if not isinstance(cmd.reason, str):
        raise InvalidCommand("reason: must be a string")
    record, admission = _record_and_admission(txn, cmd.invocation)
    result = transition(record, Event.UNREACHABLE, cmd.at_s)
    txn.put_occurrence(result)
    note = UnknownNote(record.attempt, bound_text(cmd.reason, REASON_BYTES_MAX), cmd.at_s)
    _put_admission(txn, record.id, replace(admission, unknown=note))
    return result


@register(FenceAfterCancel)
def _fence_after_cancel(txn: Txn, cmd: FenceAfterCancel) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    check_invocation(cmd.invocation)
    record, admission = _record_and_admission(txn, cmd.invocation)
    if record.state is not S.CANCELLING:
        raise InvalidCommand(
            f"occurrence {record.id}: a cancel fence needs Cancelling, not {record.state.value}"
        )
    if admission.permit_for(record.attempt) is not None:
        raise PermitExists(
            f"occurrence {record.id} attempt {record.attempt}: a permit exists, so "
            "'not launched' cannot be proven"
        )
    result = transition(record, Event.FENCED_NOT_LAUNCHED, cmd.at_s)
    txn.put_occurrence(result)
    fence = Fence(record.attempt, _current_epoch(txn), cmd.at_s, "cancel")
    _put_admission(txn, record.id, replace(admission, fence=fence))
    return result


@register(FenceDispatch)
def _fence_dispatch(txn: Txn, cmd: FenceDispatch) -> Occurrence:
    _check_instant("at_s", cmd.at_s)
    check_invocation(cmd.invocation)
    if not isinstance(cmd.reason, str):
        raise InvalidCommand("reason: must be a string")
    if cmd.not_before_s is not None:
        _check_instant("not_before_s", cmd.not_before_s)
        if cmd.not_before_s < cmd.at_s:
            raise InvalidCommand("not_before_s: must not be before at_s")
    record, admission = _record_and_admission(txn, cmd.invocation)
    epoch = _current_epoch(txn)
    if cmd.epoch != epoch:
        raise StaleEpoch(f"epoch: {cmd.epoch} is not the current ownership epoch {epoch}")
    if record.state not in ADMISSION_STATES:
        raise AttemptNotRunning(
            f"occurrence {record.id}: attempt {record.attempt} is {record.state.value}; "
            "a dispatch fence needs Running or Unknown"
        )
    claim = admission.claim_for(record.attempt)
    if claim is None or claim.epoch != epoch:
        raise StaleEpoch(
            f"occurrence {record.id} attempt {record.attempt}: not claimed in epoch {epoch}"
        )
    if admission.permit_for(record.attempt) is not None:
        raise PermitExists(
            f"occurrence {record.id} attempt {record.attempt}: a permit exists, so "
            "'not launched' cannot be proven"
        )
    result = transition(record, Event.FENCED_NOT_LAUNCHED, cmd.at_s)
    if result.state is S.PENDING and txn.schedule(record.schedule_id) is None:
        result = transition(result, Event.SCHEDULE_DELETED, cmd.at_s)
    elif result.state is S.PENDING and cmd.not_before_s is not None:
        result = result._replace(not_before_s=cmd.not_before_s)  # the owner's backoff
    txn.put_occurrence(result)
    fence = Fence(record.attempt, epoch, cmd.at_s, "dispatch")
    _put_admission(txn, record.id, replace(admission, fence=fence))
    return result


def _no_fence_over_a_permit(txn: Txn, record: Occurrence) -> None:
    """The policy core's ``FenceNotLaunched`` is a proof of "never launched": refused, like
    ``FenceAfterCancel``, when the attempt holds a permit."""
    admission = admission_of(txn.extra, record.id)
    if admission is not None and admission.permit_for(record.attempt) is not None:
        raise PermitExists(
            f"occurrence {record.id} attempt {record.attempt}: a permit exists, so "
            "'not launched' cannot be proven"
        )


FENCE_GUARDS.append(_no_fence_over_a_permit)


@on_retire
def _retire_admission(txn: Txn, occurrence_id: int) -> None:
    """Claims, permits and fences retire with their record; the watermark keeps them refused."""
    name = admission_part(occurrence_id)
    if txn.extra(name) is not None:
        txn.delete_extra(name)
    if occurrence_id > retired_through(txn.extra):
        txn.put_extra(RETIRED_PART, {"through": occurrence_id})


# ---- queries -----------------------------------------------------------------------------------


def binding_for(
    state: SchedulerState,
    occurrence_id: int,
    *,
    namespace: str,
    worker_id: str,
    authority: Authority,
) -> Binding:
    """The binding the current owner would claim the occurrence's current attempt with (the
    loop's helper; the apply checks it again)."""
    ownership = ownership_of(state.extra.get)
    if ownership is None:
        raise NotAcquired("binding: no owner has acquired this store")
    record = state.occurrences.get(occurrence_id)
    if record is None:
        raise InvalidCommand(f"occurrence_id: no occurrence {occurrence_id}")
    schedule = state.schedules.get(record.schedule_id)
    if schedule is None:
        raise InvalidCommand(f"occurrence {occurrence_id}: its schedule was deleted")
    return claim_binding(
        record,
        schedule.definition,
        code=code_for(schedule, record.id),
        owner=ownership.node,
        epoch=ownership.epoch,
        namespace=namespace,
        worker_id=worker_id,
        authority=authority,
    )


def claim_binding(
    record: Occurrence,
    definition: Definition,
    *,
    code: str | None = None,
    owner: str,
    epoch: int,
    namespace: str,
    worker_id: str,
    authority: Authority,
) -> Binding:
    """The binding of ``record``'s current attempt: its committed fields plus the owner's;
    ``code`` is the occurrence's code when an update replaced the definition's."""
    return Binding(
        namespace=namespace,
        schedule_id=record.schedule_id,
        schedule_name=definition.name,
        occurrence_id=record.id,
        attempt=record.attempt,
        owner=owner,
        epoch=epoch,
        worker_id=worker_id,
        payload_sha256=payload_sha256(definition.code if code is None else code),
        due_time=instant_text(record.due_s),
        authority=authority,
    )


def admission_record(state: SchedulerState, occurrence_id: int) -> AdmissionRecord | None:
    return admission_of(state.extra.get, occurrence_id)


def needs_cancelling_reader(state: SchedulerState) -> bool:
    """True while any occurrence is Cancelling: the store must refuse binaries that cannot read
    it (SPEC §4 rollback protection); the process raises the store's minimum reader version."""
    return state.counts().by_state[S.CANCELLING.value] > 0


# ---- wire codecs -------------------------------------------------------------------------------

register_command_type(ClaimOccurrence, {"binding": (binding_to_json, binding_from_json)})
register_command_type(Admit, {"binding": (binding_to_json, binding_from_json)})
register_command_type(MarkUnknown, {"invocation": (invocation_to_json, invocation_from_json)})
register_command_type(FenceAfterCancel, {"invocation": (invocation_to_json, invocation_from_json)})
register_command_type(FenceDispatch, {"invocation": (invocation_to_json, invocation_from_json)})
