"""Shared builders for the runner-command tests: an owned store with bound claims."""

from __future__ import annotations

from dataclasses import replace

from appliance.core.limits import Limits
from appliance.core.state import (
    AcquireOwnership,
    Admit,
    Authority,
    Binding,
    ClaimOccurrence,
    SchedulerState,
    apply,
    binding_for,
    current_epoch,
)
from tests.core.test_state import T0, new_state, observe

NAMESPACE = "operator-scheduler-1"
WORKER = "worker-1"
EXPIRES_AT = "2027-01-15T09:00:00Z"
EXPIRES_AT_S = 1_800_003_600  # the same instant: T0 + 3600
AUTHORITY = Authority(expires_at=EXPIRES_AT, timeout_seconds=300, heap_mb=128, session="ops")


def owned_state(limits: Limits | None = None, node: str = "voter-a", term: int = 1, **policy):
    """A store with schedule 1 (``* * * * *``), acquired by ``node``, and occurrence 1 Pending."""
    state = new_state(limits, **policy)
    apply(state, AcquireOwnership(node, term, T0 - 1))
    observe(state, T0)
    return state


def bind(state: SchedulerState, occurrence_id: int = 1, **changes) -> Binding:
    binding = binding_for(
        state, occurrence_id, namespace=NAMESPACE, worker_id=WORKER, authority=AUTHORITY
    )
    return replace(binding, **changes)


def claim(state: SchedulerState, occurrence_id: int = 1, at_s: int = T0 + 1, **changes) -> Binding:
    binding = bind(state, occurrence_id, **changes)
    command = ClaimOccurrence(occurrence_id, binding.attempt, current_epoch(state), binding, at_s)
    apply(state, command)
    return binding


def admit(state: SchedulerState, binding: Binding, incarnation: str = "inc-1", at_s=T0 + 2):
    return apply(state, Admit(binding, incarnation, at_s)).value
