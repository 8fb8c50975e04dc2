"""A crash right after each launch-path step never leads to a second submission after restart.

For every step of appliance.worker.crash.LAUNCH_STEPS, a real worker process is started with
``APPLIANCE_TESTING=1 APPLIANCE_CRASH_AT=<step>``; the exec makes it SIGKILL itself right after
that step. A new worker process (a new incarnation) is started on the same data_dir, and the
same exec is sent again. Evidence, from three independent places: the admission peer's request
log (at most one permit request), the workers' logs (at most one "submitted execution" line over
both incarnations) and the durable store (at most one execution record, never ``completed``
unless it was submitted exactly once by a live incarnation).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.http import AmbiguousSend
from appliance.store.worker_store import Invocation, WorkerStore
from appliance.worker.crash import LAUNCH_STEPS
from tests.worker.peers import (
    NAMESPACE,
    WORKER_ID,
    AdmissionPeer,
    WorkerProcess,
    engine_children_of,
    exec_body,
    execution_id,
    running_worker,
    wait_gone,
)

CODE = "console.log('side effect'); 'done'"
OCCURRENCE = 7


@pytest.fixture
def admission() -> Iterator[AdmissionPeer]:
    peer = AdmissionPeer("grant")
    yield peer
    peer.close()


def crash_worker_at(tmp: Path, admission: AdmissionPeer, step: str) -> WorkerProcess:
    worker = WorkerProcess(tmp, [admission.url], crash_at=step).wait_ready()
    with pytest.raises(AmbiguousSend):  # the worker died before answering
        worker.exec(exec_body(CODE, occurrence_id=OCCURRENCE))
    assert worker.wait_exit() == -signal.SIGKILL
    worker.stop()
    leftovers = wait_gone(engine_children_of(worker.proc.pid))
    assert not leftovers, f"engine children outlived the killed worker: {sorted(leftovers)}"
    return worker


# What the restarted worker answers to the same exec, by the step the first one died after.
EXPECTED_AFTER_RESTART = {
    "validated": (202, "accepted"),  # nothing durable happened: launching now is the first time
    "pool_reserved": (202, "accepted"),
    "reserved": (200, "fenced"),  # reserved by the dead incarnation: fenced, never launched
    "permit_received": (200, "fenced"),
    "permit_recorded": (200, "fenced"),
    "consumed": (200, "lost"),  # consumed by the dead incarnation: lost, never relaunched
    "submitted": (200, "lost"),
    "receipt_recorded": (200, "lost"),
}


@pytest.mark.parametrize("step", LAUNCH_STEPS)
def test_a_crash_after_each_launch_step_never_leads_to_a_second_submission(
    tmp_path: Path, admission: AdmissionPeer, step: str
) -> None:
    first = crash_worker_at(tmp_path, admission, step)
    permit_requests_before_restart = len(admission.requests)
    assert permit_requests_before_restart == (
        0 if LAUNCH_STEPS.index(step) <= LAUNCH_STEPS.index("reserved") else 1
    )

    with running_worker(tmp_path, [admission.url]) as second:
        assert second.incarnation != first.ready["incarnation"]
        response = second.exec(exec_body(CODE, occurrence_id=OCCURRENCE))
        expected_status, expected_state = EXPECTED_AFTER_RESTART[step]
        assert response.status == expected_status, response.body
        assert response.json()["state"] == expected_state
        report = second.wait_terminal(execution_id(OCCURRENCE))
        again = second.exec(exec_body(CODE, occurrence_id=OCCURRENCE))
        assert again.status == 200
        second_log = second.log()

    submissions = (first.log() + second_log).count(
        f"submitted execution {execution_id(OCCURRENCE)} "
    )
    assert submissions <= 1
    assert len(admission.requests) <= 1
    with WorkerStore.create_or_open(
        tmp_path / "data", namespace=NAMESPACE, worker_id=WORKER_ID, now_ms=0
    ) as store:
        record = store.get(Invocation(NAMESPACE, 3, OCCURRENCE, 1))
        execution = store.get_execution(execution_id(OCCURRENCE))
    assert record is not None
    if expected_status == 202:
        assert submissions == 1
        assert report["status"] == "completed"
        assert execution is not None and execution.status == "completed"
    elif expected_state == "fenced":
        assert submissions == 0
        assert execution is None and record.consumed is None
        assert record.fence is not None and record.fence["before_consume"]
        assert report["status"] == "fenced"
    else:
        assert execution is not None and execution.status == "lost"
        assert execution.incarnation_id == first.ready["incarnation"]
        assert report["status"] == "lost"
        assert record.consumed is not None


def test_the_crash_switch_is_refused_without_the_testing_flag(tmp_path: Path) -> None:
    config = tmp_path / "worker.json"
    config.write_text(
        json.dumps(
            {
                "namespace": NAMESPACE,
                "worker_id": WORKER_ID,
                "data_dir": str(tmp_path / "data"),
                "bearer_env": "W",
                "admission_bearer_env": "A",
                "admission_urls": ["http://127.0.0.1:1"],
                "listen_addr": "127.0.0.1:1",
            }
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "appliance", "worker", "--config", str(config)],
        env={"W": "w-token", "A": "a-token", "APPLIANCE_CRASH_AT": "consumed"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "APPLIANCE_CRASH_AT" in result.stderr and "APPLIANCE_TESTING=1" in result.stderr
    assert not (tmp_path / "data").exists()


def test_a_crash_right_after_a_cancel_fence_keeps_the_invocation_fenced(
    tmp_path: Path, admission: AdmissionPeer
) -> None:
    first = WorkerProcess(tmp_path, [admission.url], crash_at="fenced").wait_ready()
    cancel = {"protocol": 1, "binding": exec_body(CODE, occurrence_id=OCCURRENCE)["binding"]}
    with pytest.raises(AmbiguousSend):
        first.cancel(cancel)
    assert first.wait_exit() == -signal.SIGKILL
    first.stop()
    with running_worker(tmp_path, [admission.url]) as second:
        answer = second.exec(exec_body(CODE, occurrence_id=OCCURRENCE))
        assert answer.status == 200 and answer.json()["state"] == "fenced"
        assert second.cancel(cancel).json()["result"] == "fenced_before_consume"
    assert admission.requests == []
