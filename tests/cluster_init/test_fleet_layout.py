"""``cluster init --workers N`` (issue 33): N worker configs, one fleet in every voter's remote."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from appliance.cli.main import main
from appliance.cluster_init.layout import (
    BASE_PORT_MIN,
    PORT_SPAN,
    WORKERS_MAX,
    InvalidLayout,
    lay_out,
    plan_ports,
)
from appliance.config.contract import contract_digest
from appliance.config.credentials import resolve_runner_credentials, resolve_worker_credentials
from appliance.config.runner import parse_runner_config
from appliance.config.worker import parse_worker_config

NOW = datetime(2026, 11, 29, 20, 0, 0, tzinfo=UTC)
OUT = Path("/srv/cluster")


@pytest.mark.parametrize("tls", [False, True])
def test_n_workers_are_one_fleet_sealed_alike_on_every_voter(tls: bool) -> None:
    files = lay_out(3, 7100, OUT, NOW, tls=tls, workers=3)
    assert sorted(files.worker_configs) == ["worker-1.json", "worker-2.json", "worker-3.json"]
    runners = [parse_runner_config(doc) for doc in files.runner_configs.values()]
    assert len({contract_digest(cfg) for cfg in runners}) == 1
    fleet = runners[0].remote.fleet
    assert [(w.worker_id, w.url.port, dict(w.labels)) for w in fleet] == [
        ("worker-1", 7130, {"zone": "a"}),
        ("worker-2", 7131, {"zone": "b"}),
        ("worker-3", 7132, {"zone": "c"}),
    ]
    assert all(w.url.scheme == ("https" if tls else "http") for w in fleet)
    for j, (name, document) in enumerate(files.worker_configs.items()):
        worker = parse_worker_config(document)
        assert worker.worker_id == fleet[j].worker_id and worker.listen_addr.port == 7130 + j
        assert worker.namespace == runners[0].remote.namespace
        assert name == f"{worker.worker_id}.json"
        resolve_worker_credentials(worker, files.credentials)
        assert (worker.tls is not None) == tls
    resolve_runner_credentials(runners[0], files.credentials)
    if tls:
        assert {"worker-2.pem", "worker-2.key", "worker-3.pem"} <= set(files.tls_files)


def test_one_worker_keeps_the_one_worker_form_and_file() -> None:
    files = lay_out(3, 7100, OUT, NOW)
    assert list(files.worker_configs) == ["worker.json"]
    remote = next(iter(files.runner_configs.values()))["remote"]
    assert "workers" not in remote and remote["worker_id"] == "worker-1"


def test_the_worker_count_and_port_span_are_bounded_exactly() -> None:
    assert plan_ports(1, 7100, WORKERS_MAX).worker_ports[-1] == 7100 + 30 + WORKERS_MAX - 1
    with pytest.raises(InvalidLayout, match="--workers"):
        plan_ports(1, 7100, WORKERS_MAX + 1)
    with pytest.raises(InvalidLayout, match="--workers"):
        plan_ports(1, 7100, 0)
    # The base port's upper bound leaves room for every worker's port.
    span = PORT_SPAN + 3
    plan_ports(1, 65535 - span + 1, 4)
    with pytest.raises(InvalidLayout, match="--base-port"):
        plan_ports(1, 65535 - span + 2, 4)
    plan_ports(1, BASE_PORT_MIN, 4)


def test_the_cli_writes_every_worker_config(tmp_path: Path, capsys) -> None:
    out = tmp_path / "fleet"
    code = main(
        ["cluster", "init", "--voters", "1", "--workers", "2", "--no-tls", "--out", str(out)]
    )
    assert code == 0
    assert "with 2 workers" in capsys.readouterr().out
    for name in ("worker-1.json", "worker-2.json"):
        assert json.loads((out / name).read_text())["worker_id"] == name.removesuffix(".json")
    readme = (out / "README.md").read_text()
    assert "worker --config worker-2.json" in readme and "zone=b" in readme
