"""The launch path of a real worker process: validate, reserve, permit, consume, submit, receipt.

One worker process (and one admission peer) is shared by the module; every test uses its own
occurrence id, so invocations never collide.
"""

from __future__ import annotations

import itertools

import pytest

from tests.worker.peers import (
    ADMISSION_TOKEN,
    AdmissionPeer,
    WorkerProcess,
    exec_body,
    execution_id,
)

_occurrences = itertools.count(100)


def requests_for(admission: AdmissionPeer, occurrence_id: int) -> list[dict]:
    return [r for r in admission.requests if r["binding"]["occurrence_id"] == occurrence_id]


def test_an_admitted_exec_runs_once_and_its_outcome_is_observable(
    worker: WorkerProcess, admission: AdmissionPeer
) -> None:
    occurrence = next(_occurrences)
    code = "console.log('hello', scheduled.occurrence_id); ({answer: 6 * 7})"
    response = worker.exec(exec_body(code, occurrence_id=occurrence))
    assert response.status == 202, response.body
    answer = response.json()
    capacity = answer.pop("capacity")  # what the engine can still take (paced dispatch)
    assert answer == {
        "protocol": 1,
        "execution_id": execution_id(occurrence),
        "incarnation": worker.incarnation,
        "state": "accepted",
    }
    assert set(capacity) == {"max_concurrent", "max_queued", "free_slots", "queue_room"}
    assert 0 <= capacity["free_slots"] <= capacity["max_concurrent"]
    report = worker.wait_terminal(execution_id(occurrence))
    assert report["status"] == "completed"
    assert report["result"] == {"answer": 42}
    assert report["output"]["text"] == f"hello {occurrence}\n"
    assert report["invocation"]["occurrence_id"] == occurrence
    assert report["started_at"] is not None and report["finished_at"] is not None
    (request,) = requests_for(admission, occurrence)
    assert request["incarnation"] == worker.incarnation
    assert (
        request["binding"]["payload_sha256"]
        == exec_body(code, occurrence_id=occurrence)["binding"]["payload_sha256"]
    )
    assert request["_auth"] == f"Bearer {ADMISSION_TOKEN}"


def test_a_repeated_exec_answers_the_existing_state_and_launches_nothing(
    worker: WorkerProcess, admission: AdmissionPeer
) -> None:
    occurrence = next(_occurrences)
    body = exec_body("1 + 1", occurrence_id=occurrence)
    assert worker.exec(body).status == 202
    worker.wait_terminal(execution_id(occurrence))
    again = worker.exec(body)
    assert again.status == 200
    assert again.json()["state"] == "completed"
    assert len(requests_for(admission, occurrence)) == 1
    assert worker.log().count(f"submitted execution {execution_id(occurrence)} ") == 1


def test_the_same_invocation_with_another_binding_is_refused(worker: WorkerProcess) -> None:
    occurrence = next(_occurrences)
    assert worker.exec(exec_body("1", occurrence_id=occurrence)).status == 202
    other = worker.exec(exec_body("2", occurrence_id=occurrence))
    assert other.status == 403
    assert other.json()["error"]["code"] == "binding_mismatch"
    assert other.json()["error"]["state"] in ("running", "completed")  # it WAS launched


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"namespace": "other-ns"}, "binding_mismatch"),
        ({"worker_id": "worker-2"}, "binding_mismatch"),
        ({"expires_at": "2020-01-01T00:00:00Z"}, "grant_expired"),
    ],
)
def test_a_binding_for_another_worker_or_an_expired_grant_is_refused_before_admission(
    worker: WorkerProcess, admission: AdmissionPeer, change: dict, code: str
) -> None:
    occurrence = next(_occurrences)
    response = worker.exec(exec_body("1", occurrence_id=occurrence, **change))
    assert response.status == 403
    assert response.json()["error"]["code"] == code
    assert requests_for(admission, occurrence) == []
    assert worker.observe(execution_id(occurrence)).status == 404


def test_a_payload_digest_that_is_not_the_codes_sha256_is_refused(
    worker: WorkerProcess, admission: AdmissionPeer
) -> None:
    occurrence = next(_occurrences)
    body = exec_body("1", occurrence_id=occurrence)
    body["code"] = "2"
    response = worker.exec(body)
    assert response.status == 403
    assert response.json()["error"]["code"] == "binding_mismatch"
    assert requests_for(admission, occurrence) == []


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda b: b.update(protocol=2), "protocol_version"),
        (lambda b: b.update(extra=1), "invalid_request"),
        (lambda b: b["binding"].update(extra=1), "invalid_request"),
        (lambda b: b["binding"]["authority"].update(heap_mb=8), "invalid_request"),
        (lambda b: b["binding"].pop("epoch"), "invalid_request"),
    ],
)
def test_malformed_documents_are_refused_with_400(worker: WorkerProcess, mutate, code) -> None:
    body = exec_body("1", occurrence_id=next(_occurrences))
    mutate(body)
    response = worker.exec(body)
    assert response.status == 400
    assert response.json()["protocol"] == 1
    assert response.json()["error"]["code"] == code


def test_failures_and_timeouts_are_reported_with_their_reason(worker: WorkerProcess) -> None:
    failing, looping = next(_occurrences), next(_occurrences)
    assert worker.exec(exec_body("throw new Error('nope')", occurrence_id=failing)).status == 202
    body = exec_body("while (true) {}", occurrence_id=looping, timeout_seconds=1)
    assert worker.exec(body).status == 202
    failed = worker.wait_terminal(execution_id(failing))
    assert failed["status"] == "failed"
    assert failed["reason"] == "uncaught exception"
    assert "nope" in failed["error"]
    timed_out = worker.wait_terminal(execution_id(looping))
    assert timed_out["status"] == "timed_out"


def test_an_unknown_execution_is_404_which_is_not_proof_of_anything(
    worker: WorkerProcess,
) -> None:
    assert worker.observe("s1-o999999-a1").status == 404
    assert worker.observe("not-an-id").status == 404
