"""The isolate adapter (appliance/engine/v8.py), in this process: the private mini-racer names it
relies on still work, and disposal stops a script wherever it spins and proves it."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator

import pytest

from appliance.engine import v8
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


def test_a_pump_thread_that_shows_late_in_proc_is_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seen in a burst: /proc/self/task listed the new loop thread but not yet the pump thread
    # created just before it; the isolate was refused and its whole child died with it.
    initialise_v8()
    real = v8._threads_named
    calls = []

    def late_pump(name: bytes) -> set[int]:
        found = real(name)
        calls.append(found)
        if len(calls) == 1:
            loop = {t.native_id for t in threading.enumerate()} & found
            return loop
        return found

    monkeypatch.setattr(v8, "_threads_named", late_pump)
    made = Isolate()
    try:
        assert len(calls) >= 2
        assert {made.loop_thread_id, made.pump_thread_id} == calls[-1]
        assert thread_alive(made.pump_thread_id)
    finally:
        assert made.dispose(5.0)


def test_an_isolate_whose_threads_cannot_be_told_closes_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    initialise_v8()
    monkeypatch.setattr(v8, "THREADS_VISIBLE_SECONDS", 0.05)
    monkeypatch.setattr(v8, "_threads_named", lambda name: set())
    before = set(os.listdir("/proc/self/task"))
    with pytest.raises(IsolateError, match="cannot tell the isolate's threads"):
        Isolate()
    # Its loop and pump threads are joined: nothing of it is left running.
    deadline = time.monotonic() + 5
    while set(os.listdir("/proc/self/task")) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not set(os.listdir("/proc/self/task")) - before
