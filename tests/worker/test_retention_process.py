"""Worker retention in the real process over its SQLite store (issue 19 item 5): the runner's W
arrives as a query parameter, the worker prunes only at or below it on observations, refuses
every invocation at or below it, and still does after a restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.store.versions import WORKER_FILE_NAME
from tests.store.helpers import raw_query
from tests.worker.peers import AdmissionPeer, exec_body, execution_id, running_worker

CODE = "({ok: true})"
EXEC = "/api/scheduled/v1/exec"


@pytest.fixture
def admission() -> Iterator[AdmissionPeer]:
    peer = AdmissionPeer("grant")
    yield peer
    peer.close()


def exec_with_w(worker, occurrence_id: int, w: int | str | None):
    path = EXEC if w is None else f"{EXEC}?retained_through={w}"
    return worker.post(path, exec_body(CODE, occurrence_id=occurrence_id))


def observe_with_w(worker, occurrence_id: int, w: int):
    return worker.request(
        "GET", f"/api/scheduled/v1/executions/{execution_id(occurrence_id)}?retained_through={w}"
    )


def rows(data_dir: Path) -> list[int]:
    found = raw_query(data_dir / WORKER_FILE_NAME, "SELECT occurrence_id FROM invocation")
    return sorted(r[0] for r in found)


def test_prune_and_refusal_at_or_below_w_survive_a_restart(
    tmp_path: Path, admission: AdmissionPeer
) -> None:
    with running_worker(tmp_path, [admission.url]) as worker:
        for k in (1, 2, 3):
            assert exec_with_w(worker, k, 0).status == 202
            worker.wait_terminal(execution_id(k))
        data_dir = worker.data_dir
        observed = observe_with_w(worker, 3, 2)  # W = 2 noted; one prune batch runs
        assert observed.status == 200 and observed.json()["status"] == "completed"
        gone = observe_with_w(worker, 2, 2)
        assert gone.status == 410 and gone.json()["error"]["code"] == "retired"
        refused = exec_with_w(worker, 1, None)  # an older runner says nothing: W still holds
        assert refused.status == 403
        error = refused.json()["error"]
        assert error == {
            "code": "retired",
            "message": error["message"],
            "retained_through": 2,
            "capacity": error["capacity"],  # every exec answer states it (paced dispatch)
        }
        permits_before = len(admission.requests)
    assert rows(data_dir) == [3]
    stored = raw_query(
        data_dir / WORKER_FILE_NAME, "SELECT value FROM meta WHERE key = 'retained_through'"
    )
    assert stored == [("2",)]
    with running_worker(tmp_path, [admission.url]) as restarted:
        for k in (1, 2):
            answer = exec_with_w(restarted, k, None)
            assert (answer.status, answer.json()["error"]["code"]) == (403, "retired")
        assert len(admission.requests) == permits_before  # no permit was even asked for
        assert exec_with_w(restarted, 3, 1).json()["state"] == "completed"  # a lower W: ignored
        bad = exec_with_w(restarted, 4, "-1")
        assert bad.status == 400 and "retained_through" in bad.json()["error"]["message"]


def test_w_is_a_query_parameter_because_a_body_field_is_refused(
    tmp_path: Path, admission: AdmissionPeer
) -> None:
    # Every worker refuses unknown body fields; W in the body would make each exec to a worker
    # from before retention a 400. In the query an older worker never reads it.
    with running_worker(tmp_path, [admission.url]) as worker:
        body = exec_body(CODE, occurrence_id=7)
        body["retained_through"] = 3
        answer = worker.post(EXEC, body)
        assert answer.status == 400 and json.loads(answer.body)["error"]["code"] == (
            "invalid_request"
        )


def test_a_w_sent_with_another_namespaces_binding_is_not_taken(
    tmp_path: Path, admission: AdmissionPeer
) -> None:
    with running_worker(tmp_path, [admission.url]) as worker:
        stranger = exec_body(CODE, occurrence_id=9, namespace="another-namespace")
        answer = worker.post(f"{EXEC}?retained_through=99", stranger)
        assert (answer.status, answer.json()["error"]["code"]) == (403, "binding_mismatch")
        assert exec_with_w(worker, 5, None).status == 202  # still above this worker's W (0)
