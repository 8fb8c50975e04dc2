"""The event stream on the real console listener (waitress, the takeover, the pusher), read as
strictly as a browser reads it (tests/console/wire.py): whatever lands while the stream is being
answered, and however it ends, the body is well framed and ends with the last chunk.

The cause of a browser's ``net::ERR_INVALID_CHUNKED_ENCODING`` (seen once under load): a commit
published between the stream's reservation and the takeover was queued before the framing was
decided, so it went out as bare bytes inside a chunked body."""

from __future__ import annotations

import http.client
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.core import state as core
from tests.console.chromium import browser_context, require_chromium
from tests.console.inprocess import TOKEN, Served, serve
from tests.console.state_samples import T0, definition
from tests.console.wire import StrictReader
from tests.support import wait_for

WAIT_S = 10.0


@pytest.fixture
def served() -> Iterator[Served]:
    running = serve(lifetime_s=1.0)
    yield running
    running.stop()


def open_events(port: int, path: str = "/events", **headers: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
    sock.sendall((request + extra + "\r\n").encode())
    return sock


def created(schedule_id: int) -> bytes:
    return f'"kind":"schedule","id":{schedule_id},"change":"created"'.encode()


def test_a_commit_published_while_the_stream_is_answered_arrives_as_one_chunk(
    served: Served,
) -> None:
    hub = served.parts.hub
    opening = hub.opening

    def opening_then_a_commit(after: int | None, follow: int | None) -> Any:
        first = opening(after, follow)
        # Published after the first bytes were read, before waitress has sent them.
        served.commit(core.CreateSchedule(definition("raced"), T0))
        wait_for(
            lambda: any(s.early for s in served.parts.pusher._streams()),
            "the commit held for the stream being answered",
            WAIT_S,
        )
        return first

    hub.opening = opening_then_a_commit  # type: ignore[method-assign]
    with open_events(served.port) as sock:
        reader = StrictReader(sock)
        body = reader.until(created(1))
        assert reader.response is not None and reader.response.status_code == 200
        assert body.index(b"event: hello") < body.index(created(1))
        body = reader.to_close()  # the stream's lifetime ends it: a complete body
        assert reader.ended and body.count(created(1)) == 1


def test_a_stream_resumes_after_the_id_its_page_was_rendered_at(served: Served) -> None:
    rendered_at = served.parts.hub.last_id
    served.commit(core.CreateSchedule(definition("while-rendering"), T0))
    wait_for(lambda: served.parts.hub.last_id > rendered_at, "the change published", WAIT_S)
    with open_events(served.port, f"/events?after={rendered_at}") as sock:
        reader = StrictReader(sock)
        body = reader.until(b"event: hello")
        assert body.count(created(1)) == 1  # replayed in the first bytes
        hello = re.search(rb"id: (\d+)\nevent: hello", body)
        assert hello is not None and int(hello.group(1)) == rendered_at + 1
    # A reconnecting browser's Last-Event-ID wins over the page's ?after=.
    with open_events(
        served.port, f"/events?after={rendered_at}", **{"Last-Event-ID": str(rendered_at + 1)}
    ) as sock:
        assert created(1) not in StrictReader(sock).until(b"event: hello")


@pytest.mark.parametrize("after", ["x", "-1", "1" * 16])
def test_a_bad_after_is_refused_naming_it(served: Served, after: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=WAIT_S)
    conn.request("GET", f"/events?after={after}", headers={"Authorization": f"Bearer {TOKEN}"})
    response = conn.getresponse()
    assert response.status == 400 and b"after:" in response.read()


def test_an_event_id_of_fifteen_digits_is_accepted(served: Served) -> None:
    with open_events(served.port, "/events?after=" + "9" * 15) as sock:
        body = StrictReader(sock).until(b"event: hello")  # from the future: reload
        assert b"event: reset" in body


def test_a_stream_ends_at_its_lifetime_with_the_last_chunk_and_closes(served: Served) -> None:
    with open_events(served.port) as sock:
        reader = StrictReader(sock)
        reader.to_close(WAIT_S)
        assert reader.ended and reader.closed
    wait_for(lambda: served.parts.pusher.counts.ended_cleanly == 1, "a clean end", WAIT_S)
    assert served.parts.pusher.counts.cut == 0


@pytest.fixture
def lasting() -> Iterator[Served]:
    running = serve()  # streams live as long as the page: no reconnects during the test
    yield running
    running.stop()


def test_in_chromium_commits_racing_every_streams_answer_cause_no_console_error(
    lasting: Served, tmp_path: Path
) -> None:
    """The browser test's failure, reproduced on purpose: before the fix, Chromium logged
    'Failed to load resource: net::ERR_INVALID_CHUNKED_ENCODING' for /events here."""
    require_chromium()
    served = lasting
    hub = served.parts.hub
    opening = hub.opening
    made: list[int] = []

    def opening_then_a_commit(after: int | None, follow: int | None) -> Any:
        first = opening(after, follow)
        made.append(len(made) + 1)
        served.commit(core.CreateSchedule(definition(f"raced-{len(made)}"), T0))
        wait_for(
            lambda: any(s.early for s in served.parts.pusher._streams()),
            "the commit held for the stream being answered",
            WAIT_S,
        )
        return first

    hub.opening = opening_then_a_commit  # type: ignore[method-assign]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with browser_context(tmp_path / "profile", extra_http_headers=headers) as context:
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
        for query in ("", "?sort=name", "?order=desc"):
            page.goto(f"http://127.0.0.1:{served.port}/schedules{query}")
            page.wait_for_selector("#live-status.on")  # its stream is open: the commit was made
            raced = f"raced-{len(made)}"
            page.wait_for_selector(f"table.schedules a:has-text('{raced}')")  # pushed, shown
        assert len(made) == 3 and errors == []
