"""The waitress wrapper: ephemeral ports, a clear error for a taken address, a clean stop."""

from __future__ import annotations

import socket
import threading

import falcon
import pytest

from appliance.http.client import ConnectFailed, HttpClient
from appliance.http.server import AddressInUse, HttpServer, ServerError


class Hello:
    def on_get(self, req, resp):
        resp.media = {"hello": "world"}


def hello_app() -> falcon.App:
    app = falcon.App()
    app.add_route("/hello", Hello())
    return app


def server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "http-srv"]


def test_port_zero_binds_an_ephemeral_port_and_serves():
    with HttpServer(hello_app(), host="127.0.0.1", port=0, name="srv", body_bytes_max=1) as srv:
        assert srv.port > 0
        with HttpClient() as http:
            response = http.get(f"http://127.0.0.1:{srv.port}/hello")
        assert response.status == 200
        assert response.json() == {"hello": "world"}


def test_an_address_in_use_is_a_clear_error_and_leaves_no_thread_behind():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    before = threading.active_count()
    try:
        server = HttpServer(hello_app(), host="127.0.0.1", port=port, name="srv", body_bytes_max=1)
        with pytest.raises(AddressInUse, match=f"127.0.0.1:{port}.*already in use"):
            server.start()
        assert threading.active_count() == before
        assert not server.running
    finally:
        taken.close()


def test_stop_closes_the_listener_and_joins_every_thread():
    server = HttpServer(hello_app(), host="127.0.0.1", port=0, name="srv", body_bytes_max=1)
    server.start()
    port = server.port
    with HttpClient() as http:
        assert http.get(f"http://127.0.0.1:{port}/hello").status == 200  # keep-alive open
        server.stop()
    assert not server.running
    assert server_threads() == []
    with HttpClient() as http, pytest.raises(ConnectFailed):
        http.get(f"http://127.0.0.1:{port}/hello")
    server.stop()  # idempotent


def test_a_server_cannot_be_started_twice():
    server = HttpServer(hello_app(), host="127.0.0.1", port=0, name="srv", body_bytes_max=1)
    with server, pytest.raises(ServerError, match="already started"):
        server.start()


def test_the_port_of_a_server_that_never_started_is_an_error():
    server = HttpServer(hello_app(), host="127.0.0.1", port=0, name="srv", body_bytes_max=1)
    with pytest.raises(ServerError, match="not started"):
        _ = server.port


@pytest.mark.parametrize(("threads", "limit"), [(0, 10), (65, 10), (4, 0)])
def test_thread_and_connection_bounds_are_validated(threads, limit):
    with pytest.raises(ValueError):
        HttpServer(
            hello_app(),
            host="127.0.0.1",
            port=0,
            name="srv",
            body_bytes_max=1,
            threads=threads,
            connection_limit=limit,
        )
