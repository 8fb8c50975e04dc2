"""The bearer before the body, on a real socket: as soon as the headers are in, a missing or wrong
credential is answered 401 and the connection closed, whatever Content-Length or chunking says,
on every surface the appliance serves."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from appliance.config.credentials import Secret
from appliance.config.runner import Limits
from appliance.http.direct_server import DirectServer
from appliance.http.server import HttpServer
from appliance.management.app import create_management_app
from appliance.raft.transport import create_raft_app, raft_listener
from appliance.runner.admission import admission_server, create_admission_app
from appliance.worker.metrics_routes import create_worker_metrics_app
from appliance.worker.routes import create_worker_app

TOKENS = {
    "operator": "op-token-1111",
    "recovery": "rec-token-2222",
    "worker": "wrk-token-3333",
    "cluster": "clu-token-4444",
    "admission": "adm-token-5555",
}
SECRETS = {role: Secret(value) for role, value in TOKENS.items()}


def _never(*_args: object) -> None:
    raise AssertionError("a refused request reached a handler")


# surface → (app factory, a path it serves, the token it accepts, its fixed error fields)
SURFACES: dict[str, tuple[Callable[[], object], str, str, dict[str, object]]] = {
    "cluster": (
        lambda: create_raft_app(
            node_id="a", digest="d" * 64, deliver=_never, status=dict, credentials=SECRETS
        ),
        "/raft/v1/append",
        TOKENS["cluster"],
        {},
    ),
    "admission": (
        lambda: create_admission_app(_never, SECRETS),
        "/scheduler/v1/admit",
        TOKENS["admission"],
        {"protocol": 1},
    ),
    "worker": (
        lambda: create_worker_app(None, "ns", SECRETS["worker"]),  # type: ignore[arg-type]
        "/api/scheduled/v1/exec",
        TOKENS["worker"],
        {"protocol": 1},
    ),
    "management": (
        lambda: create_management_app(None, SECRETS, Limits()),  # type: ignore[arg-type]
        "/scheduler/v1/commands",
        TOKENS["operator"],
        {},
    ),
    "metrics": (
        lambda: create_worker_metrics_app(CollectorRegistry(), SECRETS["worker"]),
        "/metrics",
        TOKENS["worker"],
        {},
    ),
}


# surfaces served by a DirectServer (appliance/http/direct_server.py), as the processes serve
# them: a voter's cluster port, the admission route, the worker's routes
DIRECT_SURFACES: dict[str, tuple[Callable[[], object], str, str, dict[str, object]]] = {
    "admission (runner listener)": (
        lambda: admission_server(_never, SECRETS, host="127.0.0.1", port=0, name="admission"),
        "/scheduler/v1/admit",
        TOKENS["admission"],
        {"protocol": 1},
    ),
    "worker (worker listener)": (
        lambda: DirectServer.for_app(
            create_worker_app(None, "ns", SECRETS["worker"]),  # type: ignore[arg-type]
            host="127.0.0.1",
            port=0,
            name="worker",
            body_bytes_max=512 * 1024,
            error_extra={"protocol": 1},
        ),
        "/api/scheduled/v1/exec",
        TOKENS["worker"],
        {"protocol": 1},
    ),
    "cluster (voter listener)": (
        lambda: raft_listener(
            node_id="a",
            digest="d" * 64,
            deliver=_never,
            status=dict,
            credentials=SECRETS,
            host="127.0.0.1",
            port=0,
            name="cluster",
        ),
        "/raft/v1/append",
        TOKENS["cluster"],
        {},
    ),
}


@pytest.fixture(params=sorted(SURFACES) + sorted(DIRECT_SURFACES))
def surface(request):
    if request.param in DIRECT_SURFACES:
        build, path, token, extra = DIRECT_SURFACES[request.param]
        server = build().start()  # type: ignore[attr-defined]
    else:
        factory, path, token, extra = SURFACES[request.param]
        server = HttpServer(
            factory(), host="127.0.0.1", port=0, name=request.param, body_bytes_max=512 * 1024
        ).start()
    try:
        yield server, path, token, extra
    finally:
        server.stop()


def _read_response(sock: socket.socket, timeout_s: float) -> tuple[int, dict[str, str], bytes]:
    """One whole response (Content-Length framed); then assert the server closed."""
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return status, headers, body[:length]


def _assert_closed(sock: socket.socket) -> None:
    """The server's end of the stream (it shut its write side and drains, so no reset)."""
    sock.settimeout(2.0)
    assert sock.recv(1) == b""


