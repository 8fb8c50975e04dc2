"""Serving a ``CollectorRegistry`` as the Prometheus text format on ``GET /metrics``.

The exposition is ``prometheus_client``'s own (never hand-written). Each process owns exactly one
registry (never the library's global default, which would mix in whatever else the interpreter
registered and make tests leak into each other); this resource only renders it. Authentication is
the surrounding app's job: the resource is mounted behind the listener's bearer middleware.
"""

from __future__ import annotations

import falcon
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

METRICS_PATH = "/metrics"


def render(registry: CollectorRegistry) -> bytes:
    """The registry in the text exposition format (collectors run now, at scrape time)."""
    return generate_latest(registry)


class MetricsResource:
    """``GET /metrics``: the process registry, collected at scrape time."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_200
        resp.content_type = CONTENT_TYPE_LATEST
        resp.data = render(self._registry)
