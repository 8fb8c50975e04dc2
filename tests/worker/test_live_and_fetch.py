"""A real worker process (issue 32 item 1, issue 35 item 2, worker half): a running execution's
console output is readable through ``executions/{id}`` while it runs, and a script's ``fetch``
goes through the worker's egress policy to a loopback server written in the tests."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.egress.target_server import TargetServer
from tests.worker.peers import (
    AdmissionPeer,
    WorkerProcess,
    binding,
    exec_body,
    execution_id,
    running_worker,
)

POLICY = """package appliance.egress
import rego.v1

default allow := false

allow if input.url_parsed.path != "/deny"

reason := "the path /deny is not for scripts" if input.url_parsed.path == "/deny"
"""

_occurrences = itertools.count(700)


@pytest.fixture(scope="module")
def target() -> Iterator[TargetServer]:
    server = TargetServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def worker(
    tmp_path_factory: pytest.TempPathFactory, admission: AdmissionPeer
) -> Iterator[WorkerProcess]:
    tmp = tmp_path_factory.mktemp("live_and_fetch")
    (tmp / "egress.rego").write_text(POLICY, encoding="utf-8")
    with running_worker(
        tmp,
        [admission.url],
        engine={"max_concurrent": 4, "max_queued": 4, "executions_per_child": 4},
        extra_config={"egress": {"policy_file": "egress.rego"}},
    ) as process:
        yield process


def observed_until(
    worker: WorkerProcess, eid: str, done: Any, timeout_seconds: float = 30.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_seconds
    while True:
        document = worker.observe(eid).json()
        if done(document):
            return document
        assert time.monotonic() < deadline, f"never reached: {document}"
        time.sleep(0.05)  # the route is the interface under test: nothing pushes to us


def test_a_running_execution_shows_its_output_so_far(worker: WorkerProcess) -> None:
    occurrence = next(_occurrences)
    code = (
        "console.log('step one');"
        "new Promise(r => setTimeout(() => { console.log('step two'); r('end'); }, 1500))"
    )
    assert worker.exec(exec_body(code, occurrence_id=occurrence)).status == 202
    eid = execution_id(occurrence)
    running = observed_until(worker, eid, lambda d: d["output"]["text"] == "step one\n")
    assert running["status"] == "running"
    assert running["output"] == {"text": "step one\n", "bytes": 9, "truncated": False}
    final = worker.wait_terminal(eid)
    assert final["status"] == "completed" and final["result"] == "end"
    assert final["output"]["text"] == "step one\nstep two\n"


def test_a_script_fetches_through_the_policy_and_a_denial_names_the_reason(
    worker: WorkerProcess, target: TargetServer
) -> None:
    occurrence = next(_occurrences)
    echo, deny = json.dumps(target.url("/echo/w")), json.dumps(target.url("/deny"))
    code = f"""
        (async () => [
            (await (await fetch({echo}, {{method: 'POST', body: 'hi'}})).json()).body,
            await fetch({deny}).then(() => 'sent', e => e.message),
        ])()
    """
    assert worker.exec(exec_body(code, occurrence_id=occurrence)).status == 202
    final = worker.wait_terminal(execution_id(occurrence))
    assert final["status"] == "completed", final
    assert final["result"] == ["hi", "egress denied: the path /deny is not for scripts"]
    arrived = [a for a in target.requests if a.path == "/echo/w"]
    assert len(arrived) == 1
    fence = binding(code, occurrence_id=occurrence)
    assert arrived[0].headers["appliance-invocation"] == (
        f"{fence['namespace']}/{fence['schedule_id']}/{fence['occurrence_id']}/{fence['attempt']}"
    )
    decisions = [(r["decision"], r["reason"]) for r in final["egress"]["requests"]]
    assert decisions == [("allow", None), ("deny", "the path /deny is not for scripts")]


def test_a_cancel_during_a_request_is_stopped_after_the_connection_closed(
    worker: WorkerProcess, target: TargetServer
) -> None:
    target.holding.clear()
    target.closed_by_client.clear()
    occurrence = next(_occurrences)
    code = f"console.log('waiting'); fetch({json.dumps(target.url('/hold'))})"
    body = exec_body(code, occurrence_id=occurrence, timeout_seconds=60)
    assert worker.exec(body).status == 202
    assert target.holding.wait(30), "the request never reached the server"
    eid = execution_id(occurrence)
    observed_until(worker, eid, lambda d: d["output"]["text"] == "waiting\n")
    cancel = {"protocol": 1, "binding": body["binding"]}
    deadline = time.monotonic() + 30
    answer = worker.cancel(cancel).json()
    while answer["result"] == "stopping" and time.monotonic() < deadline:
        time.sleep(0.05)  # the runner observes again the same way
        answer = worker.cancel(cancel).json()
    assert answer["result"] == "stopped", answer
    assert target.closed_by_client.is_set()  # closed before the stop was confirmed
    assert worker.observe(eid).json()["output"]["text"] == "waiting\n"


def test_without_an_egress_section_fetch_stays_undefined(
    tmp_path: Path, admission: AdmissionPeer
) -> None:
    with running_worker(tmp_path, [admission.url]) as plain:
        occurrence = next(_occurrences)
        code = "['fetch', 'Headers', 'Response', 'AbortController'].map(n => typeof globalThis[n])"
        assert plain.exec(exec_body(code, occurrence_id=occurrence)).status == 202
        final = plain.wait_terminal(execution_id(occurrence))
        assert final["result"] == ["undefined"] * 4
        assert final["egress"] is None
