"""Cancel answers say only what is known: fenced_before_consume, stopped, completed, stopping.

One worker process is shared by the module; its admission peer is switched between granting at
once and holding the permit request (a permit request in flight) per test.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.http import Response
from tests.worker.peers import (
    AdmissionPeer,
    WorkerProcess,
    binding,
    exec_body,
    execution_id,
    wait_gone,
)

_occurrences = itertools.count(500)


@pytest.fixture
def grant(admission: AdmissionPeer) -> Iterator[AdmissionPeer]:
    admission.mode = "grant"
    admission.received.clear()
    yield admission
    admission.mode = "grant"
    admission.release()


def cancel_body(code: str, occurrence_id: int, **kwargs: Any) -> dict[str, Any]:
    return {"protocol": 1, "binding": binding(code, occurrence_id=occurrence_id, **kwargs)}


def test_a_cancel_while_the_permit_request_is_in_flight_fences_before_consume(
    worker: WorkerProcess, grant: AdmissionPeer
) -> None:
    occurrence = next(_occurrences)
    code = "'should never run'"
    grant.mode = "hold"
    answers: list[Response] = []
    sender = threading.Thread(
        target=lambda: answers.append(worker.exec(exec_body(code, occurrence_id=occurrence)))
    )
    sender.start()
    assert grant.received.wait(30), "the permit request never arrived"
    observed = worker.observe(execution_id(occurrence)).json()
    assert observed["status"] == "reserved"

    cancelled = worker.cancel(cancel_body(code, occurrence))
    assert cancelled.status == 200
    assert cancelled.json()["result"] == "fenced_before_consume"
    assert cancelled.json()["fence"]["before_consume"] is True

    grant.release()  # the permit arrives after the fence: consume refuses it
    sender.join(30)
    (answer,) = answers
    assert answer.status == 403
    assert answer.json()["error"]["code"] == "fenced"
    assert worker.observe(execution_id(occurrence)).json()["status"] == "fenced"
    assert f"submitted execution {execution_id(occurrence)} " not in worker.log()


def test_a_cancel_before_any_exec_fences_the_invocation_for_good(
    worker: WorkerProcess, grant: AdmissionPeer
) -> None:
    occurrence = next(_occurrences)
    code = "'never'"
    cancelled = worker.cancel(cancel_body(code, occurrence))
    assert cancelled.json()["result"] == "fenced_before_consume"
    late = worker.exec(exec_body(code, occurrence_id=occurrence))
    assert late.status == 200
    assert late.json()["state"] == "fenced"
    assert [r for r in grant.requests if r["binding"]["occurrence_id"] == occurrence] == []


def test_cancelling_a_busy_loop_answers_stopped_only_after_the_child_is_reaped(
    worker: WorkerProcess, grant: AdmissionPeer
) -> None:
    occurrence = next(_occurrences)
    code = "while (true) {}"
    assert worker.exec(exec_body(code, occurrence_id=occurrence, timeout_seconds=60)).status == 202
    pid = None
    for _ in range(200):  # until the script has started in its child
        observed = worker.observe(execution_id(occurrence)).json()
        if observed["started_at"] is not None:
            pid = observed["pid"]
            break
        threading.Event().wait(0.05)
    assert pid is not None, "the busy loop never started"

    answer = worker.cancel(cancel_body(code, occurrence, timeout_seconds=60)).json()
    assert answer["result"] == "stopped"
    assert answer["report"]["status"] == "cancelled"
    assert wait_gone({pid}, timeout_seconds=0.5) == set(), "stopped, but the child still exists"
    assert worker.observe(execution_id(occurrence)).json()["status"] == "cancelled"
    again = worker.cancel(cancel_body(code, occurrence, timeout_seconds=60)).json()
    assert again["result"] == "stopped"


def test_a_cancel_after_completion_answers_completed_with_the_real_outcome(
    worker: WorkerProcess, grant: AdmissionPeer
) -> None:
    occurrence = next(_occurrences)
    code = "console.log('finished'); 42"
    assert worker.exec(exec_body(code, occurrence_id=occurrence)).status == 202
    worker.wait_terminal(execution_id(occurrence))
    answer = worker.cancel(cancel_body(code, occurrence)).json()
    assert answer["result"] == "completed"
    assert answer["report"]["status"] == "completed"
    assert answer["report"]["result"] == 42
    assert answer["report"]["output"]["text"] == "finished\n"
    assert answer["fence"]["before_consume"] is False


def test_a_cancel_for_another_worker_is_refused_and_fences_nothing(
    worker: WorkerProcess, grant: AdmissionPeer
) -> None:
    occurrence = next(_occurrences)
    body = {"protocol": 1, "binding": binding("1", occurrence_id=occurrence, worker_id="w-9")}
    answer = worker.cancel(body)
    assert answer.status == 403
    assert worker.observe(execution_id(occurrence)).status == 404


def test_a_cancel_whose_binding_differs_from_the_reserved_one_is_refused(
    worker: WorkerProcess, grant: AdmissionPeer
) -> None:
    occurrence = next(_occurrences)
    code = "'x'"
    assert worker.exec(exec_body(code, occurrence_id=occurrence)).status == 202
    answer = worker.cancel(cancel_body(code, occurrence, heap_mb=32))
    assert answer.status == 403
    assert answer.json()["error"]["code"] == "binding_mismatch"
