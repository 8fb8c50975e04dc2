"""The admission route's HTTP contract (SPEC §6, docs/protocol.md): bearer before body, the
512 KiB cap at the boundary, strict protocol-1 documents, and the runner loop's answers passed
through unchanged (200 permit, 409 not owner, 403 refusal code, 503 uncertain)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from falcon import testing

from appliance.config.credentials import Secret
from appliance.runner.admission import ADMIT_PATH, BODY_BYTES_MAX, create_admission_app

ADMISSION = "admission-token-0123456789"
CLUSTER = "cluster-token-0123456789"
BINDING = {"occurrence_id": 7, "attempt": 1}


class FakeLoop:
    def __init__(self, answer: tuple[int, dict[str, Any]]) -> None:
        self.answer = answer
        self.calls: list[tuple[dict[str, Any], str]] = []

    def __call__(self, binding: dict[str, Any], incarnation: str) -> tuple[int, dict[str, Any]]:
        self.calls.append((binding, incarnation))
        return self.answer


def client(loop: FakeLoop) -> testing.TestClient:
    app = create_admission_app(
        loop, {"admission": Secret(ADMISSION), "cluster": Secret(CLUSTER), "worker": None}
    )
    return testing.TestClient(app)


def post(c: testing.TestClient, body: bytes, token: str | None = ADMISSION) -> Any:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return c.simulate_post(ADMIT_PATH, body=body, headers=headers)


def doc(**extra: Any) -> bytes:
    return json.dumps({"protocol": 1, "binding": BINDING, "incarnation": "inc-1", **extra}).encode()


@pytest.mark.parametrize("token", [None, "wrong-token-xxxxxxxx", CLUSTER])
def test_admission_refuses_a_missing_wrong_or_other_role_bearer_before_the_loop(
    token: str | None,
) -> None:
    loop = FakeLoop((200, {"permit": {}}))
    result = post(client(loop), doc(), token)
    assert result.status_code == 401
    assert loop.calls == []


def test_a_permit_is_passed_through_with_the_protocol_version() -> None:
    permit = {"invocation": {"occurrence_id": 7}, "incarnation": "inc-1", "granted_epoch": 2}
    loop = FakeLoop((200, {"permit": permit}))
    result = post(client(loop), doc())
    assert result.status_code == 200
    assert result.json == {"protocol": 1, "permit": permit}
    assert loop.calls == [(BINDING, "inc-1")]


@pytest.mark.parametrize(
    ("status", "code"), [(409, "not_owner"), (403, "stale_epoch"), (503, "uncertain")]
)
def test_the_loop_answer_decides_the_status(status: int, code: str) -> None:
    loop = FakeLoop((status, {"error": {"code": code, "message": "m"}}))
    result = post(client(loop), doc())
    assert result.status_code == status
    assert result.json["error"]["code"] == code
    assert result.json["protocol"] == 1


def _padded(total_bytes: int) -> bytes:
    body = doc()
    return body[:-1] + b" " * (total_bytes - len(body)) + b"}"


def test_a_body_of_exactly_512_kib_is_read_and_one_byte_more_is_413() -> None:
    loop = FakeLoop((200, {"permit": {}}))
    c = client(loop)
    at_limit = _padded(BODY_BYTES_MAX)
    assert len(at_limit) == BODY_BYTES_MAX
    assert post(c, at_limit).status_code == 200
    over = _padded(BODY_BYTES_MAX + 1)
    assert post(c, over).status_code == 413
    assert len(loop.calls) == 1


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (json.dumps({"protocol": 2, "binding": BINDING, "incarnation": "i"}), "protocol_version"),
        (
            json.dumps({"protocol": True, "binding": BINDING, "incarnation": "i"}),
            "protocol_version",
        ),
        (json.dumps({"protocol": 1, "binding": [], "incarnation": "i"}), "invalid_request"),
        (json.dumps({"protocol": 1, "binding": BINDING, "incarnation": ""}), "invalid_request"),
        (
            json.dumps({"protocol": 1, "binding": BINDING, "incarnation": "x" * 129}),
            "invalid_request",
        ),
        (json.dumps({"protocol": 1, "binding": BINDING}), "invalid_request"),
        (
            json.dumps({"protocol": 1, "binding": BINDING, "incarnation": "i", "extra": 1}),
            "invalid_request",
        ),
        ('{"protocol": 1, "protocol": 1}', "malformed_json"),
        ("[]", "malformed_json"),
    ],
)
def test_malformed_admission_documents_are_400_and_never_reach_the_loop(
    body: str, code: str
) -> None:
    loop = FakeLoop((200, {"permit": {}}))
    result = post(client(loop), body.encode())
    assert result.status_code == 400
    assert result.json["error"]["code"] == code
    assert loop.calls == []


def test_an_incarnation_of_exactly_128_bytes_is_accepted() -> None:
    loop = FakeLoop((200, {"permit": {}}))
    body = json.dumps({"protocol": 1, "binding": BINDING, "incarnation": "x" * 128}).encode()
    assert post(client(loop), body).status_code == 200


def test_only_the_admit_route_is_mounted() -> None:
    loop = FakeLoop((200, {"permit": {}}))
    c = client(loop)
    other = c.simulate_post(
        "/scheduler/v1/commands", body=doc(), headers={"Authorization": f"Bearer {ADMISSION}"}
    )
    assert other.status_code == 404
    assert loop.calls == []


def test_the_listener_holds_a_whole_worker_window_of_permit_requests_at_once() -> None:
    """Each permit request waits inside the loop for a Raft commit; the worker asks for one per
    execution it launches, up to its window (default 4 running + 16 queued). The listener must
    take them all at once: with the HTTP default of 4 threads a burst was capped at about four
    permits per commit latency (docs/bench-capacity.md). Every request here waits until the
    whole window is inside ``submit`` at the same time, so fewer threads time out the barrier."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from appliance.http.client import HttpClient
    from appliance.runner.admission import ADMISSION_CONNECTIONS_MAX, admission_server

    window = 4 + 16
    assert window <= ADMISSION_CONNECTIONS_MAX
    inside = threading.Barrier(window, timeout=10)

    def submit(binding: dict[str, Any], incarnation: str) -> tuple[int, dict[str, Any]]:
        inside.wait()  # raises BrokenBarrierError unless the whole window arrives
        return 200, {"permit": {"incarnation": incarnation}}

    server = admission_server(
        submit,
        {"admission": Secret(ADMISSION), "cluster": Secret(CLUSTER), "worker": None},
        host="127.0.0.1",
        port=0,
        name="admission test",
    )
    server.start()
    http = HttpClient(read_timeout_ms=20_000)
    try:
        url = f"http://127.0.0.1:{server.port}{ADMIT_PATH}"

        def ask(i: int) -> int:
            body = json.dumps({"protocol": 1, "binding": BINDING, "incarnation": f"inc-{i}"})
            reply = http.post(
                url,
                body.encode(),
                headers={"Content-Type": "application/json"},
                bearer=ADMISSION,
                fresh_connection=True,
            )
            return reply.status

        with ThreadPoolExecutor(window) as pool:
            statuses = list(pool.map(ask, range(window)))
    finally:
        http.close()
        server.stop()
    assert statuses == [200] * window
