"""URLs are normalized once, the way a browser's URL parser would, before anything looks."""

from __future__ import annotations

import pytest

from appliance.egress.model import FetchFailed
from appliance.egress.target import URL_BYTES_MAX, parse_target, resolve_location


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        ("HTTPS://API.Example.COM:443/a?b=1#frag", "https://api.example.com/a?b=1"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080/"),
        ("http://[::1]:80/x", "http://[::1]/x"),
        ("https://h/a/b/../c/./d", "https://h/a/c/d"),
        ("https://h/a/%2e%2E/b", "https://h/b"),
        ("https://h/../../x", "https://h/x"),
        ("https://h/é?q=ü", "https://h/%C3%A9?q=%C3%BC"),
        ("https://h?x", "https://h/?x"),
        ("https://h.:8443/", "https://h:8443/"),
    ],
)
def test_normalization(url: str, normalized: str) -> None:
    assert parse_target(url).url == normalized


@pytest.mark.parametrize(
    "url",
    [
        "ftp://h/",
        "https:/h",
        "https://",
        "https://u:p@h/",
        "https://@h/",
        "https://h:0/",
        "https://h:65536/",
        "https://h h/",
        "https://h\\x/",
        "https://ex%41mple.com/",
        "https://bücher.example/",
        "//h/x",
        "h/x",
        "",
    ],
)
def test_refused(url: str) -> None:
    with pytest.raises(FetchFailed):
        parse_target(url)


def test_url_length_at_the_boundary() -> None:
    head = "https://h/"
    assert parse_target(head + "a" * (URL_BYTES_MAX - len(head)))
    with pytest.raises(FetchFailed, match="longer than"):
        parse_target(head + "a" * (URL_BYTES_MAX - len(head) + 1))


@pytest.mark.parametrize(
    ("location", "resolved"),
    [
        ("d", "https://h/a/b/d"),
        ("../e", "https://h/a/e"),
        ("/f?g", "https://h/f?g"),
        ("?z", "https://h/a/b/c?z"),
        ("//o.example/p", "https://o.example/p"),
        ("http://x/y#z", "http://x/y"),
    ],
)
def test_redirect_locations_resolve_against_the_request(location: str, resolved: str) -> None:
    assert resolve_location(parse_target("https://h/a/b/c?x"), location).url == resolved
