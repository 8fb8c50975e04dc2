"""Any value a script can make is reported: from JavaScript values to the stored report and the
observation answer (issue 17 item 4).

A real worker process covers the named cases (a lone surrogate result, log and throw; timers with
a zero, negative or missing delay). The property test drives the worker service in-process with
its real parts (a real engine with a reused child, the store on disk, the permit round trip to a
local admission peer) and checks, for generated JavaScript values, that the execution completes
with exactly the value the encoding rule (appliance/script_text.py) predicts, in the store and
in the answer to ``executions/{id}`` — which must always encode as UTF-8.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.config.credentials import Secret
from appliance.config.urls import parse_origin
from appliance.config.worker import parse_worker_config
from appliance.engine import Engine, SystemClock
from appliance.http import HttpClient
from appliance.script_text import JSON_DEPTH_MAX, well_formed
from appliance.store.worker_store import Invocation, WorkerStore
from appliance.worker.admission import AdmissionClient
from appliance.worker.service import WorkerService
from appliance.worker.wire import parse_exec
from tests.worker.peers import (
    ADMISSION_TOKEN,
    NAMESPACE,
    WORKER_ID,
    AdmissionPeer,
    WorkerProcess,
    exec_body,
    execution_id,
)

_occurrences = itertools.count(1)
LONE = "'😀'.slice(0, 1)"


# ----- a real worker process ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "result", "error", "output"),
    [
        (LONE, "completed", "\ufffd", None, ""),
        (f"console.log({LONE}); 1", "completed", 1, None, "\ufffd\n"),
        (f"throw {LONE}", "failed", None, "\ufffd", ""),
        ("'a\\u0000b\\u0007'", "completed", "a\x00b\x07", None, ""),
        ("new Promise(r => setTimeout(() => r('zero'), 0))", "completed", "zero", None, ""),
        (
            "new Promise(r => setTimeout(() => r('negative'), -10))",
            "completed",
            "negative",
            None,
            "",
        ),
        ("new Promise(r => setTimeout(() => r('missing')))", "completed", "missing", None, ""),
    ],
    ids=[
        "lone-result",
        "lone-log",
        "lone-throw",
        "nul",
        "timeout-0",
        "timeout-negative",
        "timeout-missing",
    ],
)
def test_text_and_timer_cases_end_with_their_value_through_a_worker(
    worker: WorkerProcess,
    code: str,
    status: str,
    result: Any,
    error: str | None,
    output: str,
) -> None:
    occurrence = next(_occurrences)
    response = worker.exec(exec_body(code, occurrence_id=occurrence))
    assert response.status == 202, response.body
    final = worker.wait_terminal(execution_id(occurrence))
    assert (final["status"], final["result"], final["error"]) == (status, result, error)
    assert final["output"]["text"] == output
    again = worker.observe(execution_id(occurrence))  # asked again: still answers, never 500
    assert again.status == 200 and again.json()["result"] == result


# ----- the property: JavaScript value -> stored report ----------------------------------------

code_units = st.one_of(
    st.integers(0xD800, 0xDFFF),  # surrogates, paired by chance or lone
    st.integers(0, 0x1F),  # NUL and control characters
    st.integers(0, 0xFFFF),
)
js_strings = st.lists(code_units, max_size=12)


def js_literal(units: list[int]) -> str:
    return "'" + "".join(f"\\u{u:04x}" for u in units) + "'"


def python_text(units: list[int]) -> str:
    """What the rule makes of these UTF-16 code units: pairs join, lone surrogates -> U+FFFD."""
    raw = b"".join(u.to_bytes(2, "little") for u in units)
    return well_formed(raw.decode("utf-16-le", "surrogatepass"))


numbers = st.one_of(
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
)
leaves = st.one_of(st.none(), st.booleans(), numbers, js_strings.map(lambda u: ("str", u)))
values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(lambda items: ("array", items)),
        st.lists(
            st.tuples(js_strings, children), max_size=4, unique_by=lambda kv: python_text(kv[0])
        ).map(lambda items: ("object", items)),
    ),
    max_leaves=12,
)


def to_js(value: Any) -> str:
    if isinstance(value, tuple) and value[0] == "str":
        return js_literal(value[1])
    if isinstance(value, tuple) and value[0] == "array":
        return "[" + ", ".join(to_js(v) for v in value[1]) + "]"
    if isinstance(value, tuple) and value[0] == "object":
        # Computed keys: even '__proto__' becomes an own property.
        return "({" + ", ".join(f"[{js_literal(k)}]: {to_js(v)}" for k, v in value[1]) + "})"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(float(value)) if isinstance(value, float) else str(value)


def as_doubles(value: Any) -> Any:
    """JSON numbers are doubles: 48568608835255450 (as JavaScript prints a double) and
    4.856860883525545e16 are the same number."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list):
        return [as_doubles(v) for v in value]
    return {k: as_doubles(v) for k, v in value.items()}


