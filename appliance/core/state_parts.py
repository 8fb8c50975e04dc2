"""The checkpoint's parts: values, their canonical encodings and their byte budgets.

The state is a set of named parts (``meta``, ``schedule/<id>``, ``progress/<id>``,
``occurrence/<id>`` and registered extension kinds); this module says how each is encoded and
how many bytes it is charged in the checkpoint budget (see ``state.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from appliance.core.definition import (
    Definition,
    MissedCatchUp,
    MissedPolicy,
    MissedRunOnce,
    MissedSkip,
    OverlapPolicy,
    Policy,
    RetryPolicy,
    definition_to_json,
)
from appliance.core.limits import CHECKPOINT_BYTES_MAX, Limits, limits_to_json
from appliance.core.occurrence import (
    INSTANT_MAX_S,
    INT_MAX,
    RECORD_BYTES_MAX,
    Occurrence,
    OccurrenceState,
    timeline_entry_bytes,
    worst_timeline_entry,
)
from appliance.core.placement import placement_from_json

SCHEMA_VERSION = 2
HEADROOM_BYTES = 64 * 1024
RECENT_DROPS_MAX = 8
GROWTH_BYTES_MAX = CHECKPOINT_BYTES_MAX - HEADROOM_BYTES
# The cluster-wide maintenance switch (appliance/core/pause.py registers the kind): while this
# singleton part exists nothing is selected and nothing is claimed.
PAUSED_PART = "paused"

# Charging rules (see state.py): 1 charges every live record the maximum of any record; 2 charges
# it the most it can still reach from its fixed fields. The ``charging`` part names rules 2; a
# checkpoint without it is charged by rules 1 (every store written before the switch existed).
CHARGING_PART = "charging"
CHARGING_V1 = 1
CHARGING_V2 = 2

S = OccurrenceState

# ---- values ------------------------------------------------------------------------------------


class DropReason(enum.Enum):
    MISSED = "missed"
    OVERLAP = "overlap"
    CAPACITY = "capacity"

    __hash__ = object.__hash__  # identity: see OccurrenceState


DROP_REASONS = tuple(DropReason)
_DROP_NAMES = {reason: reason.value for reason in DropReason}


class KeptCode(NamedTuple):
    """The code an update replaced, kept for the live occurrences created with it: records of the
    schedule with an id below ``until_id`` (and not below the previous entry's) run this code."""

    until_id: int
    code: str


class Change(NamedTuple):
    """One committed ``update`` of a schedule: when, which fields, the code digest after it."""

    at_s: int
    fields: tuple[str, ...]
    payload_sha256: str


@dataclass(frozen=True)
class Schedule:
    id: int
    definition: Definition
    enabled: bool
    created_at_s: int
    # Both empty unless the schedule was updated (then omitted from the JSON, so a schedule part
    # of before the update commands encodes byte for byte as it did).
    kept: tuple[KeptCode, ...] = ()
    changes: tuple[Change, ...] = ()


@dataclass(frozen=True)
class DropEvent:
    at_s: int
    reason: DropReason
    count: int


class Progress(NamedTuple):
    """The observation side of a schedule: its cursor and what it dropped (a NamedTuple, like
    Occurrence: every observation builds one per due schedule)."""

    cursor_s: int
    dropped: tuple[int, int, int] = (0, 0, 0)  # in DROP_REASONS order
    recent: tuple[DropEvent, ...] = ()

    def dropped_by(self, reason: DropReason) -> int:
        return self.dropped[DROP_REASONS.index(reason)]


@dataclass(frozen=True)
class Counts:
    records: int
    outstanding: int
    running: int
    by_state: dict[str, int]


# ---- part encodings ----------------------------------------------------------------------------


def _frame(name: str) -> int:
    # '"name":' plus the ',' separating it from the next part.
    return len(name) + 4


def _schedule_json(s: Schedule) -> dict:
    out: dict[str, Any] = {
        "id": s.id,
        "definition": definition_to_json(s.definition),
        "enabled": s.enabled,
        "created_at": s.created_at_s,
    }
    if s.kept:
        out["kept"] = [[k.until_id, k.code] for k in s.kept]
    if s.changes:
        out["changes"] = [[c.at_s, list(c.fields), c.payload_sha256] for c in s.changes]
    return out


def _missed_from_json(value: Any) -> MissedPolicy:
    if value == "Skip":
        return MissedSkip()
    if value == "RunOnce":
        return MissedRunOnce()
    return MissedCatchUp(cap=value["CatchUp"]["cap"])


def definition_from_checkpoint(value: dict) -> Definition:
    """Structural decode of a definition already validated when it was created.

    Replicas must not re-validate against their own calendar/tzdata when loading a checkpoint or a
    command (a zone their tzdata lacks would make them diverge), so this only rebuilds the value.
    """
    policy = value["policy"]
    return Definition(
        code=value["code"],
        cron=value["cron"],
        timezone=value["timezone"],
        policy=Policy(
            missed=_missed_from_json(policy["missed"]),
            overlap=OverlapPolicy(policy["overlap"]),
            retry=RetryPolicy(
                max_retries=policy["retry"]["max_retries"],
                delay_seconds=policy["retry"]["delay_seconds"],
            ),
            jitter_seconds=policy.get("jitter_seconds", 0),
        ),
        name=value.get("name"),
        placement=placement_from_json(value.get("placement")),
    )


def _schedule_from_json(value: dict) -> Schedule:
    return Schedule(
        id=value["id"],
        definition=definition_from_checkpoint(value["definition"]),
        enabled=value["enabled"],
        created_at_s=value["created_at"],
        kept=tuple(KeptCode(until, code) for until, code in value.get("kept", ())),
        changes=tuple(
            Change(at, tuple(fields), digest) for at, fields, digest in value.get("changes", ())
        ),
    )


def _progress_json(p: Progress) -> dict:
    return {
        "cursor": p.cursor_s,
        "dropped": {r.value: n for r, n in zip(DROP_REASONS, p.dropped, strict=True)},
        "recent": [[e.at_s, e.reason.value, e.count] for e in p.recent],
    }


def encode_progress(p: Progress) -> bytes:
    """``canonical_json(_progress_json(p))`` by hand: every observation writes one per schedule."""
    missed, overlap, capacity = p.dropped
    recent = ",".join(f'[{e.at_s},"{_DROP_NAMES[e.reason]}",{e.count}]' for e in p.recent)
    return (
        f'{{"cursor":{p.cursor_s},"dropped":{{"capacity":{capacity},"missed":{missed},'
        f'"overlap":{overlap}}},"recent":[{recent}]}}'
    ).encode()


def _progress_from_json(value: dict) -> Progress:
    dropped = value["dropped"]
    return Progress(
        cursor_s=value["cursor"],
        dropped=tuple(dropped[r.value] for r in DROP_REASONS),  # type: ignore[arg-type]
        recent=tuple(DropEvent(at, DropReason(r), n) for at, r, n in value["recent"]),
    )


def _meta_json(limits: Limits, next_schedule_id: int, next_occurrence_id: int) -> dict:
    return {
        "schema": SCHEMA_VERSION,
        "limits": limits_to_json(limits),
        "next_schedule_id": next_schedule_id,
        "next_occurrence_id": next_occurrence_id,
    }


_LONGEST_REASON = max(DROP_REASONS, key=lambda r: len(r.value))
PROGRESS_BYTES_MAX = len(
    encode_progress(
        Progress(
            cursor_s=INSTANT_MAX_S,
            dropped=(INT_MAX, INT_MAX, INT_MAX),
            recent=(DropEvent(INSTANT_MAX_S, _LONGEST_REASON, INT_MAX),) * RECENT_DROPS_MAX,
        )
    )
)


def _schedule_budget(data_bytes: int, schedule: Schedule) -> int:
    # "true" may become "false" by a disable: one byte more, reserved now.
    return data_bytes + (1 if schedule.enabled else 0)


_INT_DIGITS = len(str(INT_MAX))
_INSTANT_DIGITS = len(str(INSTANT_MAX_S))
_WORST_ENTRY_BYTES = timeline_entry_bytes(worst_timeline_entry())


def digits_short(value: int) -> int:
    """How many digits ``value`` has fewer than INT_MAX (what its JSON saves on the worst case)."""
    return _INT_DIGITS - len(str(value))


def record_bytes_max(record: Occurrence) -> int:
    """Rules 2: the largest ``record`` can become. Its id, schedule id, due instant and creation
    entry (the timeline keeps it forever) are fixed, so it reaches the worst record less what
    those fall short of the worst case; every other field may still reach its maximum."""
    short = (
        digits_short(record.id)
        + digits_short(record.schedule_id)
        + _INSTANT_DIGITS
        - len(str(record.due_s))
    )
    if record.timeline:
        short += _WORST_ENTRY_BYTES - timeline_entry_bytes(record.timeline[0])
    return RECORD_BYTES_MAX - short


def _occurrence_budget(
    data_bytes: int,
    record: Occurrence,
    has_part: Callable[[str], bool] = lambda name: False,
    rules: int = CHARGING_V1,
    fitted: Callable[[str, Occurrence], int] | None = None,
) -> int:
    """A terminal record is charged its size; a live one the most it can reach, plus a reserve for
    each bound part (see :func:`register_bound_part_kind`) it does not hold yet. ``fitted(kind,
    record)`` gives a bound part's rule-2 maximum for this record."""
    if record.terminal:
        return data_bytes
    if rules == CHARGING_V1 or fitted is None:
        return RECORD_BYTES_MAX + bound_reserve_bytes(record.id, has_part)
    return record_bytes_max(record) + bound_reserve_bytes(record.id, has_part, record, fitted)


def bound_reserve_bytes(
    occurrence_id: int,
    has_part: Callable[[str], bool] = lambda name: False,
    record: Occurrence | None = None,
    fitted: Callable[[str, Occurrence], int] | None = None,
) -> int:
    """What a live record reserves for the bound parts it does not hold yet (rules 1: each
    kind's maximum; rules 2, with ``record`` and ``fitted``: each kind's maximum for it)."""
    reserve = 0
    for kind, (part_bytes_max, _) in _BOUND_KINDS.items():
        name = f"{kind}/{occurrence_id}"
        if not has_part(name):
            size = part_bytes_max if fitted is None or record is None else fitted(kind, record)
            reserve += _frame(name) + size
    return reserve


_PART_KINDS: dict[str, Callable[[Any], int]] = {}
_CORE_PART_KINDS = frozenset({"meta", "schedule", "progress", "occurrence"})


def register_part_kind(kind: str, budget_bytes: Callable[[Any], int]) -> None:
    """Allow extension parts named ``<kind>/...``; ``budget_bytes(value)`` gives a loaded part's
    budget (the same value ``put_extra`` was given), so the budget survives a reload."""
    if kind in _CORE_PART_KINDS or kind in _PART_KINDS or "/" in kind:
        raise ValueError(f"part kind {kind!r} is taken or malformed")
    _PART_KINDS[kind] = budget_bytes


# Bound kinds: at most one part ``<kind>/<occurrence id>`` per record, charged its maximum size.
# A live record reserves that room until the part exists, so writing it (a claim, a permit, a
# fence) moves bytes within the record's charge instead of raising the checkpoint budget: those
# commands always fit, like the core's own completions.
#
# ``fitted(record, value, schedule) -> int`` is the kind's rule-2 maximum for one record (its
# current value, or None while absent; its schedule, or None once deleted): it must bound every
# value a non-growth command can write under rules 2, and depend on nothing else.
# ``admits_v2(value)`` says why a part written under rules 1 would break that bound (the switch to
# rules 2 is then refused), or None.
Fitted = Callable[[Occurrence, Any, Schedule | None], int]
AdmitsV2 = Callable[[Any], str | None]
_BOUND_KINDS: dict[str, tuple[int, Fitted]] = {}
_ADMITS_V2: dict[str, AdmitsV2] = {}


def register_bound_part_kind(
    kind: str,
    part_bytes_max: int,
    fitted: Fitted | None = None,
    admits_v2: AdmitsV2 | None = None,
) -> None:
    """Allow parts ``<kind>/<occurrence id>`` bound to a record (retire them with ``on_retire``)."""
    register_part_kind(kind, lambda value: part_bytes_max)
    _BOUND_KINDS[kind] = (part_bytes_max, fitted or (lambda record, value, sched: part_bytes_max))
    _ADMITS_V2[kind] = admits_v2 or (lambda value: None)


def bound_part_admits_v2(kind: str, value: Any) -> str | None:
    return _ADMITS_V2[kind](value)


def bound_max_for(
    kind: str, record: Occurrence | None, value: Any, schedule: Schedule | None, rules: int
) -> int:
    """The most a ``<kind>/<record id>`` part may hold under ``rules`` (its kind's maximum under
    rules 1, or while its record is gone)."""
    part_bytes_max, fitted = _BOUND_KINDS[kind]
    if rules == CHARGING_V1 or record is None:
        return part_bytes_max
    return fitted(record, value, schedule)


def bound_part_max(kind: str) -> int | None:
    found = _BOUND_KINDS.get(kind)
    return None if found is None else found[0]


def bound_part_budget(data_bytes: int, part_bytes_max: int, record: Occurrence | None) -> int:
    """A bound part is charged its maximum while its record is live, and its size once the record
    is terminal (nothing writes it again) or gone."""
    return part_bytes_max if record is not None and not record.terminal else data_bytes


def bound_part_names(occurrence_id: int) -> list[str]:
    return [f"{kind}/{occurrence_id}" for kind in _BOUND_KINDS]
