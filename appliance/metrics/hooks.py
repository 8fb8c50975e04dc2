"""Event metrics for a runner that makes no explicit ``record_*`` calls: two thin wrappers.

The runner loop already reports its decisions in the structured decision log
(``dispatch_accepted`` with ``late_ms``, ``admission`` with ``status`` and ``refusal``), and every
commit goes through ``replication.propose``. Wrapping those two seams at construction gives the
dispatch latency, the admission counters and the proposal commit latency without a single line in
the loop — the seams are injected (like the clock and the worker client), never monkey-patched:

    metrics = RunnerMetrics()
    log = DecisionLogTee(DecisionLog(node_id, stderr), metrics)
    replication = TimedReplication(member.replication, metrics)
    runner = Runner(..., replication=replication, log=log)

A wrapper never changes what it wraps: same arguments, same results, same exceptions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from appliance.metrics.runner import RunnerMetrics
from appliance.replication.errors import NotLeader, ProposalLost


class DecisionLogTee:
    """A decision log that also feeds the event metrics (``emit`` is the whole interface)."""

    def __init__(self, inner: Any, metrics: RunnerMetrics) -> None:
        self._inner = inner
        self._metrics = metrics

    def emit(self, event: str, **fields: Any) -> None:
        self._inner.emit(event, **fields)
        observe_decision(self._metrics, event, fields)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def observe_decision(metrics: RunnerMetrics, event: str, fields: dict[str, Any]) -> None:
    """Map one decision-log event to the event metrics it implies (others are ignored)."""
    if event == "dispatch_accepted":
        late_ms = fields.get("late_ms")
        if isinstance(late_ms, int | float):
            live = fields.get("slot", "live") == "live"  # owner/lateness.py
            metrics.record_dispatch_accepted(late_ms / 1000.0, live=live)
    elif event in ("capacity_wait", "capacity_send", "capacity_waiting_cleared"):
        waiting = fields.get("waiting")
        if isinstance(waiting, int):
            metrics.record_capacity_wait(waiting, began=event == "capacity_wait")
    elif event == "claim" and isinstance(fields.get("worker"), str):
        metrics.record_worker_claim(fields["worker"])
    elif event in ("worker_unreachable", "worker_reachable") and isinstance(
        fields.get("worker"), str
    ):
        metrics.record_worker_reachable(fields["worker"], event == "worker_reachable")
    elif event == "unreachable_fenced" and isinstance(fields.get("worker"), str):
        metrics.record_worker_failover(fields["worker"])
    elif event == "admission":
        status = fields.get("status")
        if isinstance(status, int):
            refusal = fields.get("refusal")
            metrics.record_admission(status, refusal if isinstance(refusal, str) else None)


class TimedReplication:
    """A replication whose ``propose`` is timed and counted by outcome; all else passes through."""

    def __init__(
        self,
        inner: Any,
        metrics: RunnerMetrics,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._metrics = metrics
        self._monotonic = monotonic

    def propose(self, command: bytes, *, timeout_s: float) -> Any:
        started = self._monotonic()
        try:
            result = self._inner.propose(command, timeout_s=timeout_s)
        except NotLeader:
            self._metrics.record_proposal(0.0, "not_leader")
            raise
        except ProposalLost:
            self._metrics.record_proposal(0.0, "lost")
            raise
        except Exception:
            self._metrics.record_proposal(0.0, "uncertain")
            raise
        self._metrics.record_proposal(self._monotonic() - started, "committed")
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
