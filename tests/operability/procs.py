"""Real ``appliance runner`` / ``appliance worker`` processes with metrics for operability tests.

Built on tests/runner/cluster.py: the same voters and worker, plus a management listener per
voter, the worker's ``metrics_addr`` listener, and a voter clock shift (``--clock-offset-seconds``)
so a test can place a voter at an exact instant of the calendar and "sleep" it across slots.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from appliance.http import HttpClient
from tests.runner.cluster import ENV, Cluster, Voter, free_ports

OPERATOR_TOKEN = ENV["RUNNER_OPERATOR_TOKEN"]
WORKER_TOKEN = ENV["RUNNER_WORKER_TOKEN"]


class ShiftedVoter(Voter):
    """A voter whose wall clock is shifted by ``offset_s`` (set before each ``start``)."""

    offset_s: float | None = None

    def start(self) -> None:
        argv = [
            sys.executable, "-m", "appliance", "runner", str(self.config),
            "--time-scale", str(self.time_scale),
        ]  # fmt: skip
        if self.offset_s is not None:
            argv += ["--clock-offset-seconds", f"{self.offset_s:.3f}"]
        with open(self.log, "a") as err:
            self.proc = subprocess.Popen(
                argv,
                env={**os.environ, **ENV},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self._replies = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self._replies), daemon=True).start()


class ObservedCluster(Cluster):
    """A ``Cluster`` with management listeners on every voter and worker metrics."""

    def __init__(self, root: Path, size: int, **kwargs: Any) -> None:
        ports = free_ports(size + 1)
        self.management_ports = {f"v{i}": ports[i - 1] for i in range(1, size + 1)}
        self.worker_metrics_port = ports[-1]
        super().__init__(root, size, management_ports=self.management_ports, **kwargs)
        for node_id, voter in list(self.voters.items()):
            shifted = ShiftedVoter(node_id, voter.config, voter.log, voter.time_scale)
            self.voters[node_id] = shifted
        doc = json.loads(self.worker.config.read_text())
        doc["metrics_addr"] = f"127.0.0.1:{self.worker_metrics_port}"
        self.worker.config.write_text(json.dumps(doc))
        self.http = HttpClient(read_timeout_ms=20_000)

    def stop(self) -> None:
        super().stop()
        self.http.close()

    def management(self, node_id: str, path: str, token: str = OPERATOR_TOKEN) -> Any:
        port = self.management_ports[node_id]
        return self.http.get(f"http://127.0.0.1:{port}{path}", bearer=token)

    def view(self, node_id: str, path: str) -> dict[str, Any]:
        response = self.management(node_id, path)
        if response.status != 200:
            raise AssertionError(f"{node_id} {path}: HTTP {response.status} {response.body!r}")
        return json.loads(response.body)

    def scrape_voter(self, node_id: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        response = self.management(node_id, "/metrics")
        if response.status != 200:
            raise AssertionError(f"{node_id} /metrics: HTTP {response.status}")
        return parse(response.body.decode())

    def scrape_worker(self, token: str = WORKER_TOKEN) -> Any:
        return self.http.get(f"http://127.0.0.1:{self.worker_metrics_port}/metrics", bearer=token)


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def sample(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str):
    return found.get((name, tuple(sorted(labels.items()))))