def _send_head(port: int, head: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(head.encode("latin-1"))
    return sock


def _post_head(path: str, authorization: str | None, extra_headers: str) -> str:
    auth = f"Authorization: {authorization}\r\n" if authorization is not None else ""
    return f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}{extra_headers}\r\n"


def _assert_401(status, headers, body, extra) -> None:
    assert status == 401
    assert headers["www-authenticate"] == "Bearer"
    document = json.loads(body)
    assert document["error"]["code"] == "unauthorized"
    for key, value in extra.items():
        assert document[key] == value


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", "Basic abc"])
def test_a_declared_70000_byte_body_never_sent_is_401_within_100_ms(surface, authorization):
    server, path, _token, extra = surface
    sock = _send_head(server.port, _post_head(path, authorization, "Content-Length: 70000\r\n"))
    started = time.monotonic()
    try:
        status, headers, body = _read_response(sock, timeout_s=2.0)
        elapsed_s = time.monotonic() - started
        _assert_401(status, headers, body, extra)
        assert elapsed_s < 0.1, f"the 401 took {elapsed_s * 1000:.0f} ms"
        _assert_closed(sock)
    finally:
        sock.close()


def test_a_declared_10_gb_body_with_a_wrong_bearer_is_401_not_413(surface):
    server, path, _token, extra = surface
    head = _post_head(path, "Bearer wrong-token", "Content-Length: 10000000000\r\n")
    sock = _send_head(server.port, head)
    try:
        _assert_401(*_read_response(sock, timeout_s=2.0), extra)
        _assert_closed(sock)
    finally:
        sock.close()


def test_a_chunked_body_with_a_wrong_bearer_is_401_before_any_chunk(surface):
    server, path, _token, extra = surface
    head = _post_head(path, "Bearer wrong-token", "Transfer-Encoding: chunked\r\n")
    sock = _send_head(server.port, head)
    try:
        _assert_401(*_read_response(sock, timeout_s=2.0), extra)
        _assert_closed(sock)
    finally:
        sock.close()


def test_expect_continue_with_a_wrong_bearer_gets_no_100_only_the_401(surface):
    server, path, _token, extra = surface
    head = _post_head(
        path, "Bearer wrong-token", "Content-Length: 70000\r\nExpect: 100-continue\r\n"
    )
    sock = _send_head(server.port, head)
    try:
        _assert_401(*_read_response(sock, timeout_s=2.0), extra)
        _assert_closed(sock)
    finally:
        sock.close()


def test_body_bytes_sent_with_the_refused_headers_are_never_parsed_as_a_request(surface):
    """A smuggled second request in the same packet as a refused one gets no answer of its own."""
    server, path, token, extra = surface
    smuggled = f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    head = _post_head(path, "Bearer wrong-token", f"Content-Length: {len(smuggled)}\r\n")
    sock = _send_head(server.port, head + smuggled)
    try:
        _assert_401(*_read_response(sock, timeout_s=2.0), extra)
        _assert_closed(sock)
    finally:
        sock.close()


def test_a_valid_bearer_over_the_declared_limit_is_still_413(surface):
    server, path, token, _extra = surface
    head = _post_head(path, f"Bearer {token}", "Content-Length: 10000000000\r\n")
    sock = _send_head(server.port, head)
    try:
        status, _headers, body = _read_response(sock, timeout_s=2.0)
        assert status == 413
        assert json.loads(body)["error"]["code"] == "body_too_large"
    finally:
        sock.close()


@pytest.mark.parametrize(
    "raw",
    [
        b"NOT A REQUEST\r\n\r\n",  # 400
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n",  # 431
    ],
)
def test_the_servers_own_refusals_carry_the_surfaces_error_fields(surface, raw):
    """On the worker and admission listeners every answer is a protocol-1 document, including
    the ones the server gives before any app code runs."""
    server, _path, _token, extra = surface
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        sock.sendall(raw)
        status, _headers, body = _read_response(sock, timeout_s=2.0)
        assert status in (400, 431)
        document = json.loads(body)
        assert document["error"]["code"] in ("bad_request", "headers_too_large")
        for key, value in extra.items():
            assert document[key] == value
    finally:
        sock.close()
