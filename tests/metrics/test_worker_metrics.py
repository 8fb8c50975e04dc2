"""The worker's separate metrics listener (``metrics_addr``) on a real ``appliance worker``."""

from __future__ import annotations

import json
from pathlib import Path

from appliance.http import HttpClient
from tests.metrics.conftest import samples
from tests.runner.cluster import ENV, Worker, free_ports

TOKEN = ENV["RUNNER_WORKER_TOKEN"]


def test_metrics_listen_apart_from_the_three_scheduled_routes_behind_the_worker_bearer(
    tmp_path: Path,
) -> None:
    port, metrics_port, admission_port = free_ports(3)
    worker = Worker(tmp_path, port, [admission_port])
    doc = json.loads(worker.config.read_text())
    worker.config.write_text(json.dumps({**doc, "metrics_addr": f"127.0.0.1:{metrics_port}"}))
    client = HttpClient(read_timeout_ms=10_000)
    metrics_url = f"http://127.0.0.1:{metrics_port}"
    try:
        worker.start()
        scraped = client.get(metrics_url + "/metrics", bearer=TOKEN)
        assert scraped.status == 200
        assert (scraped.header("Content-Type") or "").startswith("text/plain")
        found = samples(scraped.body.decode())
        for outcome in ("completed", "failed", "timed_out", "cancelled", "lost"):
            assert found[("appliance_engine_executions_total", (("outcome", outcome),))] == 0
        assert found[("appliance_engine_pool_max_concurrent", ())] == 4
        assert found[("appliance_engine_pool_max_queued", ())] == 16
        assert found[("appliance_engine_pool_queued", ())] == 0
        assert found[("appliance_worker_store_invocations", ())] == 0
        assert found[("appliance_worker_store_receipts", ())] == 0
        # The bearer is checked first; only /metrics is mounted on this listener.
        assert client.get(metrics_url + "/metrics").status == 401
        assert (
            client.get(metrics_url + "/metrics", bearer=ENV["RUNNER_ADMISSION_TOKEN"]).status == 401
        )
        assert client.get(metrics_url + "/api/scheduled/v1/executions/s1-o1-a1",
                          bearer=TOKEN).status == 404  # fmt: skip
        # The scheduled listener keeps only its three routes.
        assert client.get(f"http://127.0.0.1:{port}/metrics", bearer=TOKEN).status == 404
    finally:
        client.close()
        worker.stop()
