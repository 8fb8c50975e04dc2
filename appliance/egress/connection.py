"""Connections pinned to the addresses the policy saw, and sockets that an abort can stop.

Theory of operation. DNS rebinding works by answering one address when the name is checked
and another when it is used. Here the name is resolved exactly once per request (hop), the
policy is given every address of that answer, and the connection is made by ``Pin`` — which
urllib3 calls instead of resolving — to those addresses only, in order. urllib3 still believes
it talks to the host name, so the ``Host`` header, TLS SNI and the certificate check all stay on
the name (a certificate for the name is required even though the socket was opened to an IP).

Abort: every socket a pin opens is first registered with the exchange's ``SocketWatch``, which
keeps a duplicate descriptor of it. ``abort()`` shuts the socket down through the duplicate —
shutdown acts on the socket, not the descriptor, so it wakes a thread blocked in connect, in the
TLS handshake, in send or in recv, whichever descriptor it uses (the TLS layer takes the original
one over) — and the exchange's thread closes its descriptor when it unwinds; ``close()`` then
closes the duplicates. A socket is gone only when both are closed, which is what "every
connection it opened is closed" means here.

Nothing is taken from the environment: no proxy variables (urllib3 has no proxy unless asked),
no ``.netrc``, and the TLS context is built without ``ssl.create_default_context`` (which
honours ``SSLKEYLOGFILE``) and without the ``SSL_CERT_FILE``/``SSL_CERT_DIR`` overrides: it
trusts ``egress.ca_file`` or OpenSSL's compiled-in default roots.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any, Final

from urllib3.connection import HTTPConnection, HTTPSConnection

ADDRESSES_MAX: Final = 16
Resolver = Callable[[str, int], list[str]]


class Aborted(Exception):
    """The watch was aborted: no new socket may be opened."""


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses of ``host`` (unique, in the resolver's order, at most ADDRESSES_MAX)."""
    found: list[str] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        address = str(sockaddr[0])
        if address not in found:
            found.append(address)
    return found[:ADDRESSES_MAX]


def addresses_global(addresses: list[str]) -> bool:
    """True when every address is globally routable unicast (not loopback, private,
    link-local, reserved, multicast...): what ``input.addresses_global`` tells a policy."""
    if not addresses:
        return False
    for text in addresses:
        try:
            address = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if not address.is_global or address.is_multicast:
            return False
    return True


def tls_context(ca_pem: str | None) -> ssl.SSLContext:
    """Certificates verified against ``ca_pem`` (or the compiled-in roots), host names checked,
    TLS 1.2 or later; nothing read from the environment."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_pem is not None:
        context.load_verify_locations(cadata=ca_pem)
    else:
        paths = ssl.get_default_verify_paths()
        cafile = paths.openssl_cafile if os.path.isfile(paths.openssl_cafile) else None
        capath = paths.openssl_capath if os.path.isdir(paths.openssl_capath) else None
        if cafile is not None or capath is not None:
            context.load_verify_locations(cafile=cafile, capath=capath)
    return context


class SocketWatch:
    """The sockets one exchange opened, so that another thread can stop them (module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._duplicates: list[socket.socket] = []
        self._aborted = False

    @property
    def aborted(self) -> bool:
        return self._aborted

    def register(self, sock: socket.socket) -> None:
        with self._lock:
            if self._aborted:
                raise Aborted()
            self._duplicates.append(sock.dup())

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            for duplicate in self._duplicates:
                # never connected, or already shut: nothing to wake
                with contextlib.suppress(OSError):
                    duplicate.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close the duplicates; call once the exchange's own descriptors are closed."""
        with self._lock:
            duplicates, self._duplicates = self._duplicates, []
        for duplicate in duplicates:
            duplicate.close()

    @property
    def open_count(self) -> int:
        with self._lock:
            return len(self._duplicates)


class Pin:
    """Where a connection may go: the addresses the policy saw, on one port."""

    def __init__(self, addresses: list[str], port: int, watch: SocketWatch) -> None:
        self.addresses = addresses
        self.port = port
        self.watch = watch
        self.connected_address: str | None = None

    def connect(self, timeout: Any) -> socket.socket:
        last_error: OSError | None = None
        for address in self.addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                self.watch.register(sock)
            except Aborted:
                sock.close()
                raise
            try:
                sock.settimeout(timeout if isinstance(timeout, int | float) else None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.connect((address, self.port))
            except OSError as exc:
                sock.close()
                last_error = exc
                if self.watch.aborted:
                    raise Aborted() from None
                continue
            self.connected_address = address
            return sock
        raise last_error or OSError("no address to connect to")


class PinnedHTTPConnection(HTTPConnection):
    def __init__(self, host: str, port: int, pin: Pin, **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self.pin = pin

    def _new_conn(self) -> socket.socket:  # urllib3's hook: connect instead of resolving
        return self.pin.connect(self.timeout)


class PinnedHTTPSConnection(HTTPSConnection):
    def __init__(self, host: str, port: int, pin: Pin, **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self.pin = pin

    def _new_conn(self) -> socket.socket:
        return self.pin.connect(self.timeout)


def open_connection(
    scheme: str,
    host: str,
    pin: Pin,
    timeout_seconds: float,
    context: ssl.SSLContext | None,
) -> HTTPConnection:
    """A connection to ``host`` whose socket goes only where ``pin`` allows (not yet open)."""
    if scheme == "https":
        return PinnedHTTPSConnection(
            host, pin.port, pin, timeout=timeout_seconds, ssl_context=context
        )
    return PinnedHTTPConnection(host, pin.port, pin, timeout=timeout_seconds)
