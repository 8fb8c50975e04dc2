"""Every limit of the console at its boundary: exactly at it passes, one over fails."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest

from appliance.console.actions import FORM_FIELDS_MAX, parse_form
from appliance.console.app import FORM_BYTES_MAX
from appliance.console.pusher import Pusher, Stream
from appliance.management.commands import Refused
from tests.console.inprocess import TOKEN, Served, serve


@pytest.fixture
def served() -> Iterator[Served]:
    running = serve()
    yield running
    running.stop()


def post_login(port: int, body: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(
            "POST",
            "/login",
            body,
            {"Content-Type": "application/x-www-form-urlencoded", "Host": f"127.0.0.1:{port}"},
        )
        return conn.getresponse().status
    finally:
        conn.close()


def padded_login(size: int) -> bytes:
    body = urlencode({"token": TOKEN, "pad": ""}).encode()
    return body + b"x" * (size - len(body))


def test_a_form_of_exactly_the_cap_is_read_and_one_byte_more_is_413(served: Served) -> None:
    assert post_login(served.port, padded_login(FORM_BYTES_MAX)) == 303
    assert post_login(served.port, padded_login(FORM_BYTES_MAX + 1)) == 413


def test_a_form_holds_at_most_form_fields_max_fields() -> None:
    at_limit = urlencode({f"f{i}": "v" for i in range(FORM_FIELDS_MAX)}).encode()
    assert len(parse_form(at_limit)) == FORM_FIELDS_MAX
    over = urlencode({f"f{i}": "v" for i in range(FORM_FIELDS_MAX + 1)}).encode()
    with pytest.raises(Refused):
        parse_form(over)


def test_a_field_given_twice_is_refused() -> None:
    with pytest.raises(Refused, match="given twice"):
        parse_form(b"action=pause&action=resume")


def test_a_streams_unsent_bytes_may_reach_the_cap_and_not_pass_it() -> None:
    closed: list[Stream] = []
    pusher = Pusher(buffer_bytes_max=100, on_close=closed.append)
    stream = pusher.reserve(None, None)
    assert stream is not None  # never adopted: every message waits for the takeover
    pusher._distribute(b"x" * 60, None, 1)  # the pusher thread's own step, called directly
    pusher._distribute(b"y" * 40, None, 2)  # exactly 100 bytes waiting
    assert not stream.closed and stream.early_bytes == 100
    pusher._distribute(b"z", None, 3)  # one over
    assert stream.closed and closed == [stream] and pusher.counts.dropped_slow == 1
