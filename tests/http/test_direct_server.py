"""``DirectServer`` (appliance/http/direct_server.py) on real sockets: requests served on the
connection's own thread, the shared rules (bearer before the body, caps at the byte, the JSON
error shape, draining closes), and the connection limits (header deadline, room-making at the
limit, idle connections under pressure)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import falcon
import pytest

from appliance.config.credentials import Secret
from appliance.http.app import create_app
from appliance.http.auth import BearerAuth
from appliance.http.client import HttpClient
from appliance.http.connections import ConnectionPolicy
from appliance.http.direct_server import DirectReply, DirectRequest, DirectServer
from appliance.http.errors import ApiError
from appliance.http.gate import HEADER_BYTES_MAX
from appliance.http.limits import read_body
from appliance.http.server import AddressInUse

TOKEN = "direct-token-1234"
OTHER = "other-role-token-5678"
CAP = 4096


class Handlers:
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: list[str] = []
        self.bodies: list[bytes] = []

    def echo(self, request: DirectRequest) -> DirectReply:
        self.threads.append(threading.current_thread().name)
        self.bodies.append(request.body)
        document = {"role": request.role, "length": len(request.body)}
        return DirectReply(200, json.dumps(document).encode(), "application/json")

    def held(self, request: DirectRequest) -> DirectReply:
        self.entered.set()
        self.release.wait(10)
        return DirectReply(200, b"held")

    def refuse(self, request: DirectRequest) -> DirectReply:
        raise ApiError(409, "not_owner", "this voter is not the owner", fields={"hint": "v2"})

    def broken(self, request: DirectRequest) -> DirectReply:
        raise RuntimeError("secret internal detail")


def make_server(
    *,
    limit: int = 64,
    deadline_s: float = 0.5,
    idle_s: float = 0.5,
    extra: dict[str, object] | None = None,
) -> tuple[DirectServer, Handlers]:
    handlers = Handlers()
    gate = BearerAuth({"operator": Secret(TOKEN), "worker": Secret(OTHER)}, {"operator"})
    server = DirectServer(
        {
            "/echo": {"POST": handlers.echo, "GET": handlers.echo},
            "/held": {"GET": handlers.held},
            "/refuse": {"POST": handlers.refuse},
            "/broken": {"GET": handlers.broken},
        },
        gate=gate,
        host="127.0.0.1",
        port=0,
        name="direct",
        body_bytes_max=CAP,
        connection_limit=limit,
        policy=ConnectionPolicy(header_deadline_s=deadline_s, idle_under_pressure_s=idle_s),
        error_extra=extra,
    )
    return server, handlers


@pytest.fixture
def http() -> Iterator[HttpClient]:
    client = HttpClient(read_timeout_ms=5_000)
    yield client
    client.close()


def connect(port: int, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if data:
        sock.sendall(data)
    return sock


def read_response(sock: socket.socket, timeout_s: float = 2.0) -> tuple[int, dict[str, str], bytes]:
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return int(lines[0].split()[1]), headers, body[:length]


def closed_by_server(sock: socket.socket, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def post(path: str, body: bytes, *, token: str | None = TOKEN, headers: str = "") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token is not None else ""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {len(body)}\r\n{headers}\r\n"
    return head.encode("latin-1") + body


def test_requests_on_one_connection_are_served_by_that_connections_thread():
    server, handlers = make_server()
    with server:
        sock = connect(server.port)
        try:
            for body in (b"one", b"two!"):
                sock.sendall(post("/echo", body))
                status, headers, answer = read_response(sock)
                assert status == 200
                assert headers["content-type"] == "application/json"
                assert json.loads(answer) == {"role": "operator", "length": len(body)}
        finally:
            sock.close()
    assert handlers.bodies == [b"one", b"two!"]
    assert len(set(handlers.threads)) == 1  # the same thread, kept with the connection
    assert handlers.threads[0] == "http-direct-conn"


def test_the_pooled_client_talks_to_it(http):
    server, _ = make_server()
    with server:
        url = f"http://127.0.0.1:{server.port}/echo"
        for _ in range(3):
            response = http.post(url, b"x" * 10, bearer=TOKEN)
            assert response.status == 200
            assert response.json()["length"] == 10
        assert server.open_connections() == 1  # kept alive and reused


def test_connection_close_is_honoured():
    server, _ = make_server()
    with server:
        sock = connect(server.port, post("/echo", b"a", headers="Connection: close\r\n"))
        try:
            status, headers, _ = read_response(sock)
            assert status == 200
            assert headers["connection"] == "close"
            assert closed_by_server(sock, 2.0)
        finally:
            sock.close()


@pytest.mark.parametrize(
    "extra_headers",
    [
        "Content-Length: 10000000000\r\n",  # a declared 10 GB body never sent
        "Transfer-Encoding: chunked\r\n",
        "Content-Length: 70000\r\nExpect: 100-continue\r\n",
    ],
)
@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Bearer {OTHER}", "Basic abc"])
def test_a_wrong_or_missing_bearer_is_401_before_any_body_byte(extra_headers, authorization):
    server, handlers = make_server(extra={"protocol": 1})
    with server:
        auth = f"Authorization: {authorization}\r\n" if authorization else ""
        head = f"POST /echo HTTP/1.1\r\nHost: x\r\n{auth}{extra_headers}\r\n"
        sock = connect(server.port, head.encode())
        started = time.monotonic()
        try:
            status, headers, body = read_response(sock)
            assert time.monotonic() - started < 0.5
            assert status == 401
            assert headers["www-authenticate"] == "Bearer"
            assert json.loads(body) == {
                "protocol": 1,
                "error": {
                    "code": "unauthorized",
                    "message": "a valid bearer credential is required",
                },
            }
            assert closed_by_server(sock, 2.0)  # no 100 Continue came first either
        finally:
            sock.close()
    assert handlers.bodies == []


def test_bytes_after_refused_headers_are_never_parsed_as_a_request():
    server, handlers = make_server()
    with server:
        smuggled = f"GET /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        sock = connect(server.port, post("/echo", smuggled.encode(), token="wrong"))
        try:
            status, _, _ = read_response(sock)
            assert status == 401
            assert closed_by_server(sock, 2.0)
        finally:
            sock.close()
    assert handlers.bodies == []


def test_the_body_cap_is_exact():
    server, handlers = make_server()
    with server:
        sock = connect(server.port, post("/echo", b"b" * CAP))
        try:
            status, _, body = read_response(sock)
            assert status == 200
            assert json.loads(body)["length"] == CAP
            sock.sendall(post("/echo", b"b" * (CAP + 1)))
            status, _, body = read_response(sock)
            assert status == 413
            assert json.loads(body)["error"] == {
                "code": "body_too_large",
                "message": f"request body exceeds {CAP} bytes",
            }
            assert closed_by_server(sock, 2.0)
        finally:
            sock.close()
    assert [len(b) for b in handlers.bodies] == [CAP]


def test_expect_continue_with_a_valid_bearer_gets_100_then_the_answer():
    server, _ = make_server()
    with server:
        head = (
            f"POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Length: 5\r\nExpect: 100-continue\r\n\r\n"
        )
        sock = connect(server.port, head.encode())
        try:
            sock.settimeout(2)
            assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
            sock.sendall(b"hello")
            status, _, body = read_response(sock)
            assert status == 200
            assert json.loads(body)["length"] == 5
        finally:
            sock.close()


def test_headers_at_the_limit_pass_and_one_byte_more_is_431():
    server, _ = make_server(deadline_s=5)
    with server:
        base = f"GET /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nX-Pad: "
        at_limit = base + "p" * (HEADER_BYTES_MAX - len(base))
        assert len(at_limit) == HEADER_BYTES_MAX
        for head, expected in ((at_limit, 200), (at_limit + "p", 431)):
            sock = connect(server.port, (head + "\r\n\r\n").encode())
            try:
                status, _, body = read_response(sock)
                assert status == expected
                if expected == 431:
                    assert json.loads(body)["error"]["code"] == "headers_too_large"
            finally:
                sock.close()


@pytest.mark.parametrize(
    "raw",
    [
        b"NOT A REQUEST\r\n\r\n",
        b"GET /echo HTTP/2.0\r\nHost: x\r\n\r\n",
        b"GET /echo HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
        b"GET /echo HTTP/1.1\r\nBad Header: x\r\n\r\n",
    ],
)
def test_a_malformed_request_is_400_in_the_surfaces_shape(raw):
    server, _ = make_server(extra={"protocol": 1})
    with server:
        sock = connect(server.port, raw)
        try:
            status, _, body = read_response(sock)
            assert status == 400
            assert json.loads(body) == {
                "protocol": 1,
                "error": {"code": "bad_request", "message": "malformed HTTP request"},
            }
            assert closed_by_server(sock, 2.0)
        finally:
            sock.close()


@pytest.mark.parametrize(
    "lengths", ["Content-Length: 3\r\nContent-Length: 4\r\n", "Content-Length: -3\r\n"]
)
def test_an_ambiguous_length_is_400(lengths):
    server, handlers = make_server()
    with server:
        head = f"POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n{lengths}\r\n"
        sock = connect(server.port, head.encode() + b"abcd")
        try:
            assert read_response(sock)[0] == 400
        finally:
            sock.close()
    assert handlers.bodies == []


def chunked(body: bytes, pieces: int = 3, *, extra: str = "") -> bytes:
    head = (
        f"POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Transfer-Encoding: chunked\r\n{extra}\r\n"
    ).encode()
    step = max(1, len(body) // pieces)
    out = b""
    for at in range(0, len(body), step):
        piece = body[at : at + step]
        out += f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n"
    return head + out + b"0\r\nX-Trailer: t\r\n\r\n"


def test_a_chunked_body_is_read_whole_and_capped_exactly():
    server, handlers = make_server()
    with server:
        sock = connect(server.port, chunked(b"c" * CAP))
        try:
            status, _, body = read_response(sock)
            assert status == 200
            assert json.loads(body)["length"] == CAP
            sock.sendall(chunked(b"c" * 10))  # the connection is kept: the next one reads fine
            assert json.loads(read_response(sock)[2])["length"] == 10
            sock.sendall(chunked(b"c" * (CAP + 1)))
            status, _, body = read_response(sock)
            assert status == 413
            assert json.loads(body)["error"]["code"] == "body_too_large"
            assert closed_by_server(sock, 2.0)
        finally:
            sock.close()
    assert [len(b) for b in handlers.bodies] == [CAP, 10]


@pytest.mark.parametrize(
    "raw",
    [
        b"zz\r\nabc\r\n0\r\n\r\n",  # not a hex size
        b"3\r\nabcdef\r\n0\r\n\r\n",  # more data than the size said
    ],
)
def test_a_malformed_chunked_body_is_400(raw):
    server, handlers = make_server()
    with server:
        head = (
            f"POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        ).encode()
        sock = connect(server.port, head + raw)
        try:
            assert read_response(sock)[0] == 400
        finally:
            sock.close()
    assert handlers.bodies == []


@pytest.mark.parametrize(
    "framing",
    ["Transfer-Encoding: gzip\r\n", "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n"],
)
def test_another_coding_or_chunked_with_a_length_is_400(framing):
    server, handlers = make_server()
    with server:
        head = (
            f"POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n{framing}\r\n"
        ).encode()
        sock = connect(server.port, head + b"abc")
        try:
            assert read_response(sock)[0] == 400
        finally:
            sock.close()
    assert handlers.bodies == []


def test_unknown_paths_are_401_before_404_and_methods_are_405(http):
    server, _ = make_server()
    with server:
        base = f"http://127.0.0.1:{server.port}"
        assert http.get(f"{base}/nowhere").status == 401
        missing = http.get(f"{base}/nowhere", bearer=TOKEN)
        assert missing.status == 404
        assert missing.json()["error"]["code"] == "not_found"
        wrong = http.request("PUT", f"{base}/echo", body=b"", bearer=TOKEN)
        assert wrong.status == 405
        assert dict(wrong.headers)["Allow"] == "GET, POST"


def test_handler_refusals_and_failures_are_json_without_internal_text(http):
    server, _ = make_server()
    with server:
        base = f"http://127.0.0.1:{server.port}"
        refused = http.post(f"{base}/refuse", b"{}", bearer=TOKEN)
        assert refused.status == 409
        assert refused.json() == {
            "error": {"code": "not_owner", "message": "this voter is not the owner", "hint": "v2"}
        }
        broken = http.get(f"{base}/broken", bearer=TOKEN)
        assert broken.status == 500
        assert b"secret" not in broken.body
        assert broken.json()["error"]["code"] == "internal_error"
        assert http.post(f"{base}/echo", b"ok", bearer=TOKEN).status == 200  # still serving


@pytest.mark.parametrize("sent", [b"", b"GET /echo HTTP/1.1\r\nHost: x\r\n"])
def test_a_connection_without_complete_headers_is_closed_at_the_deadline(sent):
    server, _ = make_server(deadline_s=0.5)
    with server:
        sock = connect(server.port, sent)
        started = time.monotonic()
        try:
            assert not closed_by_server(sock, within_s=0.3)
            assert closed_by_server(sock, within_s=2.0)
            assert time.monotonic() - started < 1.0  # its own thread keeps the deadline
        finally:
            sock.close()
        deadline = time.monotonic() + 2
        while server.connection_counts.header_deadline_closed == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert server.connection_counts.header_deadline_closed == 1


def test_trickling_a_byte_at_a_time_does_not_extend_the_deadline():
    server, _ = make_server(deadline_s=0.6)
    with server:
        sock = connect(server.port, b"G")
        started = time.monotonic()
        try:
            for byte in b"ET /echo HTTP/1.1\r\nHost:":
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    break
                time.sleep(0.05)
            assert closed_by_server(sock, within_s=2.5)
            assert time.monotonic() - started < 0.6 + 0.5
        finally:
            sock.close()


def test_an_idle_keep_alive_connection_outlives_the_header_deadline_without_pressure(http):
    server, _ = make_server(deadline_s=0.3, idle_s=0.2)
    with server:
        url = f"http://127.0.0.1:{server.port}/echo"
        assert http.get(url, bearer=TOKEN).status == 200
        time.sleep(1.5)
        assert server.connection_counts.header_deadline_closed == 0
        assert server.connection_counts.idle_closed_under_pressure == 0
        assert server.open_connections() == 1


def test_under_pressure_idle_connections_are_closed_and_the_client_reconnects_cleanly(http):
    server, _ = make_server(limit=8, deadline_s=5, idle_s=0.2)
    with server:
        url = f"http://127.0.0.1:{server.port}/echo"
        assert http.get(url, bearer=TOKEN).status == 200  # one idle, pooled
        attackers = [connect(server.port, b"GET /") for _ in range(6)]  # 7 of 8: pressure
        try:
            deadline = time.monotonic() + 3
            while server.connection_counts.idle_closed_under_pressure == 0:
                assert time.monotonic() < deadline, "the idle connection was never closed"
                time.sleep(0.05)
            assert http.get(url, bearer=TOKEN).status == 200  # a new connection, no ambiguity
        finally:
            for sock in attackers:
                sock.close()


def test_at_the_limit_the_oldest_waiting_connection_makes_room_for_an_authenticated_one(http):
    server, _ = make_server(limit=8, deadline_s=30)
    with server:
        attackers = []
        for _ in range(8):
            attackers.append(connect(server.port, b"GET /"))
            time.sleep(0.01)  # distinct ages
        try:
            deadline = time.monotonic() + 2
            while server.open_connections() < 8:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert server.connection_counts.evicted_for_room == 0  # nobody else wanted in yet
            started = time.monotonic()
            response = http.get(f"http://127.0.0.1:{server.port}/echo", bearer=TOKEN)
            assert response.status == 200
            assert time.monotonic() - started < 1.0
            assert server.connection_counts.evicted_for_room == 1
            assert closed_by_server(attackers[0], within_s=1.0)  # the oldest went first
            assert not closed_by_server(attackers[1], within_s=0.2)
        finally:
            for sock in attackers:
                sock.close()


def test_a_connection_holding_a_request_is_never_closed_to_make_room(http):
    server, handlers = make_server(limit=3, deadline_s=30)
    with server:
        result: dict[str, object] = {}

        def held_request() -> None:
            with HttpClient(read_timeout_ms=10_000) as client:
                result["response"] = client.get(
                    f"http://127.0.0.1:{server.port}/held", bearer=TOKEN, fresh_connection=True
                )

        thread = threading.Thread(target=held_request)
        thread.start()
        assert handlers.entered.wait(5)
        attackers = [connect(server.port, b"GET /") for _ in range(2)]
        try:
            for _ in range(3):  # each needs room: an attacker or an idle one goes, never held
                response = http.get(
                    f"http://127.0.0.1:{server.port}/echo", bearer=TOKEN, fresh_connection=True
                )
                assert response.status == 200
            handlers.release.set()
            thread.join(10)
            assert result["response"].status == 200  # type: ignore[attr-defined]
        finally:
            handlers.release.set()
            for sock in attackers:
                sock.close()


def test_when_every_connection_holds_a_request_the_newcomer_waits_for_one_to_finish():
    server, handlers = make_server(limit=1, deadline_s=30)
    with server:
        holder = connect(
            server.port, f"GET /held HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        try:
            assert handlers.entered.wait(5)
            newcomer = connect(server.port, post("/echo", b"late"))
            try:
                newcomer.settimeout(0.5)
                with pytest.raises(TimeoutError):
                    newcomer.recv(1)  # still in the backlog: not accepted, not refused
                assert server.connection_counts.evicted_for_room == 0  # the holder stayed
                handlers.release.set()
                assert read_response(holder)[0] == 200
                holder.close()
                status, _, body = read_response(newcomer, timeout_s=3)
                assert status == 200
                assert json.loads(body)["length"] == 4
            finally:
                newcomer.close()
        finally:
            handlers.release.set()
            holder.close()


def test_stop_closes_connections_and_is_idempotent():
    server, _ = make_server()
    server.start()
    sock = connect(server.port, b"GET /")
    try:
        time.sleep(0.1)
        server.stop()
        assert closed_by_server(sock, 2.0)
        assert not server.running
        server.stop()
    finally:
        sock.close()


def test_a_taken_port_is_address_in_use():
    first, _ = make_server()
    with first:
        second = DirectServer(
            {},
            gate=BearerAuth({"operator": Secret(TOKEN)}, {"operator"}),
            host="127.0.0.1",
            port=first.port,
            name="second",
            body_bytes_max=1,
        )
        with pytest.raises(AddressInUse):
            second.start()


def test_limits_are_validated():
    gate = BearerAuth({"operator": Secret(TOKEN)}, {"operator"})
    with pytest.raises(ValueError, match="connection_limit"):
        DirectServer(
            {}, gate=gate, host="127.0.0.1", port=0, name="x", body_bytes_max=1, connection_limit=0
        )
    with pytest.raises(ValueError, match="body_bytes_max"):
        DirectServer({}, gate=gate, host="127.0.0.1", port=0, name="x", body_bytes_max=-1)


# -- a Falcon app served on connection threads (DirectServer.for_app) ---------------------------


class Items:
    """GET echoes the query parameter and the role; POST counts the body (through read_body)."""

    def on_get(self, req, resp):
        resp.media = {"floor": req.get_param("retained_through"), "role": req.context.auth_role}

    def on_post(self, req, resp):
        resp.status = falcon.HTTP_202
        resp.media = {"bytes": len(read_body(req, CAP))}


class Boom:
    def on_get(self, req, resp):
        raise RuntimeError("secret internal detail")


def make_app_server(**kwargs) -> DirectServer:
    app = create_app(
        routes={"/items": Items(), "/boom": Boom()},
        credentials={"worker": Secret(TOKEN), "operator": Secret(OTHER)},
        accepted_roles={"worker"},
        body_bytes_max=CAP,
        surface="test",
        error_extra={"protocol": 1},
    )
    return DirectServer.for_app(
        app, host="127.0.0.1", port=0, name="app", body_bytes_max=CAP, **kwargs
    )


def test_a_falcon_app_is_served_with_its_routes_query_and_errors(http):
    with make_app_server() as server:
        base = f"http://127.0.0.1:{server.port}"
        got = http.get(f"{base}/items?retained_through=42", bearer=TOKEN)
        assert got.status == 200
        assert got.json() == {"floor": "42", "role": "worker"}
        posted = http.post(f"{base}/items", b"z" * CAP, bearer=TOKEN)
        assert posted.status == 202
        assert posted.json() == {"bytes": CAP}
        missing = http.get(f"{base}/nowhere", bearer=TOKEN)
        assert missing.status == 404
        assert missing.json()["protocol"] == 1  # the app's own error shape
        broken = http.get(f"{base}/boom", bearer=TOKEN)
        assert broken.status == 500
        assert b"secret" not in broken.body
        refused = http.get(f"{base}/items", bearer=OTHER)  # a known role this surface refuses
        assert refused.status == 401
        assert refused.json() == {
            "protocol": 1,
            "error": {"code": "unauthorized", "message": "a valid bearer credential is required"},
        }


def test_a_fresh_connection_per_request_reuses_a_parked_thread(http):
    seen: list[int] = []

    class Who:
        def on_get(self, req, resp):
            seen.append(threading.get_ident())
            resp.media = {}

    app = create_app(
        routes={"/who": Who()},
        credentials={"worker": Secret(TOKEN)},
        accepted_roles={"worker"},
        body_bytes_max=CAP,
        surface="test",
    )
    with DirectServer.for_app(
        app, host="127.0.0.1", port=0, name="app", body_bytes_max=CAP
    ) as server:
        for _ in range(5):
            response = http.get(
                f"http://127.0.0.1:{server.port}/who", bearer=TOKEN, fresh_connection=True
            )
            assert response.status == 200
            deadline = time.monotonic() + 2
            while server.open_connections():  # the client closed; its thread parks again
                assert time.monotonic() < deadline
                time.sleep(0.005)
    assert len(seen) == 5
    assert len(set(seen)) == 1  # one thread served all five connections, one after another


def test_for_app_needs_an_app_with_a_bearer_gate():
    with pytest.raises(ValueError, match="bearer gate"):
        DirectServer.for_app(falcon.App(), host="127.0.0.1", port=0, name="bare", body_bytes_max=1)
