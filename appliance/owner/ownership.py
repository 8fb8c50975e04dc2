"""Ownership, claims and admission: pure helpers that turn the core's ownership commands and
results into what the owner core and the admission route need.

Theory of operation (SPEC §6 "Ownership", "Admission"; the rules live in appliance.core.ownership
and appliance.core.admission): after the term barrier the new leader commits
``AcquireOwnership`` — a new epoch, and in the same apply the takeover (older-epoch attempts
without a permit are fenced and return to Pending as the next attempt; attempts with a permit are
listed for re-observation, Cancelling ones for resumption). On a new store the first owner then
commits ``SeedInitialSchedules``. Claims carry the full binding (``ClaimOccurrence``); admission
is the committed ``Admit`` compare-and-set, answered only after its commit. The sequence itself
(barrier, acquire, seed) is the owner core's (appliance/owner/owner.py); these functions read
the committed state they are given and build commands, nothing else: among them
``committed_view`` (what the committed state says about a dispatched attempt, for
``dispatch_outcome``), the owner's own dispatch fence (``FenceDispatch``) and the evidence
``acknowledge_stopped`` answers with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from appliance.core import state as core
from appliance.core.binding import Invocation, binding_from_json, binding_to_json
from appliance.core.errors import CoreError
from appliance.core.occurrence import Occurrence
from appliance.owner.applied import Accepted, Refused
from appliance.owner.dispatch_outcome import Committed, Fence
from appliance.protocol import v1


@dataclass(frozen=True)
class Acquired:
    epoch: int
    reobserve: tuple[int, ...]
    resume_cancelling: tuple[int, ...]
    fenced: tuple[int, ...] = ()


class OwnershipRefused(CoreError):
    """The ownership transition was committed but refused (e.g. a stale term)."""


def acquired_of(takeover: core.Takeover) -> Acquired:
    return Acquired(
        takeover.epoch,
        tuple(takeover.reobserve),
        tuple(takeover.resume_cancelling),
        tuple(oid for oid, _attempt in takeover.fenced),
    )


def binding_of(st: core.SchedulerState, record: Occurrence) -> dict[str, Any] | None:
    """The committed claim's binding of the record's current attempt, as wire JSON."""
    admission = core.admission_record(st, record.id)
    claim = None if admission is None else admission.claim_for(record.attempt)
    return None if claim is None else binding_to_json(claim)


def claim_command(record: Occurrence, binding: Mapping[str, Any], at_s: int) -> Any:
    return core.ClaimOccurrence(
        record.id, record.attempt, binding["epoch"], binding_from_json(binding), at_s
    )


def permit_may_exist(st: core.SchedulerState, occurrence_id: int, attempt: int) -> bool:
    admission = core.admission_record(st, occurrence_id)
    return admission is not None and admission.permit_for(attempt) is not None


def invocation_of(namespace: str, record: Occurrence) -> Invocation:
    return Invocation(namespace, record.schedule_id, record.id, record.attempt)


def mark_unknown_command(namespace: str, record: Occurrence, reason: str, at_s: int) -> Any:
    return core.MarkUnknown(invocation_of(namespace, record), reason, at_s)


def committed_view(
    st: core.SchedulerState,
    record: Occurrence,
    *,
    epoch_held: bool,
    grant_expired: bool,
) -> Committed:
    """What the committed state says about ``record``'s current attempt; the owner adds whether
    it holds the binding's epoch and whether the grant has expired."""
    admission = core.admission_record(st, record.id)
    permit = None if admission is None else admission.permit_for(record.attempt)
    described = None
    if permit is not None:
        described = (
            f"granted in epoch {permit.granted_epoch} to worker incarnation {permit.incarnation}"
        )
    return Committed(
        state=record.state,
        permit=described,
        epoch_held=epoch_held,
        grant_expired=grant_expired,
        fenced_before=max(0, record.attempt - 1 - record.retries_used),
    )


def fence_dispatch_command(
    namespace: str, epoch: int, record: Occurrence, fence: Fence, at_s: int
) -> Any:
    not_before = at_s + fence.backoff_s if fence.backoff_s > 0 else None
    return core.FenceDispatch(
        invocation_of(namespace, record), epoch, fence.reason, not_before, at_s
    )


def unknown_evidence(st: core.SchedulerState, occurrence_id: int) -> dict[str, Any]:
    """Why the record's current attempt was Unknown, and whether a permit was committed: what
    ``acknowledge_stopped`` answers with, so the attestation is made knowing the evidence."""
    record = st.occurrences.get(occurrence_id)
    if record is None:
        return {}
    admission = core.admission_record(st, occurrence_id)
    note = None if admission is None else admission.unknown
    reason = note.reason if note is not None and note.attempt == record.attempt else None
    permit = None if admission is None else admission.permit_for(record.attempt)
    return {
        "attempt": record.attempt,
        "unknown_reason": reason or record.failure_reason,
        "permit_committed": permit is not None,
    }


def fence_after_cancel_command(namespace: str, record: Occurrence, at_s: int) -> Any:
    return core.FenceAfterCancel(invocation_of(namespace, record), at_s)


def admit_command(
    binding: Mapping[str, Any], incarnation: str, at_s: int
) -> Any | tuple[int, dict[str, Any]]:
    """The ``Admit`` command to propose, or a definite 403 answer for a malformed binding."""
    try:
        parsed = binding_from_json(binding)
    except CoreError as err:
        return 403, v1.error_document("binding_mismatch", str(err))
    return core.Admit(parsed, incarnation, at_s)


def admit_answer(result: Accepted | Refused) -> tuple[int, dict[str, Any]]:
    """The admission route's answer for a committed ``Admit``: the permit, or 403 with a code."""
    if isinstance(result, Refused):
        code = getattr(result.error, "code", None)
        admission = isinstance(result.error, core.AdmissionRefused)
        if not admission or code not in v1.ADMIT_REFUSED_CODES:
            code = "binding_mismatch"  # a malformed request for a permit: refused, definitely
        return 403, v1.error_document(code, result.message)
    granted: core.Granted = result.value
    body: dict[str, Any] = {"permit": core.permit_to_json(granted)}
    if granted.existing:
        body["existing"] = True
    return 200, body
