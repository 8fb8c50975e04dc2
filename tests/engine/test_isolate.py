"""The isolate adapter (appliance/engine/v8.py), in this process: the private mini-racer names it
relies on still work, and disposal stops a script wherever it spins and proves it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from appliance.engine.v8 import Isolate, IsolateError, initialise_v8, thread_alive


@pytest.fixture
def isolate() -> Iterator[Isolate]:
    initialise_v8()
    made = Isolate()
    yield made
    made.dispose(5.0)


def install(isolate: Isolate, bell: threading.Event, fetch: bool = False) -> None:
    isolate.on_bell(bell.set)
    isolate.fetch = fetch  # type: ignore[attr-defined]  # read by start() below


def start(isolate: Isolate, code: str) -> object:
    """The harness's start call, as the sandbox makes it: the whole request as ``this``."""
    config = {
        "code": code,
        "scheduled": {"attempt": 3},
        "output_limit_bytes": 1024,
        "fetch": getattr(isolate, "fetch", False),
    }
    return isolate.call("start", json.dumps(config))


def test_a_zero_argument_call_carries_the_request_as_this_and_answers_a_take_record(
    isolate: Isolate,
) -> None:
    install(isolate, threading.Event())
    record = json.loads(start(isolate, "console.log('hi'); scheduled.attempt * 2").result(10))
    assert record["out"] == "hi\n"
    assert record["outcome"] == {"ok": True, "json": "6"}


def test_the_doorbell_rings_when_a_running_script_writes(isolate: Isolate) -> None:
    bell = threading.Event()
    install(isolate, bell)
    code = "new Promise(r => setTimeout(() => { console.log('later'); r(1); }, 50))"
    first = json.loads(start(isolate, code).result(10))
    assert first["outcome"] is None
    assert bell.wait(10)
    taken = json.loads(isolate.call("take").result(10))
    assert taken["out"] == "later\n" and taken["outcome"] == {"ok": True, "json": "1"}


def test_fetch_requests_reach_python_and_deliveries_settle_them(isolate: Isolate) -> None:
    bell = threading.Event()
    install(isolate, bell, fetch=True)
    code = "fetch('https://api.example/x', {method: 'post', body: 'b'}).then(r => r.text())"
    record = json.loads(start(isolate, code).result(10))
    (request,) = record["requests"]
    assert (request["method"], request["url"], request["body"]) == (
        "POST",
        "https://api.example/x",
        "b",
    )
    answer = {
        "id": request["id"],
        "response": {
            "status": 200,
            "statusText": "OK",
            "url": "u",
            "headers": [],
            "body": "pong",
            "redirected": False,
        },
    }
    assert isolate.call("deliver", json.dumps(answer)).result(10) == "delivered"
    assert bell.wait(10)
    assert json.loads(isolate.call("take").result(10))["outcome"]["json"] == '"pong"'


def test_fetch_is_undefined_without_egress(isolate: Isolate) -> None:
    install(isolate, threading.Event(), fetch=False)
    code = "['fetch', 'Headers', 'Response', 'AbortController'].map(n => typeof globalThis[n])"
    record = json.loads(start(isolate, code).result(10))
    assert json.loads(record["outcome"]["json"]) == ["undefined"] * 4


@pytest.mark.parametrize(
    "code",
    [
        "for (;;) {}",
        "setTimeout(() => { for (;;) {} }, 0); 1",
        "Promise.resolve().then(() => { for (;;) {} }); 1",
    ],
    ids=["in-the-call", "in-a-timer", "in-a-promise-reaction"],
)
def test_dispose_stops_a_spinning_script_and_proves_its_threads_gone(
    isolate: Isolate, code: str
) -> None:
    install(isolate, threading.Event())
    running = start(isolate, code)
    pending_take = isolate.call("take")  # queued behind the spin: it would never answer
    assert isolate.dispose(5.0) is True
    assert not thread_alive(isolate.pump_thread_id)
    assert not thread_alive(isolate.loop_thread_id)
    assert running.done() and pending_take.done()  # answered, failed or cancelled: no waiting


def test_a_call_after_dispose_fails_at_once(isolate: Isolate) -> None:
    assert isolate.dispose(5.0)
    with pytest.raises(IsolateError):
        isolate.call("take").result(1)
