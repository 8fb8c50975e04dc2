"""The fault-injecting proxy does what each fault says, against a local echo server."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.chaos.proxy import Fault, Proxy

SHORT_S = 0.4


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield port
    server.close()


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    p = Proxy(seed=7)
    yield p
    p.close()


def _roundtrip(port: int, payload: bytes = b"ping", timeout_s: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
        conn.sendall(payload)
        return conn.recv(4096)


def _refused(port: int) -> bool:
    """The connection ended without an answer (closed or reset), rather than echoing."""
    try:
        return _roundtrip(port, timeout_s=SHORT_S) == b""
    except ConnectionError:
        return True


def test_a_healthy_link_forwards_both_ways(proxy: Proxy, echo_port: int) -> None:
    port = proxy.add("a->b", echo_port)
    assert _roundtrip(port) == b"ping"


def test_delay_holds_each_chunk_back(proxy: Proxy, echo_port: int) -> None:
    port = proxy.add("a->b", echo_port)
    proxy.set_fault("a->b", Fault(delay_ms=200))
    started = time.monotonic()
    assert _roundtrip(port) == b"ping"
    assert time.monotonic() - started >= 0.4  # 200 ms up, 200 ms down


@pytest.mark.parametrize("fault", [Fault(block_up=True), Fault(block_down=True)])
def test_a_blocked_direction_swallows_bytes_silently(
    proxy: Proxy, echo_port: int, fault: Fault
) -> None:
    port = proxy.add("a->b", echo_port)
    proxy.set_fault("a->b", fault)
    with pytest.raises(TimeoutError):
        _roundtrip(port, timeout_s=SHORT_S)
    assert proxy.links["a->b"].swallowed_bytes == 4


def test_cut_refuses_new_connections_and_heal_restores_them(proxy: Proxy, echo_port: int) -> None:
    port = proxy.add("a->b", echo_port)
    proxy.set_fault("a->b", Fault(cut=True))
    assert _refused(port)
    proxy.heal_all()
    assert _roundtrip(port) == b"ping"


def test_cut_closes_open_connections(proxy: Proxy, echo_port: int) -> None:
    port = proxy.add("a->b", echo_port)
    with socket.create_connection(("127.0.0.1", port), timeout=2.0) as conn:
        conn.sendall(b"one")
        assert conn.recv(16) == b"one"
        proxy.set_fault("a->b", Fault(cut=True))
        with contextlib.suppress(ConnectionError):
            assert conn.recv(16) == b""


def test_reset_probability_one_resets_every_new_connection(proxy: Proxy, echo_port: int) -> None:
    port = proxy.add("a->b", echo_port)
    proxy.set_fault("a->b", Fault(reset_probability=1.0))
    for _ in range(3):
        assert _refused(port)
    assert proxy.links["a->b"].resets == 3


def test_heal_closes_a_connection_that_lost_bytes(proxy: Proxy, echo_port: int) -> None:
    port = proxy.add("a->b", echo_port)
    with socket.create_connection(("127.0.0.1", port), timeout=2.0) as conn:
        proxy.set_fault("a->b", Fault(block_up=True))
        conn.sendall(b"lost")
        deadline = time.monotonic() + 2.0
        while proxy.links["a->b"].swallowed_bytes < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        proxy.heal_all()
        # Its stream is no longer coherent: the proxy ends it rather than resume mid-stream.
        with contextlib.suppress(ConnectionError):
            assert conn.recv(16) == b""
