"""Operability: Prometheus metrics, health, history and output views (issue 10; docs/operations.md).

Modules, one job each: ``exposition`` (``GET /metrics`` from a registry), ``runner`` (a voter's
registry: scrape-time collector and event recorders), ``hooks`` (event metrics derived from the
decision log and the replication seam), ``voters`` (probing peers' Raft status), ``health``
(the health document and its warnings), ``history`` (occurrence detail and per-schedule history
from the replicated state), ``voter`` (all of it for a live runner), ``worker`` (the worker's
registry).
"""

from appliance.metrics.exposition import METRICS_PATH, MetricsResource, render
from appliance.metrics.hooks import DecisionLogTee, TimedReplication, observe_decision
from appliance.metrics.runner import RunnerCollector, RunnerMetrics, VoterView
from appliance.metrics.voter import VoterObservability, WorkerProbe
from appliance.metrics.voters import VoterProbe
from appliance.metrics.worker import WorkerMetrics

__all__ = [
    "METRICS_PATH",
    "DecisionLogTee",
    "MetricsResource",
    "RunnerCollector",
    "RunnerMetrics",
    "TimedReplication",
    "VoterObservability",
    "VoterProbe",
    "VoterView",
    "WorkerMetrics",
    "WorkerProbe",
    "observe_decision",
    "render",
]
