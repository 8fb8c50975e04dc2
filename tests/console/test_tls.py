"""``console.tls``: the console over HTTPS — a ``Secure`` cookie, the own origin is https, and
an event stream's TLS connection is handed to the pusher like a plain one."""

from __future__ import annotations

import http.client
import re
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from appliance.core import state as core
from tests.console.inprocess import TOKEN, Served, serve
from tests.console.state_samples import T0, definition
from tests.http.tls import self_signed, server_context


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Served, ssl.SSLContext]]:
    cert, key = self_signed(tmp_path)
    client = ssl.create_default_context(cafile=str(cert))
    running = serve(tls=server_context(cert, key))
    yield running, client
    running.stop()


def post_login(port: int, client: ssl.SSLContext, origin: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=client, timeout=10)
    conn.request(
        "POST",
        "/login",
        urlencode({"token": TOKEN}),
        {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin},
    )
    return conn.getresponse()


def test_the_session_cookie_is_secure_under_tls(served: tuple[Served, ssl.SSLContext]) -> None:
    running, client = served
    reply = post_login(running.port, client, f"https://127.0.0.1:{running.port}")
    assert reply.status == 303
    flags = {f.strip().lower() for f in reply.headers["Set-Cookie"].split(";")[1:]}
    assert {"secure", "httponly", "samesite=strict"} <= flags


def test_under_tls_an_http_origin_is_not_the_consoles_own(
    served: tuple[Served, ssl.SSLContext],
) -> None:
    running, client = served
    reply = post_login(running.port, client, f"http://127.0.0.1:{running.port}")
    assert reply.status == 403


def test_plain_http_to_a_tls_console_gets_no_page(served: tuple[Served, ssl.SSLContext]) -> None:
    running, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=5)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        conn.request("GET", "/login")
        conn.getresponse().read()


def test_an_event_stream_over_tls_is_pushed_after_the_handover(
    served: tuple[Served, ssl.SSLContext],
) -> None:
    running, client = served
    raw = socket.create_connection(("127.0.0.1", running.port), timeout=10)
    with client.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        sock.sendall(
            f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{running.port}\r\n"
            f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        data = b""
        while b"event: hello" not in data:
            data += sock.recv(65536)
        assert data.startswith(b"HTTP/1.1 200") and b"Transfer-Encoding: chunked" in data
        running.commit(core.CreateSchedule(definition("over-tls"), T0))
        while b'"change":"created"' not in data:
            chunk = sock.recv(65536)
            assert chunk, "the stream closed"
            data += chunk
        assert re.search(rb'"kind":"schedule","id":1,"change":"created"', data)
        assert running.parts.pusher.counts.opened == 1
