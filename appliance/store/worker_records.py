"""The worker store's records and the rules of every transition, without storage.

Theory of operation: ``WorkerStore`` (SQLite, appliance/store/worker_store.py) and
``MemoryWorkerStore`` (appliance/worker/memory_store.py, what the system simulator runs) keep the
same promise — reserve -> record_permit -> consume at most once, the fence, the receipt,
execution records that never change once finished. Each rule here takes the record as loaded
(``None`` when nothing was ever recorded) and what the call asks, and returns the record to write
with ``changed`` False when the call changes nothing (a repeat), or raises
``WorkerRecordRefused`` naming the rule. The stores only load, write in one transaction and sync,
so the two cannot drift apart; tests/store/test_worker_store_contract.py runs one suite against
both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from appliance.core.canonical import canonical_json
from appliance.engine.text import STORED_JSON_DEPTH_MAX, well_formed, well_formed_json
from appliance.protocol import v1
from appliance.protocol.v1 import Invocation
from appliance.store.errors import WorkerRecordRefused

EXECUTION_OUTPUT_BYTES_MAX: Final = 256 * 1024
# The wire's statuses (appliance/protocol/v1.py) and the store's own first one: submitted to the
# engine, not yet reported running.
EXECUTION_STATUSES: Final = ("submitted", *v1.EXECUTION_STATUSES)
TERMINAL_STATUSES: Final = v1.FINISHED_STATUSES
# A prune looks at up to this many candidates per batch of ``rows_max``: room for the few whose
# execution is still unfinished (kept until it finishes) without re-reading the whole table.
PRUNE_LOOKAHEAD_FACTOR: Final = 4


@dataclass(frozen=True)
class Pruned:
    """One retention batch: invocation records deleted, and whether another batch has work now
    (False when nothing was deleted, so a caller that loops on it never spins)."""

    deleted: int
    more: bool


@dataclass(frozen=True)
class InvocationRecord:
    """Everything durable about one invocation. ``binding`` is ``None`` for a fence that arrived
    before any reservation. ``consumed`` is ``{"execution_id", "at_ms", "incarnation_id"}``;
    ``fence`` is ``{"reason", "at_ms", "before_consume", "incarnation_id"}``."""

    invocation: Invocation
    binding: dict[str, Any] | None
    reserved_at_ms: int | None
    reserved_by: str | None
    permit: dict[str, Any] | None
    permit_at_ms: int | None
    permit_incarnation_id: str | None
    consumed: dict[str, Any] | None
    fence: dict[str, Any] | None
    receipt: dict[str, Any] | None
    receipt_at_ms: int | None

    def body(self) -> dict[str, Any]:
        return {
            "binding": self.binding,
            "reserved_at_ms": self.reserved_at_ms,
            "reserved_by": self.reserved_by,
            "permit": self.permit,
            "permit_at_ms": self.permit_at_ms,
            "permit_incarnation_id": self.permit_incarnation_id,
            "consumed": self.consumed,
            "fence": self.fence,
            "receipt": self.receipt,
            "receipt_at_ms": self.receipt_at_ms,
        }


@dataclass(frozen=True)
class Reserved:
    record: InvocationRecord
    created: bool  # False: the invocation was already reserved (or fenced) before this call


@dataclass(frozen=True)
class ExecutionRecord:
    execution_id: str
    invocation: Invocation
    incarnation_id: str
    status: str
    created_at_ms: int
    updated_at_ms: int
    finished_at_ms: int | None
    output: bytes
    result: Any
    error: str | None

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES


class Change(NamedTuple):
    """What a rule decided: the record to write, or the one already there (``changed`` False)."""

    record: InvocationRecord
    changed: bool


def empty_record(invocation: Invocation) -> InvocationRecord:
    return InvocationRecord(invocation, None, None, None, None, None, None, None, None, None, None)


def replace_record(record: InvocationRecord, **changes: Any) -> InvocationRecord:
    return InvocationRecord(**{"invocation": record.invocation, **record.body(), **changes})


def canonical(document: dict[str, Any]) -> dict[str, Any]:
    """A binding, permit or receipt as it is stored and compared (canonical JSON)."""
    return json.loads(canonical_json(document))  # type: ignore[no-any-return]


def reserve(
    existing: InvocationRecord | None,
    invocation: Invocation,
    binding: dict[str, Any],
    *,
    incarnation_id: str,
    now_ms: int,
) -> Reserved:
    """The first reservation fixes the binding; a repeat with the same binding returns what
    exists (which may be permitted, consumed or fenced); another binding is refused
    (``binding_mismatch``). A fence that came first keeps the record fenced. Nothing to write
    when the returned record is ``existing`` itself (a repeat)."""
    if existing is not None and existing.binding is not None:
        if existing.binding != binding:
            raise WorkerRecordRefused(
                "binding_mismatch",
                f"invocation {invocation.key()} is reserved with a different binding",
            )
        return Reserved(existing, created=False)
    record = replace_record(
        existing or empty_record(invocation),
        binding=binding,
        reserved_at_ms=now_ms,
        reserved_by=incarnation_id,
    )
    return Reserved(record, created=existing is None)


def require_reserved(record: InvocationRecord | None, invocation: Invocation) -> InvocationRecord:
    if record is None or record.binding is None:
        raise WorkerRecordRefused("not_reserved", f"invocation {invocation.key()} is not reserved")
    return record


def record_permit(
    loaded: InvocationRecord | None,
    invocation: Invocation,
    permit: dict[str, Any],
    *,
    incarnation_id: str,
    now_ms: int,
) -> Change:
    """Idempotent for the same permit; ``permit_mismatch`` for another, ``not_reserved``."""
    record = require_reserved(loaded, invocation)
    if record.permit is not None:
        if record.permit != permit:
            raise WorkerRecordRefused(
                "permit_mismatch",
                f"invocation {invocation.key()} already holds a different permit",
            )
        return Change(record, changed=False)
    changed = replace_record(
        record, permit=permit, permit_at_ms=now_ms, permit_incarnation_id=incarnation_id
    )
    return Change(changed, changed=True)


def consume(
    loaded: InvocationRecord | None,
    invocation: Invocation,
    *,
    execution_id: str,
    incarnation_id: str,
    now_ms: int,
) -> tuple[InvocationRecord, ExecutionRecord]:
    """The point of no return: the consumed record and the new execution (``submitted``), to
    write in ONE transaction. Refused: ``not_reserved``, ``already_consumed`` (also across
    restarts), ``fenced``, ``no_permit``, ``stale_permit`` (an earlier incarnation's). The
    caller checks that ``execution_id`` is not already used."""
    record = require_reserved(loaded, invocation)
    if record.consumed is not None:
        raise WorkerRecordRefused(
            "already_consumed",
            f"invocation {invocation.key()} was already consumed by execution "
            f"{record.consumed['execution_id']}",
        )
    if record.fence is not None:
        raise WorkerRecordRefused("fenced", f"invocation {invocation.key()} is fenced")
    if record.permit is None:
        raise WorkerRecordRefused("no_permit", f"invocation {invocation.key()} has no permit")
    if record.permit_incarnation_id != incarnation_id:
        raise WorkerRecordRefused(
            "stale_permit",
            f"invocation {invocation.key()}: the permit was obtained by incarnation "
            f"{record.permit_incarnation_id}, not by this one",
        )
    consumed = {"execution_id": execution_id, "at_ms": now_ms, "incarnation_id": incarnation_id}
    execution = ExecutionRecord(
        execution_id=execution_id,
        invocation=invocation,
        incarnation_id=incarnation_id,
        status="submitted",
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
        finished_at_ms=None,
        output=b"",
        result=None,
        error=None,
    )
    return replace_record(record, consumed=consumed), execution


def fence(
    existing: InvocationRecord | None,
    invocation: Invocation,
    *,
    reason: str,
    incarnation_id: str,
    now_ms: int,
) -> Change:
    """A cancellation fence; ``fence["before_consume"]`` says whether it won. A second fence
    leaves the first; a fence before any reservation creates the record, so a later reserve
    finds it fenced and consume refuses."""
    record = existing or empty_record(invocation)
    if record.fence is not None:
        return Change(record, changed=False)
    fenced = {
        "reason": reason,
        "at_ms": now_ms,
        "before_consume": record.consumed is None,
        "incarnation_id": incarnation_id,
    }
    return Change(replace_record(record, fence=fenced), changed=True)


def record_receipt(
    loaded: InvocationRecord | None,
    invocation: Invocation,
    receipt: dict[str, Any],
    *,
    now_ms: int,
) -> Change:
    """Idempotent for the same receipt. Refused: ``not_reserved``, ``not_consumed``,
    ``receipt_mismatch``."""
    record = require_reserved(loaded, invocation)
    if record.consumed is None:
        raise WorkerRecordRefused(
            "not_consumed", f"invocation {invocation.key()} was never consumed"
        )
    if record.receipt is not None:
        if record.receipt != receipt:
            raise WorkerRecordRefused(
                "receipt_mismatch",
                f"invocation {invocation.key()} already holds a different receipt",
            )
        return Change(record, changed=False)
    return Change(replace_record(record, receipt=receipt, receipt_at_ms=now_ms), changed=True)


class ExecutionProgress(NamedTuple):
    """Engine progress, checked and encoded before anything is read or written."""

    status: str
    output: bytes | None
    result: Any
    error: str | None


def checked_progress(
    status: str, output: bytes | None, result: Any, error: str | None
) -> ExecutionProgress:
    """``ValueError`` for a status that is not progress or an output over
    ``EXECUTION_OUTPUT_BYTES_MAX``. Strings in ``result`` and ``error`` get the engine's encoding
    rule (lone surrogates become U+FFFD, appliance/engine/text.py), so a record always encodes;
    a result nested deeper than ``STORED_JSON_DEPTH_MAX`` raises ``TooDeep`` (a ValueError), and
    one that is not JSON is refused here, before anything is written."""
    if status not in EXECUTION_STATUSES or status == "submitted":
        raise ValueError(f"status must be one of {EXECUTION_STATUSES[1:]}, got {status!r}")
    if output is not None and len(output) > EXECUTION_OUTPUT_BYTES_MAX:
        raise ValueError(
            f"execution output is {len(output)} bytes, over {EXECUTION_OUTPUT_BYTES_MAX}"
        )
    result = well_formed_json(result, STORED_JSON_DEPTH_MAX)
    canonical_json(result)
    return ExecutionProgress(status, output, result, None if error is None else well_formed(error))


def progressed(
    current: ExecutionRecord | None, execution_id: str, progress: ExecutionProgress, *, now_ms: int
) -> ExecutionRecord:
    """The execution after ``progress``. Refused: ``unknown_execution``, and
    ``execution_finished`` (a finished execution never changes again)."""
    if current is None:
        raise WorkerRecordRefused("unknown_execution", f"no execution {execution_id!r}")
    if current.finished:
        raise WorkerRecordRefused(
            "execution_finished",
            f"execution {execution_id} already finished as {current.status}",
        )
    return ExecutionRecord(
        execution_id=execution_id,
        invocation=current.invocation,
        incarnation_id=current.incarnation_id,
        status=progress.status,
        created_at_ms=current.created_at_ms,
        updated_at_ms=now_ms,
        finished_at_ms=now_ms if progress.status in TERMINAL_STATUSES else None,
        output=current.output if progress.output is None else bytes(progress.output),
        result=progress.result,
        error=progress.error,
    )
