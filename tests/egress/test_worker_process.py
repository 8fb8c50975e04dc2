"""The real worker process with an ``egress`` section: it refuses to start on a policy or a
credential that cannot work, and no credential value ever reaches its files, logs or metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.egress.conftest import ALLOW_ALL
from tests.worker.peers import (
    ADMISSION_TOKEN,
    NAMESPACE,
    WORKER_ID,
    WORKER_TOKEN,
    AdmissionPeer,
    closed_port,
    exec_body,
    execution_id,
    free_port,
    running_worker,
)

HOOK_SECRET = "Bearer egress-hook-secret-5b1e7d"
API_SECRET = "egress-api-key-c0ffee-9172"
TOKENS = {"TEST_WORKER_TOKEN": WORKER_TOKEN, "TEST_ADMISSION_TOKEN": ADMISSION_TOKEN}
CREDENTIALS = [
    {
        "origin": "https://hooks.example.com",
        "path_prefix": "/hooks/",
        "header": "Authorization",
        "value_env": "EGRESS_HOOK_TOKEN",
    },
    {"origin": "http://127.0.0.1:9", "header": "X-Api-Key", "value_env": "EGRESS_API_KEY"},
]
SECRETS = {"EGRESS_HOOK_TOKEN": HOOK_SECRET, "EGRESS_API_KEY": API_SECRET}


def config(tmp_path: Path, egress: dict[str, Any]) -> Path:
    document = {
        "namespace": NAMESPACE,
        "worker_id": WORKER_ID,
        "data_dir": str(tmp_path / "data"),
        "bearer_env": "TEST_WORKER_TOKEN",
        "admission_bearer_env": "TEST_ADMISSION_TOKEN",
        "admission_urls": [f"http://127.0.0.1:{closed_port()}"],
        "listen_addr": f"127.0.0.1:{free_port()}",
        "egress": egress,
    }
    path = tmp_path / "worker.json"
    path.write_text(json.dumps(document))
    return path


def start(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {key: os.environ[key] for key in ("PATH", "PYTHONPATH") if key in os.environ}
    return subprocess.run(
        [sys.executable, "-m", "appliance", "worker", "--config", str(path)],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_missing_policy_file_stops_the_worker(tmp_path: Path) -> None:
    result = start(config(tmp_path, {"policy_file": "absent.rego"}), TOKENS)
    assert result.returncode == 2
    assert "egress.policy_file" in result.stderr
    assert str(tmp_path / "absent.rego") in result.stderr  # relative to the config file
    assert result.stdout == ""  # never ready
    assert not (tmp_path / "data").exists()  # nothing was opened


def test_an_invalid_policy_stops_the_worker_naming_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "egress.rego").write_text(
        "package appliance.egress\n\nimport rego.v1\n\nallow if {\n    input.method == == 1\n}\n"
    )
    result = start(config(tmp_path, {"policy_file": "egress.rego"}), TOKENS)
    assert result.returncode == 2
    assert f"{tmp_path / 'egress.rego'}:6:" in result.stderr
    assert "Invalid boolean operator" in result.stderr


def test_a_module_of_another_package_stops_the_worker(tmp_path: Path) -> None:
    (tmp_path / "egress.rego").write_text("package scripts\nallow := true\n")
    result = start(config(tmp_path, {"policy_file": "egress.rego"}), TOKENS)
    assert result.returncode == 2 and "package appliance.egress" in result.stderr


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("Bearer abc\r\nX-Injected: yes", "CR or LF"),
        (WORKER_TOKEN, "the worker's own credentials"),
        (f"Bearer {ADMISSION_TOKEN}", "the worker's own credentials"),
    ],
)
def test_a_credential_value_that_cannot_be_used_stops_the_worker_without_showing_it(
    tmp_path: Path, value: str, says: str
) -> None:
    (tmp_path / "egress.rego").write_text(ALLOW_ALL)
    egress = {"policy_file": "egress.rego", "credentials": CREDENTIALS}
    result = start(config(tmp_path, egress), {**TOKENS, **SECRETS, "EGRESS_API_KEY": value})
    assert result.returncode == 2
    assert "egress.credentials[1].value_env" in result.stderr and says in result.stderr
    assert value not in result.stderr and value not in result.stdout
    assert HOOK_SECRET not in result.stderr


def every_file_under(folder: Path) -> bytes:
    contents = b""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            contents += path.read_bytes()
    return contents


def test_no_credential_value_reaches_the_workers_files_logs_or_metrics(tmp_path: Path) -> None:
    (tmp_path / "egress.rego").write_text(ALLOW_ALL)
    metrics_port = free_port()
    admission = AdmissionPeer("grant")
    try:
        with running_worker(
            tmp_path,
            [admission.url],
            extra_env=SECRETS,
            extra_config={
                "egress": {
                    "policy_file": str(tmp_path / "egress.rego"),
                    "credentials": CREDENTIALS,
                },
                "metrics_addr": f"127.0.0.1:{metrics_port}",
            },
        ) as worker:
            code = "console.log('ran', typeof scheduled); ({ok: true})"
            assert worker.exec(exec_body(code, occurrence_id=41)).status == 202
            document = worker.wait_terminal(execution_id(41))
            assert document["status"] == "completed"
            request = urllib.request.Request(
                f"http://127.0.0.1:{metrics_port}/metrics",
                headers={"Authorization": f"Bearer {WORKER_TOKEN}"},
            )
            with urllib.request.urlopen(request, timeout=10) as answer:
                metrics = answer.read()
            observed = worker.observe(execution_id(41)).body
            ready = json.dumps(worker.ready).encode()
        log = worker.stderr_path.read_bytes()
    finally:
        admission.close()
    assert b'appliance_egress_requests_total{decision="allow"}' in metrics
    stored = every_file_under(tmp_path / "data")
    assert stored  # the store and the child pid file exist
    for secret in (HOOK_SECRET, API_SECRET):
        for where, text in (
            ("the worker's files", stored),
            ("the worker's log", log),
            ("the metrics", metrics),
            ("the execution document", observed),
            ("the ready line", ready),
        ):
            assert secret.encode() not in text, f"a credential value reached {where}"
