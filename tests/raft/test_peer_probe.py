"""``PeerProbe``: a peer whose port refuses connections is gone; a live one, even one that closes
idle connections, is not; nothing it does blocks."""

from __future__ import annotations

import socket
import time

from appliance.raft.peer_probe import PeerProbe
from tests.ports import free_ports

WAIT_S = 10.0


def check_until(probe: PeerProbe, peer: str, wanted: bool) -> int:
    """How many checks it took ``probe.gone(peer)`` to say ``wanted`` (fails after WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    checks = 0
    while time.monotonic() < deadline:
        checks += 1
        if probe.gone(peer) is wanted:
            return checks
        time.sleep(0.005)
    raise AssertionError(f"gone({peer!r}) never became {wanted}")


def test_a_port_nobody_listens_on_is_gone_at_the_first_check() -> None:
    probe = PeerProbe({"n1": ("127.0.0.1", free_ports(1)[0])})
    assert probe.gone("n1")


def test_a_listening_peer_is_not_gone_and_a_dead_one_is() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(WAIT_S)
    port = listener.getsockname()[1]
    probe = PeerProbe({"n1": ("127.0.0.1", port)})
    try:
        for _ in range(5):
            assert not probe.gone("n1")
        accepted, _ = listener.accept()  # the probe's idle connection, as waitress holds it
        listener.close()
        accepted.close()  # the process dies: its kernel closes both
        assert check_until(probe, "n1", True) <= 3
    finally:
        probe.close()
        listener.close()


def test_a_live_peer_that_closes_the_idle_connection_is_not_gone() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(WAIT_S)
    probe = PeerProbe({"n1": ("127.0.0.1", listener.getsockname()[1])})
    try:
        assert not probe.gone("n1")
        accepted, _ = listener.accept()
        accepted.close()  # an idle timeout; the listener stays
        for _ in range(10):
            assert not probe.gone("n1")
            time.sleep(0.005)
        reconnected, _ = listener.accept()  # the probe came back on a new connection
        reconnected.close()
    finally:
        probe.close()
        listener.close()


def test_unknown_peers_and_host_names_are_never_gone() -> None:
    probe = PeerProbe({"n1": ("voter-1.example", free_ports(1)[0])})
    assert not probe.gone("n1")  # resolving a name could block: not probed
    assert not probe.gone("n9")
