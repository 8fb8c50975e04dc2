"""What the worker's launch core needs from the outside: a store, an engine, a clock, a crash hook.

Theory of operation. ``appliance/worker/launch.py`` decides; these ``typing.Protocol`` interfaces
are everything it touches. Two implementations exist of each: the real ones (``WorkerStore`` on
SQLite, ``Engine`` with V8 children, the system clock) that ``WorkerService`` wires for the
process, and in-memory ones (``appliance/worker/memory_store.py``, the system simulator's engine
and clock in ``appliance/sim/system/``) that run the same decisions deterministically.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from appliance.engine.model import ExecutionReport, ExecutionRequest
from appliance.protocol.v1 import Invocation
from appliance.store.worker_store import ExecutionRecord, InvocationRecord, Pruned, Reserved

Recheck = Callable[[], bool]
EngineListener = Callable[[ExecutionReport], None]


class LaunchStore(Protocol):
    """The worker store's contract (appliance/store/worker_store.py documents each rule)."""

    @property
    def incarnation_id(self) -> str: ...

    def get(self, invocation: Invocation) -> InvocationRecord | None: ...

    def reserve(
        self, invocation: Invocation, binding: dict[str, Any], *, now_ms: int
    ) -> Reserved: ...

    def record_permit(
        self, invocation: Invocation, permit: dict[str, Any], *, now_ms: int
    ) -> InvocationRecord: ...

    def consume(
        self, invocation: Invocation, *, execution_id: str, now_ms: int
    ) -> ExecutionRecord: ...

    def fence(self, invocation: Invocation, *, reason: str, now_ms: int) -> InvocationRecord: ...

    def record_receipt(
        self,
        invocation: Invocation,
        receipt: dict[str, Any],
        *,
        now_ms: int,
        durable: bool = True,
    ) -> InvocationRecord: ...

    def get_execution(self, execution_id: str) -> ExecutionRecord | None: ...

    def update_execution(
        self,
        execution_id: str,
        *,
        status: str,
        now_ms: int,
        output: bytes | None = None,
        result: Any = None,
        error: str | None = None,
        durable: bool = True,
    ) -> ExecutionRecord: ...

    def unfinished_from_previous_incarnations(self) -> list[ExecutionRecord]: ...

    def retained_through(self) -> int: ...

    def prune_through(self, retained_through: int, *, rows_max: int) -> Pruned: ...


class SubmitCapability(Protocol):
    def submit(self) -> ExecutionReport: ...


class EngineReservation(Protocol):
    """One unit of pool capacity (appliance/engine/capability.py)."""

    def capability(self, request: ExecutionRequest, recheck: Recheck) -> SubmitCapability: ...

    def release(self) -> None: ...


class LaunchEngine(Protocol):
    """The engine's contract as the worker uses it (appliance/engine/pool.py)."""

    def reserve(self) -> EngineReservation: ...

    def cancel(self, execution_id: str, wait_seconds: float = 5.0) -> ExecutionReport: ...

    def status(self, execution_id: str) -> ExecutionReport: ...

    def add_listener(self, listener: EngineListener) -> None: ...

    def capacity(self) -> tuple[int, int, int]:
        """``(max_concurrent, max_queued, reserved)``; optional (the core asks with getattr)."""
        ...


class Clock(Protocol):
    def now(self) -> datetime: ...


class StepHook(Protocol):
    """Told after each named step of the launch path (appliance/worker/crash.py lists them)."""

    def after(self, step: str) -> None: ...
