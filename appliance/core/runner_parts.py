"""The runner's checkpoint parts: ownership, per-record admission state, the retired watermark.

Theory of operation
-------------------
Ownership and admission live in the same checkpoint, applied by the same serialized ``apply``
(seeds/000: "The checkpoint contains both ownership and admission, so an admission cannot race
takeover through separate keys"). Three part kinds:

* ``ownership`` (one part): the acquired owner — node, Raft term, ownership epoch, when, and
  whether the store's initial schedules were seeded. Absent on a new store (epoch 0).
* ``admission/<occurrence id>`` (a *bound* part, at most one per record): the claim of the
  current attempt (its full binding), the permit (which attempt, which worker incarnation, the
  epoch that granted it), the latest terminal fence (definitely not launched), and why the
  attempt became Unknown. It is charged its maximum size, reserved by the record from its
  creation, so claims, permits and fences always fit under the cap (SPEC §3 headroom rule): under
  charging rules 1 the maximum of any record (``ADMISSION_BYTES_MAX``), under rules 2 the maximum
  for this record (``admission_bytes_fitted``). It retires with its record.
* ``retired`` (one part): the highest occurrence id retention has retired, so a replayed
  admission for a retired invocation is refused by name.

Each value here is a frozen dataclass with an exact JSON codec; budgets are computed from
worst-case values, like ``RECORD_BYTES_MAX``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.core.binding import (
    TEXT_JSON_BYTES_MAX,
    Binding,
    binding_from_checkpoint,
    binding_to_json,
    check_binding_v2,
    check_incarnation_v2,
    worst_case_binding,
    worst_case_binding_v2,
)
from appliance.core.canonical import canonical_json
from appliance.core.errors import CoreError
from appliance.core.occurrence import INSTANT_MAX_S, INT_MAX, REASON_BYTES_MAX, Occurrence
from appliance.core.state_parts import (
    CHARGING_PART,
    Schedule,
    digits_short,
    register_bound_part_kind,
    register_part_kind,
)

OWNERSHIP_PART = "ownership"
RETIRED_PART = "retired"
ADMISSION_KIND = "admission"
FENCE_CAUSES = ("takeover", "cancel", "dispatch")

Getter = Callable[[str], Any]


def admission_part(occurrence_id: int) -> str:
    return f"{ADMISSION_KIND}/{occurrence_id}"


# ---- ownership ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ownership:
    node: str
    term: int
    epoch: int
    acquired_at_s: int
    seeded: bool


def ownership_to_json(o: Ownership) -> dict[str, Any]:
    return {
        "node": o.node,
        "term": o.term,
        "epoch": o.epoch,
        "acquired_at": o.acquired_at_s,
        "seeded": o.seeded,
    }


def ownership_of(get: Getter) -> Ownership | None:
    """The acquired ownership (``get`` is ``state.extra.get`` or ``txn.extra``), or None."""
    value = get(OWNERSHIP_PART)
    if value is None:
        return None
    return Ownership(
        value["node"], value["term"], value["epoch"], value["acquired_at"], value["seeded"]
    )


OWNERSHIP_BYTES_MAX = len(
    canonical_json(ownership_to_json(Ownership("x" * 64, INT_MAX, INT_MAX, INSTANT_MAX_S, False)))
)


# ---- admission (bound to a record) -------------------------------------------------------------


@dataclass(frozen=True)
class Permit:
    attempt: int
    incarnation: str
    granted_epoch: int
    granted_at_s: int


@dataclass(frozen=True)
class Fence:
    """A committed terminal fence: this attempt was definitely never launched."""

    attempt: int
    epoch: int
    at_s: int
    cause: str  # one of FENCE_CAUSES


@dataclass(frozen=True)
class UnknownNote:
    attempt: int
    reason: str
    at_s: int


@dataclass(frozen=True)
class AdmissionRecord:
    claim: Binding | None = None
    claimed_at_s: int | None = None
    permit: Permit | None = None
    fence: Fence | None = None
    unknown: UnknownNote | None = None

    def permit_for(self, attempt: int) -> Permit | None:
        return self.permit if self.permit is not None and self.permit.attempt == attempt else None

    def fence_for(self, attempt: int) -> Fence | None:
        return self.fence if self.fence is not None and self.fence.attempt == attempt else None

    def claim_for(self, attempt: int) -> Binding | None:
        return self.claim if self.claim is not None and self.claim.attempt == attempt else None


def admission_to_json(r: AdmissionRecord) -> dict[str, Any]:
    p, f, u = r.permit, r.fence, r.unknown
    return {
        "claim": None
        if r.claim is None
        else {"binding": binding_to_json(r.claim), "at": r.claimed_at_s},
        "permit": None
        if p is None
        else {
            "attempt": p.attempt,
            "incarnation": p.incarnation,
            "granted_epoch": p.granted_epoch,
            "granted_at": p.granted_at_s,
        },
        "fence": None
        if f is None
        else {"attempt": f.attempt, "epoch": f.epoch, "at": f.at_s, "cause": f.cause},
        "unknown": None if u is None else {"attempt": u.attempt, "reason": u.reason, "at": u.at_s},
    }


def admission_from_json(value: dict[str, Any]) -> AdmissionRecord:
    claim, p, f, u = value["claim"], value["permit"], value["fence"], value["unknown"]
    return AdmissionRecord(
        claim=None if claim is None else binding_from_checkpoint(claim["binding"]),
        claimed_at_s=None if claim is None else claim["at"],
        permit=None
        if p is None
        else Permit(p["attempt"], p["incarnation"], p["granted_epoch"], p["granted_at"]),
        fence=None if f is None else Fence(f["attempt"], f["epoch"], f["at"], f["cause"]),
        unknown=None if u is None else UnknownNote(u["attempt"], u["reason"], u["at"]),
    )


def admission_of(get: Getter, occurrence_id: int) -> AdmissionRecord | None:
    value = get(admission_part(occurrence_id))
    return None if value is None else admission_from_json(value)


def _worst_case_admission() -> AdmissionRecord:
    text = "\x01" * (TEXT_JSON_BYTES_MAX // 6)
    return AdmissionRecord(
        claim=worst_case_binding(),
        claimed_at_s=INSTANT_MAX_S,
        permit=Permit(INT_MAX, text, INT_MAX, INSTANT_MAX_S),
        fence=Fence(INT_MAX, INT_MAX, INSTANT_MAX_S, max(FENCE_CAUSES, key=len)),
        unknown=UnknownNote(INT_MAX, "x" * REASON_BYTES_MAX, INSTANT_MAX_S),
    )


ADMISSION_BYTES_MAX = len(canonical_json(admission_to_json(_worst_case_admission())))

# Charging rules 2: the same worst case within the tighter claim bounds (binding.py), with no
# schedule name and the largest ids; each record's maximum then adds its name and subtracts the
# digits its own ids fall short of INT_MAX (the claim's ids are the record's, checked at claim).
_NULL_BYTES = len(b"null")
ADMISSION_V2_UNNAMED_BYTES = len(
    canonical_json(
        admission_to_json(
            AdmissionRecord(
                claim=worst_case_binding_v2(),
                claimed_at_s=INSTANT_MAX_S,
                permit=Permit(INT_MAX, "x" * 32, INT_MAX, INSTANT_MAX_S),
                fence=Fence(INT_MAX, INT_MAX, INSTANT_MAX_S, max(FENCE_CAUSES, key=len)),
                unknown=UnknownNote(INT_MAX, "x" * REASON_BYTES_MAX, INSTANT_MAX_S),
            )
        )
    )
)


def admission_bytes_fitted(record: Occurrence, value: Any, schedule: Schedule | None) -> int:
    """Rules 2: the most ``admission/<record id>`` can hold. A claim's name is its schedule's (a
    rule-2 claim needs the schedule); once the schedule is deleted no claim can come, so the
    committed claim's name (or none) is the only one."""
    if schedule is not None:
        name = schedule.definition.name
    elif value is not None and value["claim"] is not None:
        name = value["claim"]["binding"]["schedule_name"]
    else:
        name = None
    name_bytes = len(canonical_json(name))
    return (
        ADMISSION_V2_UNNAMED_BYTES
        - _NULL_BYTES
        + name_bytes
        - digits_short(record.id)
        - digits_short(record.schedule_id)
    )


