"""``fetch()`` in the engine (issue 32 item 1): real children, the real egress gate (a Rego
policy), and a loopback HTTP server written in the tests (tests/egress/target_server.py).

The gate's own rules (credentials, redirects, rebinding, limits) are proved in tests/egress; here
the script's side of them: what a script sees, the promise it gets, aborts and stops.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.config.egress import EGRESS_RULE
from appliance.core.schema import INVALID, validate
from appliance.egress.handoff import EgressHandoff, prepare_egress
from appliance.engine import Engine, ExecutionStatus
from appliance.engine.model import REASON_OUT_OF_MEMORY, REASON_TIMEOUT
from tests.egress.target_server import TargetServer

from .conftest import SCHEDULED, RunningWatcher, pid_exists, run, submit

POLICY = """package appliance.egress
import rego.v1

default allow := false

allow if input.url_parsed.path != "/deny"

reason := "the path /deny is not for scripts" if input.url_parsed.path == "/deny"
"""


def handoff(tmp_path: Path, **fields: Any) -> EgressHandoff:
    policy = tmp_path / "egress.rego"
    policy.write_text(POLICY, encoding="utf-8")
    settings, problems = validate(EGRESS_RULE, {"policy_file": str(policy), **fields}, "egress")
    assert settings is not INVALID, problems
    return prepare_egress(settings, {}, own_credentials=())


@pytest.fixture
def target() -> Iterator[TargetServer]:
    server = TargetServer()
    yield server
    server.close()


@pytest.fixture
def fetching(make_engine: Callable[..., Engine], tmp_path: Path) -> Callable[..., Engine]:
    def factory(**kwargs: Any) -> Engine:
        egress_fields = kwargs.pop("egress_fields", {})
        kwargs.setdefault("executions_per_child", 4)
        kwargs.setdefault("max_concurrent", 4)
        return make_engine(egress=handoff(tmp_path, **egress_fields), **kwargs)

    return factory


def result_of(engine: Engine, code: str, **kwargs: Any) -> Any:
    report = run(engine, code, **kwargs)
    assert report.status is ExecutionStatus.COMPLETED, (report.error, report.note)
    return report.result


def test_an_allowed_request_reaches_the_server_and_its_response_reaches_the_script(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    code = f"""
        (async () => {{
            const r = await fetch({json.dumps(target.url("/echo/a?q=1"))}, {{
                method: 'post', headers: {{'X-Test': 'yes'}}, body: JSON.stringify({{n: 1}}),
            }});
            const echoed = await r.json();
            return [r.ok, r.status, r.statusText, r.url, r.redirected,
                    r.headers.get('Content-Type'), echoed.method, echoed.body,
                    echoed.headers['x-test'], r.bodyUsed];
        }})()
    """
    assert result_of(engine, code) == [
        True,
        200,
        "OK",
        target.url("/echo/a?q=1"),
        False,
        "application/json",
        "POST",
        '{"n":1}',
        "yes",
        True,
    ]
    (arrived,) = target.requests
    key = f"{SCHEDULED.namespace}/{SCHEDULED.schedule_id}/{SCHEDULED.occurrence_id}"
    assert arrived.headers["idempotency-key"] == f"{key}/1"
    assert arrived.headers["appliance-invocation"] == f"{key}/{SCHEDULED.attempt}"
    assert arrived.headers["appliance-ownership-epoch"] == str(SCHEDULED.ownership_epoch)


def test_each_fetch_call_gets_the_next_idempotency_ordinal_in_call_order(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    first, second = json.dumps(target.url("/echo/1")), json.dumps(target.url("/echo/2"))
    result_of(engine, f"Promise.all([fetch({first}), fetch({second})]).then(() => 1)")
    keys = {a.path: a.headers["idempotency-key"].rsplit("/", 1)[1] for a in target.requests}
    assert keys == {"/echo/1": "1", "/echo/2": "2"}


def test_a_denied_request_rejects_with_a_type_error_naming_the_policys_reason(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    code = f"fetch({json.dumps(target.url('/deny'))}).then(() => 'sent', e => [e.name, e.message])"
    report = run(engine, code)
    assert report.result == ["TypeError", "egress denied: the path /deny is not for scripts"]
    assert target.requests == []
    assert report.egress is not None
    (record,) = report.egress["requests"]
    assert record["decision"] == "deny" and record["reason"] == "the path /deny is not for scripts"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("fetch('ftp://example.com/x')", "only absolute http: and https: URLs"),
        ("fetch('/relative')", "only absolute http: and https: URLs"),
        ("fetch('https://example.com', {method: 'CONNECT'})", "forbidden method"),
        ("fetch('https://example.com', {body: 'x'})", "cannot have a body"),
        ("fetch('https://example.com', {method: 'POST', body: {a: 1}})", "body must be a string"),
        ("fetch('https://example.com', {headers: {'bad name': 'x'}})", "invalid header name"),
        ("fetch('https://example.com', {headers: {'x': 'a\\nb'}})", "invalid header value"),
        ("fetch('https://example.com', {redirect: 'sometimes'})", "redirect must be"),
    ],
)
def test_bad_arguments_reject_with_a_type_error_and_send_nothing(
    fetching: Callable[..., Engine], call: str, message: str
) -> None:
    engine = fetching()
    report = run(engine, f"{call}.then(() => 'sent', e => [e.name, e.message])")
    name, text = report.result
    assert name == "TypeError" and message in text
    assert report.egress is None or report.egress["requests"] == []


def test_headers_behave_as_in_browsers(fetching: Callable[..., Engine]) -> None:
    engine = fetching()
    code = """
        const h = new Headers({'Content-Type': 'text/plain'});
        h.append('X-A', '1'); h.append('x-a', ' 2 ');
        const copy = new Headers(h); copy.set('X-A', 'only'); copy.delete('content-type');
        let thrown = null;
        try { h.append('bad name', 'v'); } catch (e) { thrown = e.name; }
        [h.get('x-a'), h.get('CONTENT-TYPE'), h.has('missing'), h.get('missing'),
         [...h].map(([k, v]) => k + '=' + v), [...copy.keys()], copy.get('x-a'), thrown]
    """
    assert result_of(engine, code) == [
        "1, 2",
        "text/plain",
        False,
        None,
        ["content-type=text/plain", "x-a=1, 2"],
        ["x-a"],
        "only",
        "TypeError",
    ]


def test_a_response_body_is_read_once(fetching: Callable[..., Engine]) -> None:
    engine = fetching()
    code = """
        (async () => {
            const r = new Response('{"a": 1}', {status: 201, headers: {'X-B': 'c'}});
            const first = await r.json();
            const again = await r.text().then(() => 'read twice', e => e.name);
            let immutable = null;
            try { r.headers.set('x-b', 'd'); } catch (e) { immutable = e.name; }
            return [r.ok, r.status, first, again, r.bodyUsed, immutable];
        })()
    """
    assert result_of(engine, code) == [True, 201, {"a": 1}, "TypeError", True, "TypeError"]


def test_a_response_that_is_not_json_rejects_json(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    url = json.dumps(target.url("/bytes/3"))
    code = f"fetch({url}).then(r => r.json()).then(() => 'parsed', e => e.name)"
    assert result_of(engine, code) == "SyntaxError"


def test_an_already_aborted_signal_rejects_without_sending(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    code = f"""
        const c = new AbortController(); c.abort();
        fetch({json.dumps(target.url("/echo"))}, {{signal: c.signal}})
            .then(() => 'sent', e => [e.name, e instanceof DOMException, c.signal.aborted])
    """
    assert result_of(engine, code) == ["AbortError", True, True]
    assert target.requests == []


def test_aborting_a_request_in_flight_rejects_it_and_closes_the_connection(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    code = f"""
        const c = new AbortController();
        const events = [];
        c.signal.addEventListener('abort', () => events.push('abort event'));
        const pending = fetch({json.dumps(target.url("/hold"))}, {{signal: c.signal}})
            .then(() => 'answered', e => e.name);
        setTimeout(() => c.abort(), 1500);
        pending.then(name => [name, events])
    """
    submitted = submit(engine, code, timeout_seconds=20)
    assert target.holding.wait(20), "the request never reached the server"
    report = engine.wait(submitted.execution_id, 20)
    assert report.result == ["AbortError", ["abort event"]]
    assert target.closed_by_client.wait(10), "the server never saw the connection closed"


def test_abort_signal_timeout_aborts_with_a_timeout_error(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    url = json.dumps(target.url("/hold"))
    code = f"fetch({url}, {{signal: AbortSignal.timeout(1500)}}).then(() => 'sent', e => e.name)"
    submitted = submit(engine, code, timeout_seconds=20)
    assert target.holding.wait(20), "the request never reached the server"
    assert engine.wait(submitted.execution_id, 20).result == "TimeoutError"
    assert target.closed_by_client.wait(10)


def test_a_cancel_during_a_request_closes_its_connection_before_cancelled(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    watcher = RunningWatcher(engine)
    # A neighbour in the same child: the stop is proved inside the child, not by a reap.
    neighbour = submit(engine, "new Promise(r => setTimeout(() => r('ok'), 2500))")
    held = submit(engine, f"fetch({json.dumps(target.url('/hold'))})", timeout_seconds=30)
    watcher.wait_started(held.execution_id)
    assert target.holding.wait(20), "the request never reached the server"
    seen_closed: list[bool] = []
    engine.add_listener(
        lambda r: (
            seen_closed.append(target.closed_by_client.is_set())
            if r.execution_id == held.execution_id and r.status.terminal
            else None
        )
    )
    report = engine.cancel(held.execution_id, wait_seconds=20)
    assert report.status is ExecutionStatus.CANCELLED
    assert seen_closed == [True]  # the connection was closed before cancelled was reported
    assert report.pid is not None and pid_exists(report.pid)  # the neighbour's child lives on
    assert engine.wait(neighbour.execution_id, 20).result == "ok"


def test_a_cancel_of_a_lone_request_reaps_the_child_and_the_server_sees_it_closed(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    watcher = RunningWatcher(engine)
    held = submit(engine, f"fetch({json.dumps(target.url('/hold'))})", timeout_seconds=30)
    watcher.wait_started(held.execution_id)
    assert target.holding.wait(20)
    report = engine.cancel(held.execution_id, wait_seconds=20)
    assert report.status is ExecutionStatus.CANCELLED
    assert report.pid is not None and not pid_exists(report.pid)
    assert target.closed_by_client.wait(10)


def test_a_slow_server_past_the_deadline_times_out_and_the_connection_is_closed(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    report = run(engine, f"fetch({json.dumps(target.url('/hold'))})", timeout_seconds=1)
    assert report.status is ExecutionStatus.TIMED_OUT and report.reason == REASON_TIMEOUT
    assert target.closed_by_client.wait(10)


def test_a_request_timeout_rejects_the_promise_and_the_script_goes_on(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching(egress_fields={"request_timeout_ms": 300})
    url = json.dumps(target.url("/hold"))
    code = f"fetch({url}).then(() => 'answered', e => [e.name, e.message])"
    name, message = result_of(engine, code, timeout_seconds=20)
    assert name == "TypeError" and "no response within" in message


def test_a_response_over_the_limit_rejects_nothing_is_cut(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching(egress_fields={"max_response_bytes": 1024})
    at_limit = json.dumps(target.url("/bytes/1024"))
    over = json.dumps(target.url("/bytes/1025"))
    code = f"""
        (async () => [
            (await (await fetch({at_limit})).text()).length,
            await fetch({over}).then(r => r.text()).then(t => t.length, e => e.name),
        ])()
    """
    assert result_of(engine, code) == [1024, "TypeError"]


def test_console_output_of_a_script_awaiting_a_response_is_readable_while_it_waits(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    watcher = RunningWatcher(engine)
    code = f"console.log('asking'); fetch({json.dumps(target.url('/hold'))})"
    held = submit(engine, code, timeout_seconds=30)
    watcher.wait_started(held.execution_id)
    assert target.holding.wait(20)
    running = engine.status(held.execution_id)
    assert running.status is ExecutionStatus.RUNNING and running.output == "asking\n"
    assert engine.cancel(held.execution_id, wait_seconds=20).output == "asking\n"


def test_scripts_sharing_a_child_see_neither_each_others_requests_nor_responses(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    watcher = RunningWatcher(engine)
    codes = [
        f"""
        globalThis.mine = {n};
        fetch({json.dumps(target.url(f"/echo/{n}"))}).then(r => r.json())
            .then(j => new Promise(r => setTimeout(() => r([j.path, globalThis.mine,
                                                            typeof globalThis.other]), 300)))
        """
        for n in (1, 2)
    ]
    ids = [submit(engine, code).execution_id for code in codes]
    for execution_id in ids:
        watcher.wait_started(execution_id)
    reports = [engine.wait(i, 20) for i in ids]
    assert [r.result for r in reports] == [["/echo/1", 1, "undefined"], ["/echo/2", 2, "undefined"]]
    assert [len(r.egress["requests"]) for r in reports if r.egress] == [1, 1]


def test_out_of_memory_aborts_a_request_in_flight(
    fetching: Callable[..., Engine], target: TargetServer
) -> None:
    engine = fetching()
    code = f"""
        fetch({json.dumps(target.url("/hold"))});
        new Promise(r => setTimeout(() => {{
            const keep = []; for (;;) keep.push(new Array(1e5).fill(0.5));
        }}, 1500))
    """
    # A neighbour keeps the child alive: the connection is closed by the attempt's own end.
    neighbour = submit(engine, "new Promise(r => setTimeout(() => r('ok'), 4000))")
    submitted = submit(engine, code, heap_mb=32, timeout_seconds=30)
    assert target.holding.wait(20), "the request never reached the server"
    report = engine.wait(submitted.execution_id, 30)
    assert report.status is ExecutionStatus.FAILED and report.reason == REASON_OUT_OF_MEMORY
    assert target.closed_by_client.wait(10), "the request outlived its attempt"
    assert report.pid is not None and pid_exists(report.pid)  # the child was not killed for it
    assert engine.wait(neighbour.execution_id, 20).result == "ok"
