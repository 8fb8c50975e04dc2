"""A listener that idle or slow connections cannot hold: header deadline, room-making at the
limit, idle connections closed under pressure, refusals answered without the app's threads, and
descriptors past 1,024."""

from __future__ import annotations

import os
import resource
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from appliance.config.credentials import Secret
from appliance.http.app import create_app
from appliance.http.client import HttpClient
from appliance.http.connections import ConnectionPolicy
from appliance.http.server import HttpServer, raise_open_files_limit

TOKEN = "conn-token-1234"


class Hello:
    def on_get(self, req, resp):
        resp.media = {"hello": True}


class Held:
    """GET blocks until ``release`` is set: a request the server must never drop."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_get(self, req, resp):
        self.entered.set()
        self.release.wait(10)
        resp.media = {"held": True}


def make_server(*, limit: int = 64, deadline_s: float = 0.5, idle_s: float = 0.5, threads=4):
    held = Held()
    app = create_app(
        routes={"/hello": Hello(), "/held": held},
        credentials={"operator": Secret(TOKEN)},
        accepted_roles={"operator"},
        body_bytes_max=4096,
        surface="test",
    )
    server = HttpServer(
        app,
        host="127.0.0.1",
        port=0,
        name="conn",
        body_bytes_max=4096,
        threads=threads,
        connection_limit=limit,
        policy=ConnectionPolicy(header_deadline_s=deadline_s, idle_under_pressure_s=idle_s),
    )
    return server, held


@pytest.fixture
def http() -> Iterator[HttpClient]:
    client = HttpClient(read_timeout_ms=5_000)
    yield client
    client.close()


def partial(port: int, data: bytes = b"GET /hello HTTP/1.1\r\nHost: x\r\n") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if data:
        sock.sendall(data)
    return sock


def closed_by_server(sock: socket.socket, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def get_hello(http: HttpClient, port: int, *, fresh: bool = True):
    return http.get(
        f"http://127.0.0.1:{port}/hello", bearer=TOKEN, fresh_connection=fresh, read_timeout_ms=2000
    )


@pytest.mark.parametrize("sent", [b"", b"GET /hello HTTP/1.1\r\nHost: x\r\n"])
def test_a_connection_without_complete_headers_is_closed_at_the_deadline(sent):
    server, _ = make_server(deadline_s=0.5)
    with server:
        sock = partial(server.port, sent)
        started = time.monotonic()
        try:
            assert not closed_by_server(sock, within_s=0.3)  # not before the deadline
            assert closed_by_server(sock, within_s=2.0)
            assert time.monotonic() - started < 0.5 + 1.5  # the upkeep runs every second
        finally:
            sock.close()
        assert server.connection_counts.header_deadline_closed == 1


def test_trickling_a_byte_at_a_time_does_not_extend_the_deadline():
    server, _ = make_server(deadline_s=0.6)
    with server:
        sock = partial(server.port, b"G")
        started = time.monotonic()
        try:
            for byte in b"ET /hello HTTP/1.1\r\nHost:":
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    break
                time.sleep(0.05)
            assert closed_by_server(sock, within_s=2.5)
            assert time.monotonic() - started < 0.6 + 1.6
        finally:
            sock.close()


def test_an_idle_keep_alive_connection_outlives_the_header_deadline_without_pressure(http):
    server, _ = make_server(deadline_s=0.3, idle_s=0.2)
    with server:
        assert get_hello(http, server.port, fresh=False).status == 200
        time.sleep(1.5)  # several upkeeps, idle, no pressure
        assert server.connection_counts.header_deadline_closed == 0
        assert server.connection_counts.idle_closed_under_pressure == 0


def test_under_pressure_idle_connections_are_closed_and_the_client_reconnects_cleanly(http):
    server, _ = make_server(limit=8, deadline_s=5, idle_s=0.2)
    with server:
        assert get_hello(http, server.port, fresh=False).status == 200  # one idle, pooled
        attackers = [partial(server.port) for _ in range(6)]  # 7 of 8: under pressure
        try:
            deadline = time.monotonic() + 3
            while server.connection_counts.idle_closed_under_pressure == 0:
                assert time.monotonic() < deadline, "the idle connection was never closed"
                time.sleep(0.05)
            # The pooled connection was closed by the server: the client sees it before writing
            # and opens a new one (no ambiguous send).
            assert get_hello(http, server.port, fresh=False).status == 200
        finally:
            for sock in attackers:
                sock.close()


def test_at_the_limit_the_oldest_waiting_connection_makes_room_for_an_authenticated_one(http):
    server, _ = make_server(limit=8, deadline_s=30)
    with server:
        attackers = [partial(server.port) for _ in range(8)]
        try:
            time.sleep(0.2)
            started = time.monotonic()
            response = get_hello(http, server.port)
            assert response.status == 200
            assert time.monotonic() - started < 1.0
            assert server.connection_counts.evicted_for_room >= 1
            assert closed_by_server(attackers[0], within_s=1.0)  # the oldest went first
        finally:
            for sock in attackers:
                sock.close()


def test_a_connection_holding_a_request_is_never_closed_to_make_room(http):
    server, held = make_server(limit=3, deadline_s=30)
    with server:
        result: dict[str, object] = {}

        def held_request() -> None:
            with HttpClient(read_timeout_ms=10_000) as client:
                result["response"] = client.get(
                    f"http://127.0.0.1:{server.port}/held", bearer=TOKEN, fresh_connection=True
                )

        thread = threading.Thread(target=held_request)
        thread.start()
        assert held.entered.wait(5)
        attackers = [partial(server.port) for _ in range(2)]
        try:
            time.sleep(0.2)
            for _ in range(3):  # each needs room: an attacker goes, never the held request
                assert get_hello(http, server.port).status == 200
            held.release.set()
            thread.join(10)
            assert result["response"].status == 200  # type: ignore[attr-defined]
        finally:
            held.release.set()
            for sock in attackers:
                sock.close()


def test_a_refusal_is_answered_even_when_every_app_thread_is_busy(http):
    server, held = make_server(threads=1, deadline_s=30)
    with server:
        thread = threading.Thread(
            target=lambda: HttpClient(read_timeout_ms=10_000).get(
                f"http://127.0.0.1:{server.port}/held", bearer=TOKEN, fresh_connection=True
            )
        )
        thread.start()
        try:
            assert held.entered.wait(5)
            started = time.monotonic()
            response = http.get(
                f"http://127.0.0.1:{server.port}/hello", bearer="wrong", read_timeout_ms=2000
            )
            assert response.status == 401
            assert time.monotonic() - started < 0.5
        finally:
            held.release.set()
            thread.join(10)


def test_the_open_files_limit_is_raised_and_descriptors_past_1024_are_served(http):
    soft = raise_open_files_limit()
    if soft < 1300:
        pytest.fail(f"the soft open files limit could only be raised to {soft}")
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        server, _ = make_server()
        with server:
            assert server.listening_fd > 1024
            assert get_hello(http, server.port).status == 200
    finally:
        for fd in fillers:
            os.close(fd)
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 1300


def test_policy_bounds_are_validated():
    with pytest.raises(ValueError, match="header_deadline_s"):
        ConnectionPolicy(header_deadline_s=0)
    with pytest.raises(ValueError, match="idle_under_pressure_s"):
        ConnectionPolicy(idle_under_pressure_s=-1)
