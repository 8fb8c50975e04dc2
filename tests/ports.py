"""Listening ports for real-process tests, chosen below the kernel's ephemeral range.

A port found free by binding to port 0 comes from the ephemeral range, which the kernel also hands
out as the source port of every outgoing connection: between the test choosing it and a child
process (or a restarted one) binding it, a proxy or client connection may take it, and the child
fails with "address already in use". Ports below that range are never given out implicitly.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LISTEN_PORT_MIN = 10_000
# Every port this test process handed out: two calls in one test (voters' ports, then the
# worker's metrics port) must never return the same port while the first is not bound yet.
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        low, _high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low)
    except (OSError, ValueError):
        return 32_768


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that were free when chosen."""
    rng = random.Random()
    high = _ephemeral_low()
    chosen: list[socket.socket] = []
    try:
        while len(chosen) < count:
            port = rng.randrange(LISTEN_PORT_MIN, high)
            if port in _handed_out and len(_handed_out) < (high - LISTEN_PORT_MIN) // 2:
                continue
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            chosen.append(sock)
        ports = [int(s.getsockname()[1]) for s in chosen]
        _handed_out.update(ports)
        return ports
    finally:
        for sock in chosen:
            sock.close()
