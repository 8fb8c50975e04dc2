"""The scheduled listener: worker bearer on every route before the body, 512 KiB cap, three
routes and nothing else. One worker process for the module (its admission URL is unreachable:
nothing here needs a permit)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.worker.peers import (
    ADMISSION_TOKEN,
    WorkerProcess,
    closed_port,
    exec_body,
    running_worker,
)

BODY_BYTES_MAX = 512 * 1024
ROUTES = [
    ("POST", "/api/scheduled/v1/exec"),
    ("GET", "/api/scheduled/v1/executions/s3-o1-a1"),
    ("POST", "/api/scheduled/v1/cancel"),
]


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    urls = [f"http://127.0.0.1:{closed_port()}"]
    with running_worker(tmp_path_factory.mktemp("routes"), urls) as process:
        yield process


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize(
    "token", [None, "wrong-token", ADMISSION_TOKEN], ids=["none", "wrong", "admission"]
)
def test_every_route_refuses_a_missing_or_wrong_bearer_with_401(
    worker: WorkerProcess, method: str, path: str, token: str | None
) -> None:
    body = json.dumps(exec_body("1", occurrence_id=1)).encode() if method == "POST" else None
    response = worker.request(method, path, body, token=token)
    assert response.status == 401
    assert response.header("WWW-Authenticate") == "Bearer"
    document = response.json()
    assert document["protocol"] == 1
    assert document["error"]["code"] == "unauthorized"
    assert (token or "absent") not in response.body.decode()


def padded(document: dict, total_bytes: int) -> bytes:
    """``document`` as JSON, padded with insignificant whitespace to exactly ``total_bytes``."""
    raw = json.dumps(document).encode()
    return raw[:-1] + b" " * (total_bytes - len(raw)) + b"}"


@pytest.mark.parametrize("path", ["/api/scheduled/v1/exec", "/api/scheduled/v1/cancel"])
def test_a_body_of_exactly_512_kib_is_read_and_one_byte_more_is_413(
    worker: WorkerProcess, path: str
) -> None:
    document = exec_body("1", occurrence_id=1, worker_id="another-worker")
    if path.endswith("cancel"):
        document.pop("code")
    at_cap = padded(document, BODY_BYTES_MAX)
    assert len(at_cap) == BODY_BYTES_MAX
    answer = worker.request("POST", path, at_cap)
    assert answer.status == 403, answer.body  # parsed and judged: another worker's binding
    over = padded(document, BODY_BYTES_MAX + 1)
    refused = worker.request("POST", path, over)
    assert refused.status == 413
    assert refused.json() == {
        "protocol": 1,
        "error": {
            "code": "body_too_large",
            "message": f"request body exceeds {BODY_BYTES_MAX} bytes",
        },
    }


def test_the_cap_counts_json_escaping(worker: WorkerProcess) -> None:
    # 90,000 bytes of code once decoded (far under 512 KiB) that take six bytes per character
    # as JSON escapes: the serialized body is over 512 KiB, so it is refused (413) unread,
    # before any field rule could judge the decoded code.
    code = "\u0001" * 90_000
    body = json.dumps(exec_body(code, occurrence_id=1)).encode()
    assert len(code.encode()) <= 90_000 < BODY_BYTES_MAX < len(body)
    assert worker.request("POST", "/api/scheduled/v1/exec", body).status == 413


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("POST", "/api/exec"),
        ("POST", "/mcp"),
        ("GET", "/metrics"),
        ("POST", "/scheduler/v1/admit"),
        ("GET", "/api/scheduled/v1/executions"),
        ("GET", "/api/scheduled/v1/status"),
    ],
)
def test_nothing_else_is_mounted(worker: WorkerProcess, method: str, path: str) -> None:
    body = b"{}" if method == "POST" else None
    assert worker.request(method, path, body).status == 404
    assert worker.request(method, path, body, token=None).status == 401


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/scheduled/v1/exec"),
        ("DELETE", "/api/scheduled/v1/executions/s3-o1-a1"),
        ("GET", "/api/scheduled/v1/cancel"),
    ],
)
def test_other_methods_on_the_three_routes_are_405(
    worker: WorkerProcess, method: str, path: str
) -> None:
    assert worker.request(method, path).status == 405
