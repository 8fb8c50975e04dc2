"""The worker's answers as the owner acts on them (wire protocol 1, docs/protocol.md).

A leaf module: the owner core (appliance/runner/owner.py) reads these without importing the HTTP
client that produces them (appliance/runner/worker_client.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ExecResult:
    kind: str  # accepted | refused | not_dispatched | uncertain | retired
    execution_id: str | None = None
    code: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class ObserveResult:
    # reserved, running, completed, failed, timed_out, cancelled, lost, fenced; retired (at or
    # below the retention floor W: the worker keeps nothing and launches nothing)
    status: str | None
    document: dict[str, Any] | None = None
    detail: str = ""


@dataclass(frozen=True)
class CancelResult:
    result: str | None  # fenced_before_consume, stopped, completed, stopping, unknown
    report: dict[str, Any] | None = None
    detail: str = ""
