"""Hosts and socket addresses: strict parsing, normalization, and the one loopback test."""

from __future__ import annotations

import pytest

from appliance.config.addresses import (
    AddressError,
    HostPort,
    is_loopback_host,
    parse_host,
    parse_host_port,
)

LOOPBACK_TABLE = [
    ("127.0.0.1", True),
    ("127.255.255.254", True),
    ("127.0.0.0", True),
    ("::1", True),
    ("[::1]", True),
    ("0:0:0:0:0:0:0:1", True),
    ("128.0.0.1", False),
    ("126.255.255.255", False),
    ("localhost", False),  # a name: its meaning depends on the resolver
    ("::ffff:127.0.0.1", False),  # mapped IPv6: refused on every Python version
    ("::", False),
    ("0.0.0.0", False),
    ("10.0.0.1", False),
    ("example.org", False),
]


@pytest.mark.parametrize(("host", "loopback"), LOOPBACK_TABLE)
def test_loopback_means_an_ip_literal_in_127_slash_8_or_ipv6_one(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("Example.ORG", "example.org"),
        ("10.0.0.1", "10.0.0.1"),
        ("[0:0::1]", "::1"),
        ("2001:DB8:0:0::1", "2001:db8::1"),
        ("a-b.c1", "a-b.c1"),
        ("x" * 63 + ".org", "x" * 63 + ".org"),
    ],
)
def test_hosts_are_normalized_so_equal_meanings_compare_equal(text: str, normalized: str) -> None:
    assert parse_host(text) == normalized


@pytest.mark.parametrize(
    "text",
    [
        "",
        "-a.org",
        "a-.org",
        "a..org",
        "a.org.",
        "x" * 64 + ".org",
        "256.1.1.1",
        "1.2.3",
        "a_b.org",
        "exa mple",
        "[::1",
        "[10.0.0.1]",
        "\uff11\uff12\uff17.0.0.1",
        "ex%41.org",
        "h/x",
    ],
)
def test_malformed_hosts_are_refused(text: str) -> None:
    with pytest.raises(AddressError):
        parse_host(text)


def test_a_dns_name_of_253_bytes_passes_and_254_fails() -> None:
    name = ".".join(["a" * 63] * 3 + ["b" * 61])
    assert len(name) == 253
    assert parse_host(name) == name
    with pytest.raises(AddressError):
        parse_host(name + "b")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:1", HostPort("127.0.0.1", 1)),
        ("127.0.0.1:65535", HostPort("127.0.0.1", 65535)),
        ("[::1]:4601", HostPort("::1", 4601)),
        ("Host.Example:80", HostPort("host.example", 80)),
        ("0.0.0.0:4501", HostPort("0.0.0.0", 4501)),
    ],
)
def test_host_port_parses_and_prints_back(text: str, expected: HostPort) -> None:
    parsed = parse_host_port(text)
    assert parsed == expected
    assert parse_host_port(str(parsed)) == parsed


@pytest.mark.parametrize(
    "text",
    [
        "127.0.0.1",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:",
        ":80",
        "::1:80",
        "[::1]80",
        "127.0.0.1:+80",
        "127.0.0.1:8 0",
        "127.0.0.1:80\n",
        "127.0.0.1:123456",
        "[::1]:",
    ],
)
def test_malformed_host_ports_are_refused(text: str) -> None:
    with pytest.raises(AddressError):
        parse_host_port(text)


def test_ipv6_host_port_prints_with_brackets() -> None:
    assert str(HostPort("::1", 80)) == "[::1]:80"
