"""Origin rules shared by the runner's remote.url and the worker's admission_urls (SPEC §6, §7)."""

from __future__ import annotations

import pytest

from appliance.config.urls import URL_BYTES_MAX, Origin, OriginError, parse_origin

ACCEPTED = [
    ("https://worker.example.org", Origin("https", "worker.example.org", 443)),
    ("https://worker.example.org/", Origin("https", "worker.example.org", 443)),
    ("HTTPS://Worker.Example.ORG:443", Origin("https", "worker.example.org", 443)),
    ("https://10.0.0.5:8443", Origin("https", "10.0.0.5", 8443)),
    ("https://[2001:db8::1]:8443", Origin("https", "2001:db8::1", 8443)),
    ("http://127.0.0.1:4501", Origin("http", "127.0.0.1", 4501)),
    ("http://127.1.2.3", Origin("http", "127.1.2.3", 80)),
    ("http://[::1]:4501/", Origin("http", "::1", 4501)),
    ("https://127.0.0.1:1", Origin("https", "127.0.0.1", 1)),
    ("https://h.example:65535", Origin("https", "h.example", 65535)),
]

REFUSED = [
    ("http://worker.example.org", "plain http"),
    ("http://10.0.0.1:80", "plain http"),
    ("http://localhost:4501", "plain http"),
    ("http://[::ffff:127.0.0.1]:80", "plain http"),
    ("https://user:pass@worker.example.org", "credentials"),
    ("https://user@worker.example.org", "credentials"),
    ("https://@worker.example.org", "credentials"),
    ("https://worker.example.org/api", "path"),
    ("https://worker.example.org//", "path"),
    ("https://worker.example.org/?", "query"),
    ("https://worker.example.org?a=1", "query"),
    ("https://worker.example.org#", "fragment"),
    ("https://worker.example.org/#top", "fragment"),
    ("ftp://worker.example.org", "scheme"),
    ("ws://127.0.0.1", "scheme"),
    ("worker.example.org", "origin"),
    ("//worker.example.org", "origin"),
    ("https://", "host"),
    ("https:///", "host"),
    ("https://:443", "host"),
    ("https://h.example:0", "port"),
    ("https://h.example:65536", "port"),
    ("https://h.example:", "port"),
    ("https://h.example:http", "port"),
    ("https://h.example\\@evil.example", "backslash"),
    ("https://h.example /", "whitespace"),
    (" https://h.example", "whitespace"),
    ("https://h_x.example", "host"),
    ("https://[::1", "IPv6"),
    ("https://[::1]x", "IPv6"),
    ("https://h.example:443:1", "port"),
]


@pytest.mark.parametrize(("text", "origin"), ACCEPTED)
def test_accepted_origins_are_normalized(text: str, origin: Origin) -> None:
    assert parse_origin(text) == origin


@pytest.mark.parametrize(("text", "reason"), REFUSED)
def test_refused_origins_name_the_reason(text: str, reason: str) -> None:
    with pytest.raises(OriginError) as err:
        parse_origin(text)
    assert reason.lower() in str(err.value).lower()


def test_the_printed_origin_drops_only_the_default_port() -> None:
    assert parse_origin("https://h.example:443/").url == "https://h.example"
    assert parse_origin("http://[::1]:8080").url == "http://[::1]:8080"
    assert parse_origin("http://127.0.0.1:80").url == "http://127.0.0.1"


def test_the_url_length_check_is_exact_at_its_limit() -> None:
    # A valid origin is far shorter (hosts cap at 253 bytes); the cap bounds work on hostile input.
    at_limit = "https://h.example/" + "a" * (URL_BYTES_MAX - len("https://h.example/"))
    assert len(at_limit) == URL_BYTES_MAX
    with pytest.raises(OriginError, match="path"):
        parse_origin(at_limit)
    with pytest.raises(OriginError, match=f"at most {URL_BYTES_MAX} bytes"):
        parse_origin(at_limit + "a")