def admission_admits_v2(value: Any) -> str | None:
    """Why an admission part written under rules 1 exceeds the rule-2 bounds, or None."""
    record = admission_from_json(value)
    try:
        if record.claim is not None:
            check_binding_v2(record.claim)
        if record.permit is not None:
            check_incarnation_v2(record.permit.incarnation)
    except CoreError as err:
        return str(err)
    return None


# ---- the retired watermark ---------------------------------------------------------------------


def retired_through(get: Getter) -> int:
    value = get(RETIRED_PART)
    return 0 if value is None else value["through"]


RETIRED_BYTES_MAX = len(canonical_json({"through": INT_MAX}))
CHARGING_BYTES_MAX = len(canonical_json({"rules": 2}))


def _register() -> None:
    from appliance.core.state_parts import _PART_KINDS

    if OWNERSHIP_PART in _PART_KINDS:
        return  # already registered (module reloaded)
    register_part_kind(OWNERSHIP_PART, lambda value: OWNERSHIP_BYTES_MAX)
    register_part_kind(RETIRED_PART, lambda value: RETIRED_BYTES_MAX)
    register_bound_part_kind(
        ADMISSION_KIND, ADMISSION_BYTES_MAX, admission_bytes_fitted, admission_admits_v2
    )
    register_part_kind(CHARGING_PART, lambda value: CHARGING_BYTES_MAX)


_register()
