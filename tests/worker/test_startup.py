"""Start-up: config from the environment or a file, fail-closed refusals, recorded engine
children of an earlier incarnation killed before anything else runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.engine.protocol import PARENT_PID_ENV
from appliance.worker.child_pids import FILE_NAME
from tests.worker.peers import (
    ADMISSION_TOKEN,
    NAMESPACE,
    WORKER_ID,
    WORKER_TOKEN,
    closed_port,
    free_port,
    running_worker,
    wait_gone,
)


def config(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    document = {
        "namespace": NAMESPACE,
        "worker_id": WORKER_ID,
        "data_dir": str(tmp_path / "data"),
        "bearer_env": "TEST_WORKER_TOKEN",
        "admission_bearer_env": "TEST_ADMISSION_TOKEN",
        "admission_urls": [f"http://127.0.0.1:{closed_port()}"],
        "listen_addr": f"127.0.0.1:{free_port()}",
    }
    document.update(changes)
    return document


def start(env: dict[str, str], *args: str, timeout_seconds: float = 60.0):
    base = {key: os.environ[key] for key in ("PATH",) if key in os.environ}
    return subprocess.run(
        [sys.executable, "-m", "appliance", "worker", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=timeout_seconds,
    )


TOKENS = {"TEST_WORKER_TOKEN": WORKER_TOKEN, "TEST_ADMISSION_TOKEN": ADMISSION_TOKEN}


@pytest.mark.parametrize(
    ("changes", "env", "says"),
    [
        ({"surprise": 1}, TOKENS, "surprise: unknown field"),
        ({}, {"TEST_WORKER_TOKEN": WORKER_TOKEN}, "TEST_ADMISSION_TOKEN is not set"),
        (
            {},
            {"TEST_WORKER_TOKEN": "same-token", "TEST_ADMISSION_TOKEN": "same-token"},
            "every credential must differ",
        ),
        ({"engine": {"output_limit_bytes": 262_145}}, TOKENS, "engine.output_limit_bytes"),
        ({"admission_urls": ["http://10.0.0.1:80"]}, TOKENS, "use https"),
    ],
)
def test_an_invalid_config_or_credential_refuses_to_start(
    tmp_path: Path, changes: dict, env: dict, says: str
) -> None:
    path = tmp_path / "worker.json"
    path.write_text(json.dumps(config(tmp_path, **changes)))
    result = start(env, "--config", str(path))
    assert result.returncode == 2
    assert says in result.stderr
    assert not (tmp_path / "data").exists()


def test_without_a_path_the_config_comes_from_the_environment(tmp_path: Path) -> None:
    env = {"MCP_SCHEDULED_WORKER_CONFIG": json.dumps(config(tmp_path, surprise=True)), **TOKENS}
    result = start(env)
    assert result.returncode == 2
    assert "surprise: unknown field" in result.stderr
    assert "MCP_SCHEDULED_WORKER_CONFIG: is not set" in start(TOKENS).stderr


def test_a_data_dir_sealed_for_another_worker_is_refused(tmp_path: Path) -> None:
    with running_worker(tmp_path, [f"http://127.0.0.1:{closed_port()}"]):
        pass
    path = tmp_path / "other.json"
    path.write_text(json.dumps(config(tmp_path, worker_id="worker-2")))
    result = start(TOKENS, "--config", str(path))
    assert result.returncode == 1
    assert "cannot start" in result.stderr


def test_engine_children_recorded_by_an_earlier_incarnation_are_killed_at_start(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    leftover = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={**os.environ, PARENT_PID_ENV: "1"},  # what an orphaned engine child carries
    )
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (data_dir / FILE_NAME).write_text(json.dumps({"pids": [leftover.pid, unrelated.pid]}))
        with running_worker(tmp_path, [f"http://127.0.0.1:{closed_port()}"]) as worker:
            assert worker.ready["killed_children"] == [leftover.pid]
            assert leftover.wait(10) == -9
            assert unrelated.poll() is None  # a pid without the engine marker is left alone
            children = worker.engine_children()
            assert children, "the worker keeps warm engine children"
            # A child is recorded right after its spawn returns: allow that instant to pass.
            deadline = time.monotonic() + 5.0
            while True:
                recorded = set(json.loads((data_dir / FILE_NAME).read_text())["pids"])
                if children <= recorded or time.monotonic() > deadline:
                    break
                threading.Event().wait(0.02)
            assert leftover.pid not in recorded
            assert children <= recorded
    finally:
        unrelated.kill()
        unrelated.wait(10)
        leftover.kill()
        leftover.wait(10)
    assert wait_gone({leftover.pid, unrelated.pid}) == set()
