"""Body caps at the exact boundary, and strict JSON object parsing."""

from __future__ import annotations

import socket

import pytest

from appliance.http.app import create_app
from appliance.http.client import HttpClient
from appliance.http.errors import ApiError
from appliance.http.limits import parse_json_object, read_body, read_json_object
from appliance.http.server import CHUNK_FRAMING_ALLOWANCE_BYTES, HttpServer

CAP = 64 * 1024
TOKEN = "op-token-1234"


class Sink:
    def __init__(self) -> None:
        self.sizes: list[int] = []

    def on_post(self, req, resp):
        self.sizes.append(len(read_body(req)))
        resp.media = {"bytes": self.sizes[-1]}


class JsonEcho:
    def on_post(self, req, resp):
        resp.media = read_json_object(req)


@pytest.fixture
def served():
    sink = Sink()
    app = create_app(
        routes={"/sink": sink, "/json": JsonEcho()},
        credentials={"operator": TOKEN},
        accepted_roles={"operator"},
        body_bytes_max=CAP,
        surface="limits",
    )
    with HttpServer(app, host="127.0.0.1", port=0, name="limits", body_bytes_max=CAP) as server:
        http = HttpClient()
        yield server, http, sink
        http.close()


def raw_exchange(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk


def chunked_request(body: bytes, chunk_bytes: int = 8192) -> bytes:
    head = (
        "POST /sink HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunks = b"".join(
        f"{len(body[i : i + chunk_bytes]):x}\r\n".encode() + body[i : i + chunk_bytes] + b"\r\n"
        for i in range(0, len(body), chunk_bytes)
    )
    return head + chunks + b"0\r\n\r\n"


def test_a_body_exactly_at_the_cap_is_accepted(served):
    server, http, sink = served
    url = f"http://127.0.0.1:{server.port}/sink"
    response = http.post(url, b"x" * CAP, bearer=TOKEN)
    assert response.status == 200
    assert sink.sizes == [CAP]


def test_one_byte_over_the_cap_is_413_and_the_handler_never_runs(served):
    server, http, sink = served
    url = f"http://127.0.0.1:{server.port}/sink"
    response = http.post(url, b"x" * (CAP + 1), bearer=TOKEN)
    assert response.status == 413
    assert response.json()["error"] == {
        "code": "body_too_large",
        "message": f"request body exceeds {CAP} bytes",
    }
    assert sink.sizes == []


def test_a_chunked_body_exactly_at_the_cap_is_accepted(served):
    server, _, sink = served
    reply = raw_exchange(server.port, chunked_request(b"y" * CAP))
    assert reply.startswith(b"HTTP/1.1 200")
    assert sink.sizes == [CAP]


def test_a_chunked_body_one_byte_over_the_cap_is_413(served):
    server, _, sink = served
    reply = raw_exchange(server.port, chunked_request(b"y" * (CAP + 1)))
    assert reply.startswith(b"HTTP/1.1 413")
    assert sink.sizes == []


def test_a_declared_length_far_over_the_cap_is_refused_by_waitress_without_the_body(served):
    server, _, sink = served
    declared = CAP + CHUNK_FRAMING_ALLOWANCE_BYTES + 1
    head = (
        f"POST /sink HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    ).encode()
    reply = raw_exchange(server.port, head)  # no body is ever sent
    assert reply.startswith(b"HTTP/1.1 413")
    assert b'"code":"body_too_large"' in reply
    assert f"exceeds {CAP} bytes".encode() in reply
    assert sink.sizes == []


def test_malformed_http_is_answered_in_the_json_error_shape(served):
    server, _, _ = served
    reply = raw_exchange(server.port, b"POST /sink HTTP/1.1\r\nContent-Length: nope\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400")
    assert b'"error":{"code":"bad_request"' in reply


def test_a_json_object_round_trips(served):
    server, http, _ = served
    url = f"http://127.0.0.1:{server.port}/json"
    response = http.post(url, b'{"a": [1, 2], "b": {"c": null}}', bearer=TOKEN)
    assert response.status == 200
    assert response.json() == {"a": [1, 2], "b": {"c": None}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"a": 1', "request body is not valid JSON at character 7"),
        (b"[1, 2]", "request body must be a JSON object"),
        (b'"text"', "request body must be a JSON object"),
        (b'{"a": 1, "a": 2}', "request body has a duplicate object key"),
        (b'{"a": {"b": 1, "b": 1}}', "request body has a duplicate object key"),
        (b'{"a": NaN}', "request body is not valid JSON"),
        (b'{"a": Infinity}', "request body is not valid JSON"),
        (b'{"a": "\xff"}', "request body is not valid UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "request body is nested too deeply"),
        (b"", "request body is not valid JSON at character 0"),
    ],
)
def test_strict_json_refuses_with_a_safe_400(body, message):
    with pytest.raises(ApiError) as refusal:
        parse_json_object(body)
    assert refusal.value.status_code == 400
    assert refusal.value.error_code == "malformed_json"
    assert refusal.value.message.startswith(message)


def test_a_json_refusal_never_echoes_the_input():
    with pytest.raises(ApiError) as refusal:
        parse_json_object(b'{"secret-looking-value": oops}')
    assert "secret-looking-value" not in refusal.value.message
