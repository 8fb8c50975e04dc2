"""What one committed command did: the apply hook's result, identical on every voter.

A leaf module, so the owner core reads apply results without importing the machine's locks and
checkpoint writer (appliance/runner/machine.py produces them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.core.errors import CoreError


@dataclass(frozen=True)
class Accepted:
    """The command applied; ``value`` is the core's result."""

    value: Any


@dataclass(frozen=True)
class Refused:
    """The command was committed but the core refused it (nothing changed)."""

    error: CoreError

    @property
    def message(self) -> str:
        return str(self.error)


class NotYetApplicable(CoreError):
    """Not proposed: some voter of the configuration has not reported that it applies this kind.

    A definite answer (nothing reached the log), reported like a refusal (docs/raft.md)."""
