"""How the runner's worker client classifies an exec answer (issue 17 item 1).

Only a well-formed protocol-1 ``pool_full`` / ``engine_unavailable`` 503 means *not dispatched*;
any other answer stays ambiguous. A real loopback HTTP server plays the worker's exec route."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from appliance.config.credentials import Secret
from appliance.runner.worker_client import WorkerClient

ANSWER: dict[str, tuple[int, bytes]] = {}
PATHS: list[str] = []


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        PATHS.append(self.path)
        status, body = ANSWER["observe"]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        PATHS.append(self.path)
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        status, body = ANSWER["exec"]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def client() -> Iterator[WorkerClient]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    worker = WorkerClient(f"http://127.0.0.1:{server.server_port}", Secret("t" * 32))
    try:
        yield worker
    finally:
        worker.close()
        server.shutdown()
        server.server_close()


def _doc(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def _kind(client: WorkerClient, status: int, body: bytes) -> tuple[str, str | None]:
    ANSWER["exec"] = (status, body)
    result = client.execute({"occurrence_id": 1}, "1")
    return result.kind, result.code


@pytest.mark.parametrize("code", ["pool_full", "engine_unavailable"])
def test_a_well_formed_not_dispatched_answer_is_not_dispatched(client, code) -> None:
    body = _doc(protocol=1, error={"code": code, "message": "full"})
    assert _kind(client, 503, body) == ("not_dispatched", code)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (503, _doc(protocol=2, error={"code": "pool_full", "message": "m"})),  # another protocol
        (503, _doc(error={"code": "pool_full", "message": "m"})),  # no protocol field
        (503, _doc(protocol=1, error={"code": "pool_full"})),  # no message
        (503, _doc(protocol=1, error={"code": "pool_full", "message": "m"}, state="reserved")),
        (503, _doc(protocol=1, error="pool_full")),
        (503, _doc(protocol=1, error={"code": "admission_uncertain", "message": "m"})),
        (503, _doc(protocol=1, error={"code": "consume_refused", "message": "m"})),
        (500, _doc(protocol=1, error={"code": "pool_full", "message": "m"})),
        (429, _doc(protocol=1, error={"code": "pool_full", "message": "m"})),
        (503, b"pool_full"),
    ],
)
def test_every_other_answer_stays_ambiguous(client, status, body) -> None:
    assert _kind(client, status, body)[0] == "uncertain"


def test_a_refusal_stays_a_refusal_and_acceptance_stays_accepted(client) -> None:
    refused = _doc(protocol=1, error={"code": "binding_mismatch", "message": "m"})
    assert _kind(client, 403, refused) == ("refused", "binding_mismatch")
    accepted = _doc(protocol=1, execution_id="s1-o1-a1", incarnation="i", state="accepted")
    assert _kind(client, 202, accepted)[0] == "accepted"


def test_w_travels_as_a_query_parameter_and_retired_is_its_own_kind(client) -> None:
    retired = _doc(protocol=1, error={"code": "retired", "message": "m", "retained_through": 7})
    ANSWER["exec"] = (403, retired)
    result = client.execute({"occurrence_id": 1}, "1", retained_through=7)
    assert (result.kind, result.code) == ("retired", "retired")
    assert PATHS[-1] == "/api/scheduled/v1/exec?retained_through=7"
    client.execute({"occurrence_id": 1}, "1")
    assert PATHS[-1] == "/api/scheduled/v1/exec"  # no W, no query
    assert _kind(client, 503, retired)[0] == "uncertain"  # only the exact 403 is definite
    ANSWER["observe"] = (410, retired)
    observed = client.observe("s1-o1-a1", retained_through=0)
    assert observed.status == "retired"
    assert PATHS[-1] == "/api/scheduled/v1/executions/s1-o1-a1?retained_through=0"
    ANSWER["observe"] = (404, _doc(protocol=1, error={"code": "unknown_execution", "message": "m"}))
    assert client.observe("s1-o1-a1").status is None


# ---- the worker's capacity (issue 17, "Paced dispatch") ------------------------------------------

CAPACITY = {"max_concurrent": 2, "max_queued": 2, "free_slots": 0, "queue_room": 1}


def test_the_capacity_of_an_accepted_exec_and_of_a_not_dispatched_one_is_read(client) -> None:
    ANSWER["exec"] = (202, _doc(protocol=1, execution_id="s1-o1-a1", capacity=CAPACITY))
    accepted = client.execute({"occurrence_id": 1}, "1")
    assert accepted.kind == "accepted" and accepted.capacity is not None
    assert accepted.capacity.takes == 4 and accepted.capacity.queue_room == 1
    error = {"code": "pool_full", "message": "full", "capacity": CAPACITY}
    ANSWER["exec"] = (503, _doc(protocol=1, error=error))
    full = client.execute({"occurrence_id": 1}, "1")
    assert full.kind == "not_dispatched" and full.capacity == accepted.capacity


def test_an_older_worker_states_no_capacity_but_answers_in_protocol_1(client) -> None:
    ANSWER["exec"] = (202, _doc(protocol=1, execution_id="s1-o1-a1"))
    accepted = client.execute({"occurrence_id": 1}, "1")
    assert accepted.capacity is None and accepted.protocol_answer
    ANSWER["exec"] = (502, b"<html>bad gateway</html>")
    other = client.execute({"occurrence_id": 1}, "1")
    assert other.kind == "uncertain" and not other.protocol_answer


@pytest.mark.parametrize(
    ("change", "valid"),
    [
        ({}, True),
        ({"free_slots": 2, "queue_room": 2}, True),  # everything free: exactly what it takes
        ({"free_slots": 2, "queue_room": 3}, False),  # more free than it takes
        ({"max_concurrent": 0}, False),
        ({"max_concurrent": 1 << 20, "max_queued": 0}, True),
        ({"max_concurrent": (1 << 20) + 1}, False),
        ({"queue_room": -1}, False),
        ({"free_slots": 1.0}, False),
        ({"free_slots": True}, False),
        ({"free_slots": None}, False),
    ],
)
def test_a_capacity_is_read_only_when_it_is_one(change: dict, valid: bool) -> None:
    from appliance.owner.worker_answers import capacity_of

    document = {**CAPACITY, **change}
    assert (capacity_of(document) is not None) is valid
    assert capacity_of([1, 2, 3, 4]) is None
