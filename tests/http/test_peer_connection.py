"""``PeerConnection``: the lean keep-alive client of the Raft pipeline.

Against a scripted loopback server (each accepted connection answers from a list of raw
responses), so every framing and failure case is exact; and once against waitress itself.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import falcon
import pytest

from appliance.http import AmbiguousSend, ConnectFailed, HttpServer, ResponseTooLarge
from appliance.http.peer_connection import PeerConnection
from tests.ports import free_ports

WAIT_S = 10.0


def ok(body: bytes, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


class ScriptedServer:
    """Accepts connections; on each, reads one request per scripted response and writes it.

    ``None`` in a script reads the request and closes the connection instead of answering;
    ``b""`` closes it at once, idle. The script of the N-th connection is ``scripts[N]`` (the
    last one repeats)."""

    def __init__(self, *scripts: list[bytes | None]) -> None:
        self.scripts = scripts
        self.requests: list[bytes] = []
        self.connections = 0
        self.closed_idle = threading.Event()
        self._stopped = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            script = self.scripts[min(self.connections, len(self.scripts) - 1)]
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn, script), daemon=True).start()

    def _answer(self, conn: socket.socket, script: list[bytes | None]) -> None:
        with conn:
            buffer = b""
            for response in script:
                if response == b"":
                    conn.close()  # closed before it is announced: the client may look at once
                    self.closed_idle.set()
                    return
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(rest) < length:
                    rest += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + rest[:length])
                buffer = rest[length:]
                if response is None:
                    return
                conn.sendall(response)
            self._stopped.wait(WAIT_S)  # script done: hold the connection, read nothing

    def close(self) -> None:
        self._stopped.set()
        self._listener.close()


@pytest.fixture
def servers() -> Iterator[list[ScriptedServer]]:
    made: list[ScriptedServer] = []
    yield made
    for server in made:
        server.close()


def connect(server: ScriptedServer, **kwargs) -> PeerConnection:  # type: ignore[no-untyped-def]
    kwargs.setdefault("connect_timeout_ms", 1_000)
    kwargs.setdefault("read_timeout_ms", 2_000)
    kwargs.setdefault("response_bytes_max", 1024)
    return PeerConnection("127.0.0.1", server.port, **kwargs)


def test_requests_share_one_kept_alive_connection_and_carry_the_bearer(servers) -> None:  # type: ignore[no-untyped-def]
    server = ScriptedServer([ok(b"one"), ok(b"two")])
    servers.append(server)
    peer = connect(server)
    first = peer.post("/raft/v1/append", b"abc", headers={"X-Kind": "t"}, bearer="tok")
    second = peer.post("/raft/v1/vote", b"", bearer="tok")
    peer.close()
    assert (first.status, first.body, second.body) == (200, b"one", b"two")
    assert peer.connections_opened == 1 and server.connections == 1
    request = server.requests[0]
    assert request.startswith(b"POST /raft/v1/append HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer tok\r\n" in request
    assert b"\r\nX-Kind: t\r\n" in request
    assert request.endswith(b"\r\n\r\nabc")


def test_an_idle_connection_the_peer_closed_is_replaced_before_anything_is_written(servers) -> None:  # type: ignore[no-untyped-def]
    server = ScriptedServer([ok(b"one"), b""], [ok(b"fresh")])
    servers.append(server)
    peer = connect(server)
    assert peer.post("/a", b"x").body == b"one"
    assert server.closed_idle.wait(WAIT_S)
    assert peer.post("/a", b"y").body == b"fresh"  # not an AmbiguousSend on the dead one
    assert peer.connections_opened == 2
    assert [r.rsplit(b"\r\n\r\n", 1)[1] for r in server.requests] == [b"x", b"y"]
    peer.close()


def test_a_response_at_the_cap_passes_and_one_byte_more_is_refused(servers) -> None:  # type: ignore[no-untyped-def]
    server = ScriptedServer([ok(b"a" * 16), ok(b"a" * 17)])
    servers.append(server)
    peer = connect(server, response_bytes_max=16)
    assert len(peer.post("/a", b"").body) == 16
    with pytest.raises(ResponseTooLarge):
        peer.post("/a", b"")
    peer.close()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "framing"),
        (b"HTTP/1.1 200 OK\r\n\r\nabc", "no length"),
        (b"SMTP ready\r\n\r\n", "status line"),
        (b"HTTP/1.1 100 Continue\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "closed"),
    ],
)
def test_a_response_it_cannot_frame_is_ambiguous_and_closes_the_connection(
    servers, raw: bytes, reason: str
) -> None:  # type: ignore[no-untyped-def]
    server = ScriptedServer([raw, b""], [ok(b"next")])
    servers.append(server)
    peer = connect(server)
    with pytest.raises(AmbiguousSend, match=reason):
        peer.post("/a", b"")
    assert peer.post("/a", b"").body == b"next"  # a new connection, not the broken one
    assert peer.connections_opened == 2
    peer.close()


def test_connection_close_and_redirects_are_taken_as_they_are(servers) -> None:  # type: ignore[no-untyped-def]
    redirect = b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /b\r\nContent-Length: 0\r\n\r\n"
    server = ScriptedServer([ok(b"bye", "Connection: close\r\n")], [redirect])
    servers.append(server)
    peer = connect(server)
    assert peer.post("/a", b"").body == b"bye"
    response = peer.post("/a", b"")
    assert (response.status, response.header("location")) == (307, "/b")  # not followed
    assert peer.connections_opened == 2
    assert len(server.requests) == 2
    peer.close()


def test_nothing_listening_is_a_connect_failure(servers) -> None:  # type: ignore[no-untyped-def]
    peer = PeerConnection(
        "127.0.0.1",
        free_ports(1)[0],
        connect_timeout_ms=1_000,
        read_timeout_ms=1_000,
        response_bytes_max=1024,
    )
    with pytest.raises(ConnectFailed, match="connect failed"):
        peer.post("/a", b"")


def test_a_peer_that_never_answers_is_an_ambiguous_read_timeout(servers) -> None:  # type: ignore[no-untyped-def]
    server = ScriptedServer([])  # reads nothing, answers nothing
    servers.append(server)
    peer = connect(server, read_timeout_ms=100)
    with pytest.raises(AmbiguousSend, match="read timeout"):
        peer.post("/a", b"x")


def test_it_talks_to_waitress() -> None:
    class Echo:
        def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
            resp.data = req.bounded_stream.read(req.content_length or 0)[::-1]

    app = falcon.App()
    app.add_route("/echo", Echo())
    with HttpServer(app, host="127.0.0.1", port=0, name="echo", body_bytes_max=1024) as server:
        peer = PeerConnection(
            "127.0.0.1",
            server.port,
            connect_timeout_ms=1_000,
            read_timeout_ms=int(WAIT_S * 1000),
            response_bytes_max=1024,
        )
        bodies = [peer.post("/echo", b"abc%d" % n).body for n in range(3)]
        peer.close()
    assert bodies == [b"0cba", b"1cba", b"2cba"]
    assert peer.connections_opened == 1
