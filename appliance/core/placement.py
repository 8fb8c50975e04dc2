"""Which worker of the fleet runs an attempt: labels, and a pure, explainable placement decision.

Theory of operation (seeds/002, "resource requests, candidates, rejections, evaluations, decisions
and PlacementEngine"; issue 33 "Placement")
--------------------------------------------------------------------------------------------------
A definition may carry ``placement: {"labels": {…}, "prefer": {…}}``: ``labels`` are hard rules
(every pair must be one of the worker's labels), ``prefer`` soft ones (each pair a worker has
counts for it). The owner turns the fleet in force into candidates — each worker with its labels,
whether it may take new work (``active``) or not (``draining``, ``unreachable``), and what it
stated about its capacity (its ``max_concurrent + max_queued``, the places it has) with the
attempts this owner has in flight there — and asks :func:`place`.

Each candidate is either *rejected*, with every reason that applies (a label it lacks or holds
with another value, draining, unreachable), or *evaluated*: ``preferred`` (the ``prefer`` pairs it
matches) and ``free_bp`` (the places left after this attempt, in basis points of its capacity; an
unstated capacity counts as one place, the probe the owner sends before a worker stated anything).
The decision takes, in order: a worker whose last call was answered before one whose last call
failed (``failing``: not unreachable yet, see appliance/owner/fleet.py), a worker with a free
place before a full one (a full worker is not
rejected — the attempt then waits for its capacity there, as with a single worker), more
preferred pairs, more free room, then the smallest ``worker_id`` — a stable order, so the same
inputs give the same choice and the same explanation, whatever order the candidates came in.

When nothing may take it, ``selected`` is None and ``reason`` says why in one line
(``no worker matches labels {"zone":"b"} (worker-1: label zone: required "b", has "a")``): the
occurrence then stays Pending with that reason, and never becomes Unknown for it.

Pure: no clock, no I/O; integers only (no floating point in a decision).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from appliance.core.schema import INVALID, Problems, join, show, utf8_length

LABELS_MAX: Final = 16  # label pairs per worker, and per rule set of a definition
LABEL_KEY_BYTES_MAX: Final = 63
LABEL_VALUE_BYTES_MAX: Final = 63
LABEL_KEY_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]*")
LABEL_VALUE_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
LABEL_KEY_SAYS: Final = "1 to 63 characters of A-Z a-z 0-9 _ . / - starting with a letter or digit"
LABEL_VALUE_SAYS: Final = "1 to 63 characters of A-Z a-z 0-9 _ . - starting with a letter or digit"
CANDIDATES_MAX: Final = 64  # the fleet's own limit (remote.workers: 1-64 entries)
SCORE_SCALE: Final = 10_000  # basis points
TIE_BREAK_RULE: Final = (
    "an answering worker first, then a free place, then more preferred labels, then more free "
    "room, then the smallest worker_id"
)

ACTIVE: Final = "active"
DRAINING: Final = "draining"
UNREACHABLE: Final = "unreachable"
STATUSES: Final = (ACTIVE, DRAINING, UNREACHABLE)

Labels = tuple[tuple[str, str], ...]  # sorted by key: hashable, canonical


# ---- labels --------------------------------------------------------------------------------------


def labels_rule(value: object, path: str, problems: Problems) -> Any:
    """Schema rule: a JSON object of at most ``LABELS_MAX`` label pairs, parsed into sorted
    pairs. Keys and values are short identifiers, so a label never needs escaping."""
    if not isinstance(value, dict):
        return problems.add(path, f"must be an object of label: value pairs, got {show(value)}")
    before = len(problems)
    if len(value) > LABELS_MAX:
        problems.add(path, f"must hold at most {LABELS_MAX} labels, got {len(value)}")
    for key, item in value.items():
        here = join(path, str(key))
        size = utf8_length(key) if isinstance(key, str) else None
        if size is None or size > LABEL_KEY_BYTES_MAX or not LABEL_KEY_PATTERN.fullmatch(key):
            problems.add(here, f"the label name must be {LABEL_KEY_SAYS}")
        if not isinstance(item, str):
            problems.add(here, f"must be a string, got {show(item)}")
            continue
        size = utf8_length(item)
        if size is None or size > LABEL_VALUE_BYTES_MAX or not LABEL_VALUE_PATTERN.fullmatch(item):
            problems.add(here, f"must be {LABEL_VALUE_SAYS}, got {show(item)}")
    if len(problems) > before:
        return INVALID
    return tuple(sorted(value.items()))


def labels_json(labels: Labels) -> dict[str, str]:
    return dict(labels)


def labels_text(labels: Labels) -> str:
    """``{"zone":"b"}``: how a reason quotes a rule set (canonical JSON, sorted keys)."""
    return json.dumps(labels_json(labels), sort_keys=True, separators=(",", ":"))


def check_labels(field: str, value: Any) -> Labels:
    """The structural check of labels carried in a command (``ValueError`` naming the field)."""
    problems = Problems()
    if isinstance(value, tuple | list):
        try:
            value = dict(value)
        except (TypeError, ValueError):
            raise ValueError(f"{field}: must be label pairs") from None
    parsed = labels_rule(value, field, problems)
    if parsed is INVALID:
        path, message = problems.items[0]
        raise ValueError(f"{path}: {message}")
    return parsed


# ---- the request and the candidates -------------------------------------------------------------


@dataclass(frozen=True)
class PlacementRules:
    """A definition's ``placement``: hard ``labels`` and soft ``prefer`` (both sorted pairs)."""

    labels: Labels = ()
    prefer: Labels = ()

    def __bool__(self) -> bool:
        return bool(self.labels or self.prefer)


