"""Execution records survive a restart; work that was running when the worker died is ``lost``
(never completed), its engine child does not outlive the worker, and a cancel of it is
``unknown``."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.worker.peers import (
    AdmissionPeer,
    WorkerProcess,
    binding,
    exec_body,
    execution_id,
    running_worker,
    wait_gone,
)


@pytest.fixture
def admission() -> Iterator[AdmissionPeer]:
    peer = AdmissionPeer("grant")
    yield peer
    peer.close()


def wait_started(worker: WorkerProcess, id_: str) -> dict[str, Any]:
    for _ in range(400):
        observed = worker.observe(id_).json()
        if observed["started_at"] is not None:
            return observed
        threading.Event().wait(0.05)
    raise AssertionError("the script never started")


def test_outcomes_and_output_survive_a_restart(tmp_path: Path, admission: AdmissionPeer) -> None:
    code = "console.log('persisted'); ({n: 1})"
    with running_worker(tmp_path, [admission.url]) as worker:
        assert worker.exec(exec_body(code, occurrence_id=1)).status == 202
        before = worker.wait_terminal(execution_id(1))
    with running_worker(tmp_path, [admission.url]) as worker:
        after = worker.observe(execution_id(1)).json()
    assert after["status"] == "completed"
    assert after["result"] == {"n": 1}
    assert after["output"]["text"] == "persisted\n"
    for key in ("started_at", "finished_at", "incarnation", "result", "reason"):
        assert after[key] == before[key], key


def test_work_running_when_the_worker_is_killed_is_lost_and_its_child_dies(
    tmp_path: Path, admission: AdmissionPeer
) -> None:
    code = "while (true) {}"
    first = WorkerProcess(tmp_path, [admission.url]).wait_ready()
    assert first.exec(exec_body(code, occurrence_id=1, timeout_seconds=600)).status == 202
    child_pid = wait_started(first, execution_id(1))["pid"]
    first.proc.send_signal(signal.SIGKILL)
    assert first.wait_exit() == -signal.SIGKILL
    first.stop()
    assert wait_gone({child_pid}, 10.0) == set(), "the engine child outlived its worker"

    with running_worker(tmp_path, [admission.url]) as second:
        assert second.ready["lost"] == [execution_id(1)]
        observed = second.observe(execution_id(1)).json()
        assert observed["status"] == "lost"
        assert observed["incarnation"] == first.ready["incarnation"]
        assert "restarted" in observed["error"]
        cancel = {"protocol": 1, "binding": binding(code, occurrence_id=1, timeout_seconds=600)}
        answer = second.cancel(cancel).json()
        assert answer["result"] == "unknown"
        assert (
            second.exec(exec_body(code, occurrence_id=1, timeout_seconds=600)).json()["state"]
            == "lost"
        )
    assert len(admission.requests) == 1


def test_a_graceful_stop_cancels_running_work_and_records_it(
    tmp_path: Path, admission: AdmissionPeer
) -> None:
    code = "while (true) {}"
    with running_worker(tmp_path, [admission.url]) as worker:
        assert worker.exec(exec_body(code, occurrence_id=1, timeout_seconds=600)).status == 202
        child_pid = wait_started(worker, execution_id(1))["pid"]
    assert wait_gone({child_pid}, 1.0) == set()
    with running_worker(tmp_path, [admission.url]) as worker:
        observed = worker.observe(execution_id(1)).json()
        assert worker.ready["lost"] == []
    assert observed["status"] == "cancelled"
    assert observed["reason"] == "engine shutdown"
