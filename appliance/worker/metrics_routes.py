"""The worker's metrics listener (``metrics_addr``): ``GET /metrics`` behind the worker bearer.

A separate listener, so the scheduled listener keeps exactly its three routes (SPEC §7) and an
operator can bind metrics to loopback only (the config refuses anything else). It runs the same
shared HTTP stack: bearer checked before routing (401), any other path 404 after authentication,
and no request body is ever read (the cap is tiny).
"""

from __future__ import annotations

from typing import Final

import falcon
from prometheus_client import CollectorRegistry

from appliance.http import create_app
from appliance.metrics.exposition import METRICS_PATH, MetricsResource
from appliance.secret import Secret

METRICS_BODY_BYTES_MAX: Final = 1024
ROLE: Final = "worker"


def create_worker_metrics_app(registry: CollectorRegistry, bearer: Secret) -> falcon.App:
    return create_app(
        routes={METRICS_PATH: MetricsResource(registry)},
        credentials={ROLE: bearer},
        accepted_roles={ROLE},
        body_bytes_max=METRICS_BODY_BYTES_MAX,
        surface="worker-metrics",
    )
