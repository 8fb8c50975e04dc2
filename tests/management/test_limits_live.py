"""Transport limits on the real listener (waitress on loopback), at their boundaries.

- The 72 KiB cap applies to the serialized request: a create whose JSON is exactly 73,728 bytes
  is accepted, one byte more is 413, although its heavily escaped source decodes to far less
  than the 64 KiB code limit.
- The queue holds 64 commands: the 65th is refused with 503 ``accepted: false``.
- A client that disconnects after its command was queued does not withdraw it.
"""

from __future__ import annotations

import json
import socket

from appliance.http import HttpClient
from appliance.management import ManagementOptions
from tests.management.bodies import CAP_BYTES, escaped_create
from tests.management.conftest import DEFINITION, TOKENS, Live, start_live
from tests.management.mcp_raw import call


def test_exactly_72_kib_is_accepted_and_one_byte_more_is_413(live: Live) -> None:
    client = HttpClient(read_timeout_ms=10_000)
    url = f"{live.base}/scheduler/v1/commands"
    try:
        accepted = client.post(url, escaped_create(CAP_BYTES), bearer=TOKENS["operator"])
        assert accepted.status == 200, accepted.body
        assert accepted.json()["result"] == {"id": 1}
        refused = client.post(url, escaped_create(CAP_BYTES + 1), bearer=TOKENS["operator"])
        assert refused.status == 413
        assert refused.json()["error"]["code"] == "body_too_large"
    finally:
        client.close()
    assert list(live.runner.schedules) == [1]
    assert len(live.runner.executed) == 1


def test_mcp_requests_share_the_72_kib_cap(live: Live) -> None:
    client = HttpClient(read_timeout_ms=10_000)
    document, headers = call("scheduler_create", {"definition": {**DEFINITION, "code": ""}})
    base = len(json.dumps(document).encode())
    try:
        for extra, expected in ((0, 200), (1, 413)):
            document["params"]["arguments"]["definition"]["code"] = "\x01" * (
                (CAP_BYTES - base) // 6
            )
            body = json.dumps(document).encode()
            pad = CAP_BYTES - len(body) + extra
            body = body[:-1] + b" " * pad + b"}"
            assert len(body) == CAP_BYTES + extra
            response = client.post(
                f"{live.base}/mcp", body, bearer=TOKENS["recovery"], headers=headers
            )
            assert response.status == expected, response.body[:300]
    finally:
        client.close()
    assert len(live.runner.schedules) == 1


def test_the_65th_queued_command_is_refused_with_accepted_false() -> None:
    running = start_live(ManagementOptions(reply_timeout_s=0.01))
    client = HttpClient(read_timeout_ms=10_000)
    url = f"{running.base}/scheduler/v1/commands"
    create = json.dumps({"action": "create", "definition": DEFINITION}).encode()
    try:
        running.consumer.pause()
        for _ in range(64):
            # Queued, then the listener stops waiting: uncertain, but the command stays queued.
            queued = client.post(url, create, bearer=TOKENS["operator"])
            assert queued.status == 503
            assert queued.json()["outcome"] == "uncertain"
        assert len(running.gateway) == 64
        refused = client.post(url, create, bearer=TOKENS["operator"])
        assert refused.status == 503
        assert refused.json()["accepted"] is False
        assert len(running.gateway) == 64
        running.consumer.resume()
        assert running.consumer.wait_idle(10.0)
        assert sorted(running.runner.schedules) == list(range(1, 65))
    finally:
        client.close()
        running.listener.stop()
        running.consumer.stop()


def test_a_client_disconnecting_after_queueing_does_not_withdraw_the_command(live: Live) -> None:
    live.consumer.pause()
    body = json.dumps({"action": "create", "definition": DEFINITION}).encode()
    request = (
        b"POST /scheduler/v1/commands HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {TOKENS['operator']}\r\n".encode()
        + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with socket.create_connection(("127.0.0.1", live.listener.port), timeout=5) as sock:
        sock.sendall(request)
        assert _eventually(lambda: len(live.gateway) == 1)
    # The client is gone; the command belongs to the loop now.
    live.consumer.resume()
    assert live.consumer.wait_idle(5.0)
    assert list(live.runner.schedules) == [1]
    status = HttpClient().get(f"{live.base}/scheduler/v1/status", bearer=TOKENS["operator"])
    assert status.status == 200
    assert status.json()["result"]["counts"]["schedules"] == 1


def _eventually(predicate, timeout_s: float = 5.0) -> bool:
    import threading

    event = threading.Event()
    for _ in range(int(timeout_s / 0.005)):
        if predicate():
            return True
        event.wait(0.005)
    return predicate()
