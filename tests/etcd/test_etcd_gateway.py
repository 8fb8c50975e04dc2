"""The gateway client's failover rules: a refused connection moves on (nothing was sent); a
write whose answer was lost is never resent; a read is."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from appliance.replication.etcd_gateway import (
    EtcdAmbiguous,
    EtcdGateway,
    EtcdUnavailable,
    prefix_end,
)
from tests.etcd.cluster import EtcdCluster, free_port


class Swallower:
    """Accepts a connection, reads the request, closes without answering; counts requests."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                if conn.recv(65536):
                    self.requests += 1

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def swallower() -> Iterator[Swallower]:
    server = Swallower()
    yield server
    server.close()


def test_a_refused_connection_fails_over_to_the_next_endpoint(etcd_cluster: EtcdCluster) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    gateway = EtcdGateway([dead, etcd_cluster.endpoints[0]])
    result = gateway.txn([], [{"request_put": {"key": "YQ==", "value": "Yg=="}}])
    assert result.succeeded
    assert gateway.endpoint() == etcd_cluster.endpoints[0]
    gateway.close()


def test_no_endpoint_reachable_is_a_definite_failure() -> None:
    gateway = EtcdGateway([f"http://127.0.0.1:{free_port()}"])
    with pytest.raises(EtcdUnavailable):
        gateway.txn([], [])
    gateway.close()


def test_a_write_whose_answer_was_lost_is_ambiguous_and_sent_once(swallower: Swallower) -> None:
    gateway = EtcdGateway([swallower.url, swallower.url], request_timeout_ms=500)
    with pytest.raises(EtcdAmbiguous):
        gateway.txn([], [{"request_put": {"key": "YQ==", "value": "Yg=="}}])
    assert swallower.requests == 1
    gateway.close()


def test_a_read_whose_answer_was_lost_is_resent_to_the_next_endpoint(
    swallower: Swallower, etcd_cluster: EtcdCluster
) -> None:
    gateway = EtcdGateway([swallower.url, etcd_cluster.endpoints[1]], request_timeout_ms=500)
    revision, _ = gateway.range(b"/nothing")
    assert revision >= 1 and swallower.requests == 1
    gateway.close()


def test_prefix_end_selects_exactly_the_keys_under_a_prefix() -> None:
    assert prefix_end(b"/p/log/") == b"/p/log0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") == b"\x00"
