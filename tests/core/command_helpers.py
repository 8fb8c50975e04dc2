"""Builders for the tests of the operator commands (run_now, enable, update, pause, backfill)."""

from __future__ import annotations

from appliance.core.calendar import compile_schedule
from appliance.core.definition import definition_to_json, parse_definition
from appliance.core.limits import Limits
from appliance.core.state import CreateSchedule, SchedulerState, apply, from_json

T0 = 1_800_000_000 - 1_800_000_000 % 3600  # a whole hour
MINUTE = 60
EVERY_MINUTE = compile_schedule("* * * * *", "UTC")


def body(code="console.log('v1')", cron="* * * * *", overlap="Queue", jitter=0, **policy):
    out = {
        "name": "job",
        "code": code,
        "cron": cron,
        "timezone": "UTC",
        "policy": {
            "missed": policy.pop("missed", "Skip"),
            "overlap": overlap,
            "retry": {
                "max_retries": policy.pop("max_retries", 0),
                "delay_seconds": policy.pop("delay_seconds", 0),
            },
        },
    }
    if jitter:
        out["policy"]["jitter_seconds"] = jitter
    return out


def definition(limits=None, **kwargs):
    return parse_definition(body(**kwargs), limits or Limits())


def state_with(limits=None, at_s=T0 - 1, **kwargs) -> SchedulerState:
    """A store with schedule 1 created at ``at_s`` (cursor there)."""
    state = SchedulerState(limits or Limits())
    apply(state, CreateSchedule(definition(limits, **kwargs), at_s))
    return state


def reloads_identically(state: SchedulerState) -> None:
    """The checkpoint decodes to the same bytes and the same budget (deterministic encoding)."""
    again = from_json(state.to_json())
    assert again.to_json() == state.to_json()
    assert again.budget_bytes == state.budget_bytes
    assert again.size_bytes == state.size_bytes == len(state.to_json())


__all__ = ["definition_to_json"]