NO_PLACEMENT: Final = PlacementRules()


def placement_to_json(rules: PlacementRules) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rules.labels:
        out["labels"] = labels_json(rules.labels)
    if rules.prefer:
        out["prefer"] = labels_json(rules.prefer)
    return out


def placement_from_json(value: Mapping[str, Any] | None) -> PlacementRules:
    """Structural decode of a placement already validated (a checkpoint, a command)."""
    if not value:
        return NO_PLACEMENT
    return PlacementRules(
        tuple(sorted((value.get("labels") or {}).items())),
        tuple(sorted((value.get("prefer") or {}).items())),
    )


@dataclass(frozen=True)
class Candidate:
    """One worker as the owner sees it when it places an attempt."""

    worker_id: str
    labels: Labels = ()
    status: str = ACTIVE  # one of STATUSES
    places: int | None = None  # stated max_concurrent + max_queued; None: not stated yet
    in_flight: int = 0  # this owner's attempts that hold (or wait for) a place there
    failing: bool = False  # its last call failed (not unreachable yet): chosen last


@dataclass(frozen=True)
class Rejection:
    worker_id: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Evaluation:
    worker_id: str
    failing: bool
    has_room: bool
    preferred: int
    free_bp: int
    explanation: str


@dataclass(frozen=True)
class PlacementDecision:
    selected: str | None
    evaluations: tuple[Evaluation, ...]  # best first
    rejections: tuple[Rejection, ...]  # by worker_id
    explanation: str  # why this one (or why none), in one line
    reason: str | None  # set when nothing was selected: why the attempt waits


# ---- the decision --------------------------------------------------------------------------------


def place(rules: PlacementRules, candidates: Iterable[Candidate]) -> PlacementDecision:
    """The worker that should run an attempt under ``rules`` (see the module doc)."""
    ordered = sorted(candidates, key=lambda c: c.worker_id)
    if len(ordered) > CANDIDATES_MAX:
        raise ValueError(f"candidates: more than {CANDIDATES_MAX}")
    seen: set[str] = set()
    evaluations: list[Evaluation] = []
    rejections: list[Rejection] = []
    for candidate in ordered:
        if candidate.worker_id in seen:
            raise ValueError(f"candidates: worker_id {candidate.worker_id!r} given twice")
        seen.add(candidate.worker_id)
        if candidate.status not in STATUSES:
            raise ValueError(f"candidates: status {candidate.status!r} is not one of {STATUSES}")
        reasons = _rejections(rules, candidate)
        if reasons:
            rejections.append(Rejection(candidate.worker_id, reasons))
        else:
            evaluations.append(_evaluate(rules, candidate))
    evaluations.sort(
        key=lambda e: (e.failing, not e.has_room, -e.preferred, -e.free_bp, e.worker_id)
    )
    if not evaluations:
        reason = _no_worker(rules, rejections)
        return PlacementDecision(None, (), tuple(rejections), reason, reason)
    best = evaluations[0]
    explanation = (
        f"selected {best.worker_id} ({best.explanation}); {len(evaluations)} evaluated, "
        f"{len(rejections)} rejected"
    )
    tied = [
        e.worker_id
        for e in evaluations
        if (e.failing, e.has_room, e.preferred, e.free_bp)
        == (best.failing, best.has_room, best.preferred, best.free_bp)
    ]
    if len(tied) > 1:
        explanation += f"; tie between {', '.join(tied)} broken by the smallest worker_id"
    return PlacementDecision(
        best.worker_id, tuple(evaluations), tuple(rejections), explanation, None
    )


def _rejections(rules: PlacementRules, candidate: Candidate) -> tuple[str, ...]:
    reasons: list[str] = []
    if candidate.status != ACTIVE:
        reasons.append(candidate.status)
    have = dict(candidate.labels)
    for key, want in rules.labels:
        got = have.get(key)
        if got is None:
            reasons.append(f"label {key}: required {json.dumps(want)}, missing")
        elif got != want:
            reasons.append(f"label {key}: required {json.dumps(want)}, has {json.dumps(got)}")
    return tuple(reasons)


def _evaluate(rules: PlacementRules, candidate: Candidate) -> Evaluation:
    have = dict(candidate.labels)
    preferred = sum(1 for key, want in rules.prefer if have.get(key) == want)
    places = 1 if candidate.places is None else max(candidate.places, 1)
    free_after = places - candidate.in_flight - 1
    free_bp = free_after * SCORE_SCALE // places  # below 0 when full: the least loaded wins
    stated = "not stated" if candidate.places is None else f"{candidate.places} places"
    explanation = (
        f"{candidate.in_flight} in flight, capacity {stated}, "
        f"{max(free_after, 0)} free after this one"
    )
    if rules.prefer:
        explanation += f", {preferred} of {len(rules.prefer)} preferred labels"
    if candidate.failing:
        explanation += ", its last call failed"
    return Evaluation(
        candidate.worker_id, candidate.failing, free_after >= 0, preferred, free_bp, explanation
    )


def _no_worker(rules: PlacementRules, rejections: list[Rejection]) -> str:
    detail = "; ".join(f"{r.worker_id}: {', '.join(r.reasons)}" for r in rejections)
    # Every worker lacks a required label: no fleet change short of new labels helps.
    if rules.labels and all(
        any(reason.startswith("label ") for reason in r.reasons) for r in rejections
    ):
        return f"no worker matches labels {labels_text(rules.labels)} ({detail or 'no workers'})"
    return f"no worker may take new work ({detail or 'no workers'})"
