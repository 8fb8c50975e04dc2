"""What one permit request came to (appliance/worker/admission.py makes it; the core reads it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Attempt:
    """One URL tried: what happened there (for the record and the logs)."""

    url: str
    outcome: str  # "granted", "409", "connect_failed", "403", "ambiguous", "status_<n>", ...
    detail: str = ""


@dataclass(frozen=True)
class AdmissionResult:
    """``kind``: granted | refused (403) | uncertain (stop, a permit may exist) | unavailable."""

    kind: str
    permit: dict[str, Any] | None
    reason: str
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)

    def summary(self) -> str:
        tried = ", ".join(f"{a.url} -> {a.outcome}" for a in self.attempts)
        return f"{self.kind}: {self.reason} [{tried}]"
