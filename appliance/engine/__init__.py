"""The embedded V8 engine: a fresh V8 isolate per script, in reusable children (SPEC §7).

See docs/engine.md for what a script can do, the limits, the states and the process model.

Names are loaded lazily (PEP 562): every engine child imports this package on its way to
``appliance.engine.child`` and should not pay for the parent-side machinery it never uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from appliance.engine.capability import Reservation, SubmitCapability
    from appliance.engine.clock import Clock, SystemClock
    from appliance.engine.engine import Engine
    from appliance.engine.memory import InMemoryEngine
    from appliance.engine.model import (
        CapabilityError,
        DuplicateExecution,
        EngineClosed,
        EngineError,
        EngineStats,
        ExecutionReport,
        ExecutionRequest,
        ExecutionStatus,
        InvalidEngineConfig,
        InvalidExecutionRequest,
        PoolFull,
        ScheduledInfo,
        SubmitRefused,
        UnknownExecution,
    )
    from appliance.engine.process import child_command, kill_recorded_children

_HOMES = {
    "Reservation": "capability",
    "SubmitCapability": "capability",
    "Clock": "clock",
    "SystemClock": "clock",
    "Engine": "engine",
    "InMemoryEngine": "memory",
    "child_command": "process",
    "kill_recorded_children": "process",
    **{
        name: "model"
        for name in (
            "CapabilityError",
            "DuplicateExecution",
            "EngineClosed",
            "EngineError",
            "EngineStats",
            "ExecutionReport",
            "ExecutionRequest",
            "ExecutionStatus",
            "InvalidEngineConfig",
            "InvalidExecutionRequest",
            "PoolFull",
            "ScheduledInfo",
            "SubmitRefused",
            "UnknownExecution",
        )
    },
}

__all__ = [
    "CapabilityError",
    "Clock",
    "DuplicateExecution",
    "Engine",
    "EngineClosed",
    "EngineError",
    "EngineStats",
    "ExecutionReport",
    "ExecutionRequest",
    "ExecutionStatus",
    "InMemoryEngine",
    "InvalidEngineConfig",
    "InvalidExecutionRequest",
    "PoolFull",
    "Reservation",
    "ScheduledInfo",
    "SubmitCapability",
    "SubmitRefused",
    "SystemClock",
    "UnknownExecution",
    "child_command",
    "kill_recorded_children",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
