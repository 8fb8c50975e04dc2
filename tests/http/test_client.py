"""The pooled client: outcomes are classified exactly, nothing is followed or retried."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import falcon
import pytest

from appliance.config.credentials import Secret
from appliance.http.client import (
    AmbiguousSend,
    ConnectFailed,
    HttpClient,
    InvalidUrl,
    ResponseTooLarge,
)
from appliance.http.server import HttpServer
from tests.http.rawserver import RawServer, ok_response
from tests.http.tls import self_signed, server_context


@pytest.fixture
def client():
    http = HttpClient(connect_timeout_ms=1_000, read_timeout_ms=2_000)
    yield http
    http.close()


def free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


class _Counter:
    def __init__(self) -> None:
        self.hits = 0

    def on_get(self, req, resp):
        self.hits += 1
        resp.media = {"hits": self.hits}


class _Redirect:
    def on_get(self, req, resp):
        raise falcon.HTTPFound("/target")


def test_a_redirect_is_returned_as_a_response_and_never_followed(client):
    target = _Counter()
    app = falcon.App()
    app.add_route("/start", _Redirect())
    app.add_route("/target", target)
    with HttpServer(app, host="127.0.0.1", port=0, name="t", body_bytes_max=1024) as server:
        response = client.get(f"http://127.0.0.1:{server.port}/start")
    assert response.status == 302
    assert response.header("location").endswith("/target")
    assert target.hits == 0


def test_a_port_with_nothing_listening_is_a_definite_connect_failure(client):
    with pytest.raises(ConnectFailed) as failure:
        client.get(f"http://127.0.0.1:{free_port()}/x")
    assert not isinstance(failure.value, AmbiguousSend)
    assert "connect failed" in failure.value.reason


def test_an_unresolvable_host_is_a_definite_connect_failure(client):
    with pytest.raises(ConnectFailed):
        client.get("http://no-such-host.invalid/x")


def test_a_connect_timeout_is_a_definite_connect_failure():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        # Fill the accept queue (never accepted) until the kernel starts dropping SYNs.
        for _ in range(16):
            filler = socket.socket()
            filler.settimeout(0.2)
            fillers.append(filler)
            try:
                filler.connect(("127.0.0.1", port))
            except TimeoutError:
                break
        else:
            pytest.fail("could not saturate the accept queue")
        http = HttpClient(connect_timeout_ms=200, read_timeout_ms=1_000)
        started = time.monotonic()
        with pytest.raises(ConnectFailed) as failure:
            http.post(f"http://127.0.0.1:{port}/x", b"{}")
        assert failure.value.reason == "connect timeout"
        assert time.monotonic() - started < 1.5
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_a_server_that_reads_the_request_and_closes_is_ambiguous_and_not_retried(client):
    with RawServer(lambda conn, request, n: False) as raw:
        with pytest.raises(AmbiguousSend) as failure:
            client.post(raw.url + "/permit", b'{"a":1}')
        time.sleep(0.05)  # give a (forbidden) second attempt the chance to arrive
        assert len(raw.requests) == 1
        assert raw.accepts == 1
    assert not isinstance(failure.value, ConnectFailed)


def test_a_500_answer_is_a_response(client):
    def answer_500(conn, request, n):
        conn.sendall(ok_response(b"boom", status="500 Internal Server Error"))
        return True

    with RawServer(answer_500) as raw:
        response = client.get(raw.url + "/x")
    assert response.status == 500
    assert response.body == b"boom"


def test_a_read_timeout_is_ambiguous():
    release = threading.Event()

    def hang(conn, request, n):
        release.wait(5)
        return False

    http = HttpClient(connect_timeout_ms=1_000, read_timeout_ms=200)
    with RawServer(hang) as raw:
        started = time.monotonic()
        with pytest.raises(AmbiguousSend) as failure:
            http.post(raw.url + "/x", b"{}")
        elapsed = time.monotonic() - started
        release.set()
    assert "read timeout" in failure.value.reason
    assert 0.15 < elapsed < 1.5


def _answer_ok(conn, request, n):
    conn.sendall(ok_response(f"reply {n}".encode()))
    return True


def test_fresh_connection_opens_a_new_tcp_connection_for_every_request(client):
    with RawServer(_answer_ok) as raw:
        for _ in range(3):
            assert client.post(raw.url + "/permit", b"{}", fresh_connection=True).status == 200
        assert raw.accepts == 3
        assert len(raw.requests) == 3
        assert all(b"connection: close" in r.lower() for r in raw.requests)
        assert client.idle_connection_count(raw.url) == 0


def test_pooled_requests_reuse_one_keep_alive_connection(client):
    with RawServer(_answer_ok) as raw:
        bodies = [client.get(raw.url + "/x").body for _ in range(3)]
        assert bodies == [b"reply 1", b"reply 2", b"reply 3"]
        assert raw.accepts == 1
        assert client.idle_connection_count(raw.url) == 1


def test_a_pooled_connection_the_server_closed_is_discarded_before_sending(client):
    def answer_then_close(conn, request, n):
        conn.sendall(ok_response(b"once"))  # claims keep-alive, then closes anyway
        return False

    with RawServer(answer_then_close) as raw:
        assert client.get(raw.url + "/x").status == 200
        raw.wait_connections_closed()
        # Not an AmbiguousSend: the dead connection is noticed before anything is written.
        assert client.get(raw.url + "/x").status == 200
        assert raw.accepts == 2
        assert len(raw.requests) == 2


def test_a_pooled_connection_idle_for_idle_ms_max_is_not_reused():
    now_s = [100.0]
    http = HttpClient(idle_ms_max=1_000, monotonic=lambda: now_s[0])
    with http, RawServer(_answer_ok) as raw:
        http.get(raw.url + "/x")
        now_s[0] += 0.999
        http.get(raw.url + "/x")
        assert raw.accepts == 1  # idle 999 ms: reused
        now_s[0] += 1.0
        http.get(raw.url + "/x")
        assert raw.accepts == 2  # idle 1000 ms: discarded before sending


def test_a_reused_connection_that_dies_after_the_request_is_ambiguous_never_resent(client):
    def answer_once_then_drop(conn, request, n):
        if n == 1:
            conn.sendall(ok_response(b"first"))
            return True
        return False  # read the second request on the kept-alive connection, then close

    with RawServer(answer_once_then_drop) as raw:
        assert client.get(raw.url + "/x").body == b"first"
        with pytest.raises(AmbiguousSend):
            client.post(raw.url + "/permit", b"{}")
        raw.wait_connections_closed()
        assert raw.accepts == 1  # the second request went over the pooled connection...
        assert len(raw.requests) == 2  # ...and was not sent again on a new one


def test_a_response_body_at_the_cap_is_accepted_and_one_byte_more_is_refused():
    http = HttpClient(response_bytes_max=100)

    def sized(conn, request, n):
        conn.sendall(ok_response(b"x" * (99 + n)))  # 100 bytes, then 101
        return True

    with RawServer(sized) as raw:
        assert len(http.get(raw.url + "/x").body) == 100
        with pytest.raises(ResponseTooLarge):
            http.get(raw.url + "/x")


def _chunked(total_bytes: int):
    def answer(conn, request, n):
        first, second = b"y" * 60, b"y" * (total_bytes - 60)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + f"{len(first):x}\r\n".encode()
            + first
            + f"\r\n{len(second):x}\r\n".encode()
            + second
            + b"\r\n0\r\n\r\n"
        )
        return True

    return answer


def test_a_chunked_response_at_the_cap_is_accepted_and_one_byte_more_is_refused():
    with HttpClient(response_bytes_max=100) as http:
        with RawServer(_chunked(100)) as raw:
            assert http.get(raw.url + "/x").body == b"y" * 100
        with RawServer(_chunked(101)) as raw, pytest.raises(ResponseTooLarge):
            http.get(raw.url + "/x")


def test_the_bearer_is_sent_and_never_shown(client):
    secret = Secret("s3cret-token-value")
    with RawServer(_answer_ok) as raw:
        response = client.get(raw.url + "/x", bearer=secret)
        assert b"authorization: bearer s3cret-token-value" in raw.requests[0].lower()
    assert "s3cret" not in repr(response) + repr(client)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/x",
        "http://user:pw@127.0.0.1/x",
        "http://127.0.0.1/x#frag",
        "http:///x",
    ],
)
def test_urls_with_other_schemes_credentials_or_fragments_are_refused(client, url):
    with pytest.raises(InvalidUrl):
        client.get(url)


def test_https_with_an_untrusted_certificate_is_a_connect_failure_and_sends_nothing(tmp_path):
    cert, key = self_signed(tmp_path)
    http = HttpClient(connect_timeout_ms=2_000)  # default context: system trust store only
    with RawServer(_answer_ok, tls=server_context(cert, key)) as raw:
        with pytest.raises(ConnectFailed) as failure:
            http.get(raw.url + "/x", bearer="never-sent")
        assert "certificate verification failed" in failure.value.reason
        assert raw.requests == []


def test_https_with_a_trusted_certificate_answers(tmp_path):
    cert, key = self_signed(tmp_path)
    http = HttpClient(ssl_context=ssl.create_default_context(cafile=str(cert)))
    with RawServer(_answer_ok, tls=server_context(cert, key)) as raw:
        response = http.get(raw.url + "/x")
    assert response.status == 200
    http.close()
