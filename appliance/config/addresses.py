"""Hosts, ``host:port`` socket addresses and the one loopback test.

Theory of operation: an address is parsed once into a normalized value (DNS names lower-cased,
IPv6 compressed and bracketed only when printed with a port), so two spellings of one voter's
address compare and digest equal on every node. Parsing is strict and pure: no name resolution.

Loopback means an IP literal in 127.0.0.0/8 or exactly ``::1``. The name ``localhost`` is NOT
loopback here: what it resolves to depends on the machine's resolver configuration, and a
management listener or a plain-HTTP origin must be loopback by construction, not by lookup.
IPv4-mapped IPv6 (``::ffff:127.0.0.1``) is refused too, so the answer does not depend on the
Python version (3.13 changed ``is_loopback`` for mapped addresses).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Final

from appliance.core.schema import INVALID, Problems, show

HOSTNAME_BYTES_MAX: Final = 253
_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_PORT = re.compile(r"^[0-9]{1,5}$")
_DIGITS = re.compile(r"^[0-9]+$")
_LOOPBACK_V4: Final = ipaddress.ip_network("127.0.0.0/8")
_LOOPBACK_V6: Final = ipaddress.ip_address("::1")


class AddressError(ValueError):
    """A host or socket address that does not parse; the message is safe to show."""


@dataclass(frozen=True, order=True)
class HostPort:
    """A normalized socket address; ``str()`` gives ``host:port`` (``[v6]:port``)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{bracket(self.host)}:{self.port}"


def bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def parse_host(text: str) -> str:
    """Normalize a host: an IPv4/IPv6 literal (IPv6 with or without brackets) or a DNS name."""
    if not text:
        raise AddressError("host must not be empty")
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1]
        try:
            return str(ipaddress.IPv6Address(inner))
        except ValueError:
            raise AddressError(f"{show(text)} is not a valid IPv6 literal") from None
    if ":" in text:
        try:
            return str(ipaddress.IPv6Address(text))
        except ValueError:
            raise AddressError(f"{show(text)} is not a valid IPv6 literal") from None
    lowered = text.lower()
    labels = lowered.split(".")
    if all(_DIGITS.fullmatch(label) for label in labels):
        try:
            return str(ipaddress.IPv4Address(lowered))
        except ValueError:
            raise AddressError(f"{show(text)} is not a valid IPv4 address") from None
    if len(lowered) > HOSTNAME_BYTES_MAX or not all(_LABEL.fullmatch(label) for label in labels):
        raise AddressError(
            f"{show(text)} is not a valid host (an IP literal or a DNS name of letters, digits,"
            " hyphens and dots)"
        )
    return lowered


def parse_port(text: str) -> int:
    if not _PORT.fullmatch(text) or not 1 <= int(text) <= 65535:
        raise AddressError(f"port must be an integer from 1 to 65535, got {show(text)}")
    return int(text)


def parse_host_port(text: str) -> HostPort:
    """Parse ``host:port`` or ``[v6]:port``; a bare IPv6 literal needs brackets here."""
    if text.startswith("["):
        host_part, sep, port_part = text.rpartition("]:")
        if not sep:
            raise AddressError(f"{show(text)} must be host:port (IPv6 as [addr]:port)")
        host = parse_host(host_part + "]")
    else:
        host_part, sep, port_part = text.rpartition(":")
        if not sep or ":" in host_part:
            raise AddressError(f"{show(text)} must be host:port (IPv6 as [addr]:port)")
        host = parse_host(host_part)
    return HostPort(host, parse_port(port_part))


def is_loopback_host(host: str) -> bool:
    """True only for an IP literal in 127.0.0.0/8 or ::1 (see the module docstring)."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return address in _LOOPBACK_V4
    return address == _LOOPBACK_V6


def is_unspecified_host(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


# Rules for the schema layer -----------------------------------------------------------------


def host_rule(value: object, path: str, problems: Problems) -> Any:
    """A host that others dial: not the unspecified address."""
    if not isinstance(value, str):
        return problems.add(path, f"must be a host string, got {show(value)}")
    try:
        host = parse_host(value)
    except AddressError as err:
        return problems.add(path, str(err))
    if is_unspecified_host(host):
        return problems.add(path, f"must be an address others can reach, got {show(value)}")
    return host


def listen_addr_rule(value: object, path: str, problems: Problems) -> Any:
    """A ``host:port`` to listen on (the unspecified address is allowed)."""
    if not isinstance(value, str):
        return problems.add(path, f"must be a host:port string, got {show(value)}")
    try:
        return parse_host_port(value)
    except AddressError as err:
        return problems.add(path, str(err))


def loopback_addr_rule(value: object, path: str, problems: Problems) -> Any:
    """A ``host:port`` whose host is a loopback IP literal (127.0.0.0/8 or ::1)."""
    parsed = listen_addr_rule(value, path, problems)
    if parsed is INVALID:
        return INVALID
    if not is_loopback_host(parsed.host):
        return problems.add(
            path,
            f"must be a loopback address (127.0.0.0/8 or [::1], not a name), got {show(value)}",
        )
    return parsed
