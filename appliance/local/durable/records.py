"""Durable task records, claims and receipts, and the pure transitions every provider applies.

Theory of operation: a provider stores one record per durable task key. Running a due slot takes
a *claim* stamped with the owner's fencing epoch and a bounded expiry; the owner renews it while
the callback runs and closes it by committing a *receipt* together with the next run. Every
transition checks the claim it is given against the stored one, so a fenced owner (older epoch,
expired and re-claimed) cannot commit. Until the receipt commits, a crash leaves the claim behind
and recovery runs the slot again: delivery is at-least-once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from ..config import OWNER_ID_PATTERN
from ..errors import ClaimConflict, ClaimLost, SnapshotCorrupt
from ..timemath import checked_add, format_instant, parse_instant

TASK_KEY_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
DEFINITION_BYTES_MAX = 512
RECEIPTS_PER_TASK_MAX = 8
OUTCOMES = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class Claim:
    task_key: str
    owner_id: str
    epoch: int
    due: datetime
    attempt: int
    expires_at: datetime


@dataclass(frozen=True)
class Receipt:
    due: datetime
    attempt: int
    epoch: int
    outcome: str
    finished_at: datetime


@dataclass(frozen=True)
class DurableTaskRecord:
    task_key: str
    definition: str
    next_run: datetime | None
    attempt: int
    runs_completed: int
    claim: Claim | None = None
    receipts: tuple[Receipt, ...] = ()


def check_key(task_key: str) -> str:
    if not TASK_KEY_PATTERN.fullmatch(task_key):
        raise ValueError(f"task_key {task_key!r}: 1..128 characters of A-Za-z0-9_.:-")
    return task_key


def registered(
    existing: DurableTaskRecord | None,
    task_key: str,
    definition: str,
    next_run: datetime | None,
    attempt: int,
) -> DurableTaskRecord:
    """A (re)registration: new definition or cursor; keeps history, counters and any claim."""
    if len(definition.encode()) > DEFINITION_BYTES_MAX:
        raise ValueError(f"definition longer than {DEFINITION_BYTES_MAX} bytes")
    if existing is None:
        return DurableTaskRecord(check_key(task_key), definition, next_run, attempt, 0)
    return replace(existing, definition=definition, next_run=next_run, attempt=attempt)


def claimed(
    record: DurableTaskRecord | None,
    task_key: str,
    owner_id: str,
    epoch: int,
    due: datetime,
    attempt: int,
    now: datetime,
    ttl: timedelta,
) -> tuple[DurableTaskRecord, Claim]:
    if record is None:
        raise ClaimLost(f"task {task_key}: no durable record")
    if record.next_run != due or record.attempt != attempt:
        raise ClaimConflict(
            f"task {task_key}: record moved on to {record.next_run} attempt {record.attempt}",
            retry_at=record.next_run,
        )
    held = record.claim
    if held is not None and held.epoch != epoch:
        if held.epoch > epoch:
            raise ClaimLost(f"task {task_key}: fenced by epoch {held.epoch} > {epoch}")
        restarted_owner = held.owner_id == owner_id
        if held.expires_at > now and not restarted_owner:
            raise ClaimConflict(
                f"task {task_key}: claimed by {held.owner_id} epoch {held.epoch} until "
                f"{format_instant(held.expires_at)}",
                retry_at=held.expires_at,
            )
    expires_at = checked_add(now, ttl, "claim expiry")
    claim = Claim(task_key, owner_id, epoch, due, attempt, expires_at)
    return replace(record, claim=claim), claim


def _check_held(record: DurableTaskRecord | None, claim: Claim) -> DurableTaskRecord:
    if record is None or record.claim is None:
        raise ClaimLost(f"task {claim.task_key}: claim epoch {claim.epoch} no longer held")
    held = record.claim
    if (held.owner_id, held.epoch, held.due, held.attempt) != (
        claim.owner_id,
        claim.epoch,
        claim.due,
        claim.attempt,
    ):
        raise ClaimLost(
            f"task {claim.task_key}: claim epoch {claim.epoch} was taken by "
            f"{held.owner_id} epoch {held.epoch}"
        )
    return record


def renewed(
    record: DurableTaskRecord | None, claim: Claim, now: datetime, ttl: timedelta
) -> tuple[DurableTaskRecord, Claim]:
    current = _check_held(record, claim)
    fresh = replace(claim, expires_at=checked_add(now, ttl, "claim expiry"))
    return replace(current, claim=fresh), fresh


def receipted(
    record: DurableTaskRecord | None,
    claim: Claim,
    receipt: Receipt,
    next_run: datetime | None,
    attempt: int,
    runs_completed: int,
) -> DurableTaskRecord:
    current = _check_held(record, claim)
    if receipt.outcome not in OUTCOMES:
        raise ValueError(f"receipt outcome {receipt.outcome!r} not one of {OUTCOMES}")
    receipts = (*current.receipts, receipt)[-RECEIPTS_PER_TASK_MAX:]
    return replace(
        current,
        claim=None,
        next_run=next_run,
        attempt=attempt,
        runs_completed=runs_completed,
        receipts=receipts,
    )


# ---- JSON form (shared by the V1 snapshot and the SQLite rows) ----------------------------------


def record_to_json(record: DurableTaskRecord) -> dict:
    claim = record.claim
    return {
        "attempt": record.attempt,
        "claim": None
        if claim is None
        else {
            "attempt": claim.attempt,
            "due": format_instant(claim.due),
            "epoch": claim.epoch,
            "expires_at": format_instant(claim.expires_at),
            "owner": claim.owner_id,
        },
        "definition": record.definition,
        "next_run": None if record.next_run is None else format_instant(record.next_run),
        "receipts": [
            {
                "attempt": r.attempt,
                "due": format_instant(r.due),
                "epoch": r.epoch,
                "finished_at": format_instant(r.finished_at),
                "outcome": r.outcome,
            }
            for r in record.receipts
        ],
        "runs_completed": record.runs_completed,
        "task": record.task_key,
    }


_RECORD_FIELDS = frozenset(
    {"attempt", "claim", "definition", "next_run", "receipts", "runs_completed", "task"}
)
_CLAIM_FIELDS = frozenset({"attempt", "due", "epoch", "expires_at", "owner"})
_RECEIPT_FIELDS = frozenset({"attempt", "due", "epoch", "finished_at", "outcome"})


def _field(doc: dict, name: str, kind: type, where: str):
    value = doc.get(name)
    if type(value) is not kind:
        raise SnapshotCorrupt(f"{where}.{name}: expected {kind.__name__}")
    return value


def _count(doc: dict, name: str, where: str, minimum: int) -> int:
    value = _field(doc, name, int, where)
    if not minimum <= value <= 2**63 - 1:
        raise SnapshotCorrupt(f"{where}.{name}: {value} out of range")
    return value


def _instant(doc: dict, name: str, where: str) -> datetime:
    try:
        return parse_instant(_field(doc, name, str, where))
    except ValueError as exc:
        raise SnapshotCorrupt(f"{where}.{name}: {exc}") from None


def record_from_json(doc: object, where: str) -> DurableTaskRecord:
    """Validate one record document (exact field set, types, ranges, bounds)."""
    if type(doc) is not dict or doc.keys() != _RECORD_FIELDS:
        raise SnapshotCorrupt(f"{where}: record fields must be exactly {sorted(_RECORD_FIELDS)}")
    key = _field(doc, "task", str, where)
    if not TASK_KEY_PATTERN.fullmatch(key):
        raise SnapshotCorrupt(f"{where}.task: invalid task key")
    definition = _field(doc, "definition", str, where)
    if len(definition.encode()) > DEFINITION_BYTES_MAX:
        raise SnapshotCorrupt(f"{where}.definition: longer than {DEFINITION_BYTES_MAX} bytes")
    next_run = None if doc["next_run"] is None else _instant(doc, "next_run", where)
    claim_doc = doc["claim"]
    claim = None
    if claim_doc is not None:
        cw = f"{where}.claim"
        if type(claim_doc) is not dict or claim_doc.keys() != _CLAIM_FIELDS:
            raise SnapshotCorrupt(f"{cw}: fields must be exactly {sorted(_CLAIM_FIELDS)}")
        owner = _field(claim_doc, "owner", str, cw)
        if not OWNER_ID_PATTERN.fullmatch(owner):
            raise SnapshotCorrupt(f"{cw}.owner: invalid owner id")
        claim = Claim(
            key,
            owner,
            _count(claim_doc, "epoch", cw, 1),
            _instant(claim_doc, "due", cw),
            _count(claim_doc, "attempt", cw, 1),
            _instant(claim_doc, "expires_at", cw),
        )
    receipts_doc = _field(doc, "receipts", list, where)
    if len(receipts_doc) > RECEIPTS_PER_TASK_MAX:
        raise SnapshotCorrupt(f"{where}.receipts: more than {RECEIPTS_PER_TASK_MAX}")
    receipts = []
    for i, r in enumerate(receipts_doc):
        rw = f"{where}.receipts[{i}]"
        if type(r) is not dict or r.keys() != _RECEIPT_FIELDS:
            raise SnapshotCorrupt(f"{rw}: fields must be exactly {sorted(_RECEIPT_FIELDS)}")
        outcome = _field(r, "outcome", str, rw)
        if outcome not in OUTCOMES:
            raise SnapshotCorrupt(f"{rw}.outcome: {outcome!r} not one of {OUTCOMES}")
        receipts.append(
            Receipt(
                _instant(r, "due", rw),
                _count(r, "attempt", rw, 1),
                _count(r, "epoch", rw, 1),
                outcome,
                _instant(r, "finished_at", rw),
            )
        )
    return DurableTaskRecord(
        key,
        definition,
        next_run,
        _count(doc, "attempt", where, 1),
        _count(doc, "runs_completed", where, 0),
        claim,
        tuple(receipts),
    )
