"""Deterministic, explainable placement of a resource request onto candidates.

Theory of operation: the engine is a pure function of (request, candidates). Each candidate is
either rejected, with every reason that applies, or evaluated with an integer score: the smallest
remaining headroom after placement across the requested dimensions, in basis points of capacity
(so the choice spreads load and never depends on floating point). The decision picks the highest
score; ties go to the lexicographically smallest ``candidate_id``. Same inputs, in any order,
give the same decision and the same explanation text.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .errors import SchedulerError

CANDIDATES_MAX = 1024
CANDIDATE_ID_BYTES_MAX = 128
RESOURCE_MAX = 2**40
SCORE_SCALE = 10_000  # basis points
TIE_BREAK_RULE = "highest score wins; equal scores go to the smallest candidate_id"


class InvalidPlacementInput(SchedulerError, ValueError):
    """A request or candidate outside its limits, or duplicate candidate ids."""


@dataclass(frozen=True)
class Resources:
    cpu_millis: int = 0
    memory_mb: int = 0

    def __post_init__(self) -> None:
        for name in ("cpu_millis", "memory_mb"):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= RESOURCE_MAX:
                raise InvalidPlacementInput(f"{name}: {value!r} not an integer in 0..2^40")

    def items(self) -> tuple[tuple[str, int], ...]:
        return (("cpu_millis", self.cpu_millis), ("memory_mb", self.memory_mb))


@dataclass(frozen=True)
class ResourceRequest:
    resources: Resources
    required_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Candidate:
    candidate_id: str
    capacity: Resources
    allocated: Resources = field(default_factory=Resources)
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= len(self.candidate_id.encode()) <= CANDIDATE_ID_BYTES_MAX:
            raise InvalidPlacementInput(f"candidate_id: must be 1..{CANDIDATE_ID_BYTES_MAX} bytes")


@dataclass(frozen=True)
class Rejection:
    candidate_id: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Evaluation:
    candidate_id: str
    score: int
    free_after: Resources
    explanation: str


@dataclass(frozen=True)
class PlacementDecision:
    selected: str | None
    evaluations: tuple[Evaluation, ...]  # best first
    rejections: tuple[Rejection, ...]  # by candidate_id
    explanation: str


class PlacementEngine:
    tie_break_rule = TIE_BREAK_RULE

    def place(self, request: ResourceRequest, candidates: Iterable[Candidate]) -> PlacementDecision:
        ordered = sorted(candidates, key=lambda c: c.candidate_id)
        if len(ordered) > CANDIDATES_MAX:
            raise InvalidPlacementInput(f"more than {CANDIDATES_MAX} candidates")
        for previous, current in itertools.pairwise(ordered):
            if previous.candidate_id == current.candidate_id:
                raise InvalidPlacementInput(f"duplicate candidate_id {current.candidate_id!r}")
        evaluations: list[Evaluation] = []
        rejections: list[Rejection] = []
        for candidate in ordered:
            reasons = _rejection_reasons(request, candidate)
            if reasons:
                rejections.append(Rejection(candidate.candidate_id, reasons))
            else:
                evaluations.append(_evaluate(request, candidate))
        evaluations.sort(key=lambda e: (-e.score, e.candidate_id))
        if not evaluations:
            selected = None
            explanation = f"no candidate fits: {len(rejections)} rejected"
        else:
            best = evaluations[0]
            selected = best.candidate_id
            tied = [e.candidate_id for e in evaluations if e.score == best.score]
            explanation = (
                f"selected {selected} with score {best.score} ({best.explanation}); "
                f"{len(evaluations)} evaluated, {len(rejections)} rejected"
            )
            if len(tied) > 1:
                explanation += f"; tie between {', '.join(tied)} broken by {TIE_BREAK_RULE}"
        return PlacementDecision(selected, tuple(evaluations), tuple(rejections), explanation)


def _rejection_reasons(request: ResourceRequest, candidate: Candidate) -> tuple[str, ...]:
    reasons = []
    for (name, want), (_, capacity), (_, used) in zip(
        request.resources.items(),
        candidate.capacity.items(),
        candidate.allocated.items(),
        strict=True,
    ):
        free = max(capacity - used, 0)
        if want > free:
            reasons.append(f"{name}: requested {want}, free {free}")
    for label in sorted(request.required_labels):
        want_value = request.required_labels[label]
        have = candidate.labels.get(label)
        if have is None:
            reasons.append(f"label {label}: required {want_value!r}, missing")
        elif have != want_value:
            reasons.append(f"label {label}: required {want_value!r}, has {have!r}")
    return tuple(reasons)


def _evaluate(request: ResourceRequest, candidate: Candidate) -> Evaluation:
    free_after = {}
    headroom = []
    for (name, want), (_, capacity), (_, used) in zip(
        request.resources.items(),
        candidate.capacity.items(),
        candidate.allocated.items(),
        strict=True,
    ):
        free_after[name] = capacity - used - want
        if capacity > 0:
            points = free_after[name] * SCORE_SCALE // capacity
            headroom.append((points, name))
    score, tightest = min(headroom) if headroom else (SCORE_SCALE, "none")
    explanation = (
        f"tightest dimension {tightest} keeps {score}/{SCORE_SCALE} of capacity free "
        f"(cpu_millis free {free_after['cpu_millis']}, memory_mb free {free_after['memory_mb']})"
    )
    return Evaluation(candidate.candidate_id, score, Resources(**free_after), explanation)
