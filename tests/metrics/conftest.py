"""A real voter in process (tests/runner/harness: the loop, core, machine and single-voter Raft
with a manual clock and a scripted worker) behind a real management listener with observability,
built with the same metric seams as ``appliance runner`` (decision-log tee, timed replication)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.config.addresses import HostPort
from appliance.http import HttpClient
from appliance.management import BoundedCommandQueue, ManagementListener, ThreadedConsumer
from appliance.management.wiring import runner_handler
from appliance.metrics import (
    DecisionLogTee,
    RunnerMetrics,
    TimedReplication,
    VoterObservability,
)
from tests.management.conftest import TOKENS
from tests.runner.harness import Voter


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    found = samples(text)
    if key not in found:
        raise AssertionError(f"no sample {name}{labels} in the exposition")
    return found[key]


@dataclass
class Live:
    voter: Voter
    metrics: RunnerMetrics
    views: VoterObservability
    listener: ManagementListener
    http: HttpClient

    def get(self, path: str, role: str | None = "operator", **kwargs: Any) -> Any:
        bearer = None if role is None else TOKENS[role]
        return self.http.get(
            f"http://127.0.0.1:{self.listener.port}{path}", bearer=bearer, **kwargs
        )

    def json(self, path: str) -> dict[str, Any]:
        response = self.get(path)
        return {"_status": response.status, **json.loads(response.body)}

    def scrape(self) -> str:
        response = self.get("/metrics")
        assert response.status == 200, response.body
        return response.body.decode()


@pytest.fixture
def live() -> Iterator[Live]:
    metrics = RunnerMetrics()
    voter = Voter(wrap=lambda replication: TimedReplication(replication, metrics))
    # Injected at construction, as RunnerProcess does: the loop's decision log feeds the metrics.
    voter.runner.log = DecisionLogTee(voter.runner.log, metrics)
    with voter:
        views = VoterObservability(voter.runner, metrics=metrics)
        gateway = BoundedCommandQueue()
        consumer = ThreadedConsumer(gateway, runner_handler(voter.runner)).start()
        listener = ManagementListener(
            HostPort("127.0.0.1", 0), gateway, TOKENS, voter.cfg.limits, observability=views
        ).start()
        client = HttpClient(read_timeout_ms=30_000)
        try:
            yield Live(voter, metrics, views, listener, client)
        finally:
            client.close()
            listener.stop()
            consumer.stop()
            views.close()