def expected(value: Any) -> Any:
    if isinstance(value, tuple) and value[0] == "str":
        return python_text(value[1])
    if isinstance(value, tuple) and value[0] == "array":
        return [expected(v) for v in value[1]]
    if isinstance(value, tuple) and value[0] == "object":
        return {python_text(k): expected(v) for k, v in value[1]}
    return value


@pytest.fixture(scope="module")
def launch(
    tmp_path_factory: pytest.TempPathFactory, admission: AdmissionPeer
) -> Iterator[tuple[WorkerService, Engine, WorkerStore]]:
    data_dir = tmp_path_factory.mktemp("values") / "data"
    config = parse_worker_config(
        {
            "namespace": NAMESPACE,
            "worker_id": WORKER_ID,
            "data_dir": str(data_dir),
            "bearer_env": "W",
            "admission_bearer_env": "A",
            "admission_urls": [admission.url],
            "listen_addr": "127.0.0.1:9",
            "engine": {"max_concurrent": 1, "max_queued": 0, "output_limit_bytes": 4096},
        }
    )
    store = WorkerStore.create_or_open(
        config.data_dir, namespace=NAMESPACE, worker_id=WORKER_ID, now_ms=0
    )
    engine = Engine(max_concurrent=1, max_queued=0, output_limit_bytes=4096, warm_children=1)
    client = HttpClient()
    permits = AdmissionClient(
        (parse_origin(admission.url),), Secret(ADMISSION_TOKEN), store.incarnation_id, client
    )
    service = WorkerService(
        config=config, store=store, engine=engine, admission=permits, clock=SystemClock()
    )
    yield service, engine, store
    assert engine.shutdown(10.0)
    client.close()
    store.close()


def launch_and_observe(
    launch: tuple[WorkerService, Engine, WorkerStore], code: str
) -> tuple[dict[str, Any], Any]:
    service, engine, store = launch
    occurrence = next(_occurrences) + 10_000
    answer = service.execute(parse_exec(exec_body(code, occurrence_id=occurrence)))
    assert answer.status == 202, answer.body
    assert engine.wait(execution_id(occurrence), 20.0).status.terminal
    observed = service.observe(Invocation(NAMESPACE, 3, occurrence, 1))
    assert observed.status == 200
    # What the route does with the document; it must never fail (that was the 500).
    json.dumps(observed.body, ensure_ascii=False).encode("utf-8")
    stored = store.get_execution(execution_id(occurrence))
    assert stored is not None and stored.finished
    return observed.body, stored


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=values)
def test_any_returned_value_is_stored_and_observed_as_the_rule_predicts(
    launch: tuple[WorkerService, Engine, WorkerStore], value: Any
) -> None:
    observed, stored = launch_and_observe(launch, to_js(value))
    assert observed["status"] == "completed", observed
    assert as_doubles(observed["result"]) == as_doubles(expected(value))
    assert stored.status == "completed"
    assert as_doubles(stored.result["value"]) == as_doubles(expected(value))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(logged=js_strings, thrown=js_strings)
def test_any_logged_and_thrown_text_is_stored_and_observed_as_the_rule_predicts(
    launch: tuple[WorkerService, Engine, WorkerStore], logged: list[int], thrown: list[int]
) -> None:
    observed, stored = launch_and_observe(
        launch, f"console.log({js_literal(logged)}); throw {js_literal(thrown)}"
    )
    assert (observed["status"], observed["reason"]) == ("failed", "uncaught exception")
    assert observed["error"] == stored.error == python_text(thrown)
    assert observed["output"]["text"] == python_text(logged) + "\n"
    assert stored.output.decode("utf-8") == python_text(logged) + "\n"


def test_a_result_at_the_depth_limit_is_stored_and_a_deeper_one_is_null_with_a_note(
    launch: tuple[WorkerService, Engine, WorkerStore],
) -> None:
    def nested(depth: int) -> str:
        return f"let v = 0; for (let i = 0; i < {depth}; i++) v = [v]; v"

    observed, stored = launch_and_observe(launch, nested(JSON_DEPTH_MAX))
    assert observed["status"] == stored.status == "completed"
    value = observed["result"]
    for _ in range(JSON_DEPTH_MAX):
        value = value[0]
    assert value == 0 and stored.result["value"] == observed["result"]
    observed, stored = launch_and_observe(launch, nested(JSON_DEPTH_MAX + 1))
    assert (observed["status"], observed["result"]) == ("completed", None)
    assert f"deeper than {JSON_DEPTH_MAX}" in observed["note"] and stored.status == "completed"
