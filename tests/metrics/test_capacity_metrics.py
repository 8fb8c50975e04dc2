"""Waiting for the worker's capacity is a metric (issue 17, "Paced dispatch"): a counter of the
attempts that waited and a gauge of those waiting now, fed by the owner's decision log."""

from __future__ import annotations

from prometheus_client import generate_latest

from appliance.metrics.hooks import observe_decision
from appliance.metrics.runner import RunnerMetrics


def _value(metrics: RunnerMetrics, name: str) -> float:
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exposed")


def test_waits_are_counted_and_the_waiting_gauge_follows_the_decisions() -> None:
    metrics = RunnerMetrics()
    for waiting in (1, 2, 3):
        observe_decision(metrics, "capacity_wait", {"occurrence": waiting, "waiting": waiting})
    assert _value(metrics, "appliance_dispatch_capacity_waits_total") == 3
    assert _value(metrics, "appliance_dispatch_waiting_for_capacity") == 3
    observe_decision(metrics, "capacity_send", {"occurrence": 1, "waiting": 2})
    assert _value(metrics, "appliance_dispatch_waiting_for_capacity") == 2
    observe_decision(metrics, "capacity_waiting_cleared", {"dropped": 2, "waiting": 0})
    assert _value(metrics, "appliance_dispatch_waiting_for_capacity") == 0
    assert _value(metrics, "appliance_dispatch_capacity_waits_total") == 3  # sends do not count
