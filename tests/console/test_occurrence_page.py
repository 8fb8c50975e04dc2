"""The occurrence page: each attempt's value, error, output and ``fetch`` record, escaped."""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest

from appliance.console.app import egress_view
from appliance.core import state as core
from tests.console.inprocess import TOKEN, Served, View, serve
from tests.console.state_samples import T0, S, definition, finished


@pytest.fixture
def served() -> Iterator[Served]:
    running = serve()
    yield running
    running.stop()


def page(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}", "Host": "127.0.0.1"})
    response = conn.getresponse()
    return response.status, response.read().decode()


EGRESS = {
    "requests": [
        {
            "n": 1,
            "hop": 0,
            "method": "GET",
            "url": "https://api.example/<script>alert(1)</script>",
            "decision": "denied",
            "reason": "host <b>not</b> allowed",
            "credentials": ["API_TOKEN"],
            "status": None,
            "error": None,
            "request_bytes": 0,
            "response_bytes": 0,
            "ms": 3,
        }
    ],
    "over_limit": 0,
    "records_dropped": 2,
}


def test_an_attempts_report_and_fetch_record_are_shown_escaped(served: Served) -> None:
    served.commit(core.CreateSchedule(definition("p"), T0))
    record = finished(1, 1, T0 + 60, T0 + 60, T0 + 61, S.FAILED)
    served.machine.state.occurrences[1] = record  # placed: the page only reads it
    view: View = served.parts.view  # type: ignore[assignment]
    view.documents["s1-o1-a1"] = {
        "status": "failed",
        "result": None,
        "error": "Error: <i>boom</i>\n    at <anonymous>:1:7",
        "started_at": "2027-01-15T08:01:00.100Z",
        "finished_at": "2027-01-15T08:01:00.350Z",
        "output": {"text": "before </pre><script>x()</script>\n", "truncated": False},
        "egress": EGRESS,
    }
    status, text = page(served.port, "/occurrences/1")
    assert status == 200
    assert "Error: &lt;i&gt;boom&lt;/i&gt;" in text and "at &lt;anonymous&gt;:1:7" in text
    assert "before &lt;/pre&gt;&lt;script&gt;x()&lt;/script&gt;" in text
    assert "250 ms" in text
    assert "https://api.example/&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "host &lt;b&gt;not&lt;/b&gt; allowed" in text and "API_TOKEN" in text
    assert "2 records not kept" in text
    assert "<script>x()" not in text and "<b>not</b>" not in text


def test_an_attempt_the_worker_cannot_return_says_so(served: Served) -> None:
    served.commit(core.CreateSchedule(definition("p"), T0))
    served.machine.state.occurrences[1] = finished(1, 1, T0 + 60, T0 + 60, T0 + 61, S.SUCCEEDED)
    status, text = page(served.port, "/occurrences/1")
    assert status == 200 and "the worker did not return it" in text


def test_an_unknown_occurrence_is_404(served: Served) -> None:
    assert page(served.port, "/occurrences/77")[0] == 404
    assert page(served.port, "/schedules/77")[0] == 404


def test_a_report_without_fetch_shows_no_table() -> None:
    assert egress_view(None) is None
    assert egress_view({"other": 1}) is None
    view = egress_view(EGRESS)
    assert view is not None and view["rows"][0][1] == "GET" and view["rows"][0][6] == ""
