"""Bearer auth: decided before the body is touched, constant-time, never echoing a token."""

from __future__ import annotations

import io
import json
import logging

import falcon
import falcon.testing
import pytest

from appliance.config.credentials import Secret
from appliance.http.app import create_app
from appliance.http.auth import CredentialTable, parse_bearer
from appliance.http.client import HttpClient
from appliance.http.limits import read_body
from appliance.http.server import HttpServer

TOKENS = {
    "operator": "op-token-1111",
    "recovery": "rec-token-2222",
    "worker": "wrk-token-3333",
    "cluster": "clu-token-4444",
}


class Echo:
    """Counts how often a responder ran and how many body bytes it read."""

    def __init__(self) -> None:
        self.calls = 0

    def on_get(self, req, resp):
        self.calls += 1
        resp.media = {"role": req.context.auth_role}

    def on_post(self, req, resp):
        self.calls += 1
        resp.media = {"role": req.context.auth_role, "bytes": len(read_body(req))}


class RecoveryOnlyPost(Echo):
    accepted_roles = {"GET": {"operator", "recovery"}, "POST": {"recovery"}}


def make_app(echo: Echo | None = None, body_bytes_max: int = 4 * 1024 * 1024):
    echo = echo or Echo()
    app = create_app(
        routes={"/echo": echo, "/recovery": RecoveryOnlyPost()},
        credentials={role: Secret(value) for role, value in TOKENS.items()},
        accepted_roles={"operator", "recovery"},
        body_bytes_max=body_bytes_max,
        surface="test",
    )
    return app, echo


@pytest.fixture
def served():
    app, echo = make_app()
    server = HttpServer(app, host="127.0.0.1", port=0, name="auth", body_bytes_max=4 * 1024**2)
    with server:
        http = HttpClient(read_timeout_ms=5_000)
        yield f"http://127.0.0.1:{server.port}", http, echo
        http.close()


def assert_401(response, *tokens_not_echoed: str) -> None:
    assert response.status == 401
    assert response.header("www-authenticate") == "Bearer"
    document = response.json()
    assert document["error"]["code"] == "unauthorized"
    for token in tokens_not_echoed:
        assert token not in response.body.decode()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_request_without_a_bearer_is_401_with_a_bearer_challenge(served, method):
    base, http, echo = served
    response = http.request(method, base + "/echo", body=b"{}" if method == "POST" else None)
    assert_401(response)
    assert echo.calls == 0


def test_a_wrong_bearer_is_401_and_never_echoed(served):
    base, http, echo = served
    assert_401(http.get(base + "/echo", bearer="guess-0000"), "guess-0000")
    assert echo.calls == 0


@pytest.mark.parametrize("role", ["worker", "cluster"])
def test_a_known_credential_of_a_role_not_accepted_here_is_401(served, role):
    base, http, echo = served
    assert_401(http.get(base + "/echo", bearer=TOKENS[role]), TOKENS[role])
    assert echo.calls == 0


@pytest.mark.parametrize("role", ["operator", "recovery"])
def test_an_accepted_credential_passes_and_its_role_is_recorded(served, role):
    base, http, _ = served
    response = http.get(base + "/echo", bearer=TOKENS[role])
    assert response.status == 200
    assert response.json() == {"role": role}


def test_a_resource_can_narrow_the_roles_per_method(served):
    base, http, _ = served
    assert http.get(base + "/recovery", bearer=TOKENS["operator"]).status == 200
    assert_401(http.post(base + "/recovery", b"{}", bearer=TOKENS["operator"]))
    assert http.post(base + "/recovery", b"{}", bearer=TOKENS["recovery"]).status == 200


def test_an_unknown_path_is_401_before_it_is_404(served):
    base, http, _ = served
    assert_401(http.get(base + "/no-such-route"))
    assert http.get(base + "/no-such-route", bearer=TOKENS["operator"]).status == 404


def test_a_large_body_without_a_bearer_is_refused_without_reaching_the_handler(served):
    base, http, echo = served
    response = http.post(base + "/echo", b"x" * (4 * 1024 * 1024))
    assert_401(response)
    assert echo.calls == 0


class ExplodingInput(io.RawIOBase):
    """A wsgi.input that fails the test if anyone reads it."""

    def __init__(self) -> None:
        self.reads = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        raise AssertionError("the body was read before authentication")

    readinto = None  # type: ignore[assignment]


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Bearer {TOKENS['worker']}"])
def test_auth_is_decided_before_the_body_stream_is_touched(authorization):
    app, echo = make_app()
    stream = ExplodingInput()
    headers = {"Content-Length": "1000000", "Content-Type": "application/json"}
    if authorization:
        headers["Authorization"] = authorization
    environ = falcon.testing.create_environ(path="/echo", method="POST", headers=headers)
    environ["wsgi.input"] = stream
    captured: dict[str, object] = {}

    def start_response(status, response_headers, exc_info=None):
        captured["status"] = status

    body = b"".join(app(environ, start_response))
    assert captured["status"].startswith("401")
    assert json.loads(body)["error"]["code"] == "unauthorized"
    assert stream.reads == 0
    assert echo.calls == 0


def test_tokens_never_reach_the_log(served, caplog):
    base, http, _ = served
    caplog.set_level(logging.DEBUG)
    http.get(base + "/echo", bearer="presented-guess-9999")
    http.get(base + "/echo", bearer=TOKENS["worker"])
    http.get(base + "/echo", bearer=TOKENS["operator"])
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "a worker credential is not accepted here" in text
    for token in ["presented-guess-9999", *TOKENS.values()]:
        assert token not in text


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("Bearer a b", None),
        ("abc", None),
        (None, None),
        ("Bearer " + "x" * 9000, None),
    ],
)
def test_only_a_single_bearer_token_is_recognised(header, token):
    assert parse_bearer(header) == token


def test_a_credential_table_refuses_a_value_shared_by_two_roles():
    with pytest.raises(ValueError, match="every credential must differ"):
        CredentialTable({"operator": "same", "recovery": Secret("same")})


def test_a_credential_table_shows_roles_never_values():
    table = CredentialTable({"operator": "op-secret", "recovery": None})
    assert table.roles == {"operator"}
    assert "op-secret" not in repr(table)
    assert table.role_of("op-secret") == "operator"
    assert table.role_of("op-secre") is None
