"""``PeerProbe``: tells the driver, without ever blocking, that a peer's process is gone.

Theory of operation. The probe keeps one idle TCP connection to the peer's cluster port (it
never sends a request on it). Checking it costs one zero-timeout ``poll``. When the peer's
process dies its kernel closes the connection, and the next check sees the end of stream; the
probe then reconnects without blocking. A REFUSED connection — nothing listens on that port any
more — means the process is gone. A connection that succeeds means the peer is alive (the end of
stream was the server closing an idle connection, or a quick restart). A host that does not
answer at all is never reported: that case is left to the election timeout, as before. Only
peers named by an IP address are probed: resolving a host name could block the driver.

Used only by the thread holding the node's turn (one at a time): a follower asks about its leader
on every tick and passes a "gone" to ``RaftNode.leader_gone``, which brings its campaign forward.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from appliance.http.polling import CONNECTED_EVENTS, STALE_EVENTS, has_events

# A connect still pending after this many checks (a host that drops SYNs) is started over.
CONNECT_CHECKS_MAX = 20


@dataclass
class _Link:
    sock: socket.socket
    connected: bool
    checks: int = 0


class PeerProbe:
    def __init__(self, addresses: Mapping[str, tuple[str, int]]) -> None:
        self._addresses = {peer: a for peer, a in addresses.items() if _is_ip_literal(a[0])}
        self._links: dict[str, _Link] = {}

    def gone(self, peer: str) -> bool:
        """True if ``peer``'s cluster port refuses connections right now."""
        address = self._addresses.get(peer)
        if address is None:
            return False
        link = self._links.get(peer)
        if link is not None and link.connected and has_events(link.sock, STALE_EVENTS):
            self._drop(peer)  # end of stream (or bytes nobody asked for): reconnect
            link = None
        if link is None:
            code = self._start(peer, address)
            if code == errno.ECONNREFUSED:
                return True
            link = self._links.get(peer)
            if link is None:
                return False  # any other failure proves nothing; try again next time
        if link.connected:
            return False
        return self._finish_connect(peer, link)

    def close(self) -> None:
        for peer in list(self._links):
            self._drop(peer)

    def _start(self, peer: str, address: tuple[str, int]) -> int:
        """Start a non-blocking connection; the errno of ``connect`` (loopback refuses at once)."""
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex(address)
        if code in (0, errno.EINPROGRESS):
            self._links[peer] = _Link(sock, connected=code == 0)
        else:
            sock.close()
        return code

    def _finish_connect(self, peer: str, link: _Link) -> bool:
        link.checks += 1
        if link.checks > CONNECT_CHECKS_MAX:
            self._drop(peer)
            return False
        if not has_events(link.sock, CONNECTED_EVENTS):
            return False
        code = link.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code == 0:
            link.connected = True
            return False
        self._drop(peer)
        return code == errno.ECONNREFUSED

    def _drop(self, peer: str) -> None:
        link = self._links.pop(peer, None)
        if link is not None:
            with contextlib.suppress(OSError):
                link.sock.close()


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
