"""seeds/001 "Authorization matrix": every credential kind by every route and tool.

- missing, invalid, worker, admission or cluster credential: denied (401) before the body is
  parsed, on every route (the body sent here is not even JSON, and nothing reaches the runner);
- operator: everything but acknowledge_stopped (HTTP 403; MCP isError with status 403, and the
  recovery tool is omitted from discovery);
- recovery: everything, acknowledge only with the explicit attestation.
"""

from __future__ import annotations

import json

import pytest

from tests.management.conftest import DEFINITION, TOKENS, Harness
from tests.management.mcp_raw import call, headers, rpc

ACK = {"occurrence_id": 101, "dispatcher_and_work_quiesced": True}
COMMANDS = {
    "status": {},
    "list": {},
    "create": {"definition": DEFINITION},
    "disable": {"id": 1},
    "cancel": {"occurrence_id": 101},
    "delete": {"id": 1},
    "acknowledge_stopped": ACK,
}
OPERATIONS = (
    [("http", "GET /scheduler/v1/status"), ("http", "GET /scheduler/v1/schedules")]
    + [("http", f"POST commands {action}") for action in COMMANDS]
    + [("mcp", "tools/list"), ("mcp", "server/discover")]
    + [("mcp", f"scheduler_{action}") for action in COMMANDS]
)
DENIED = ["missing", "invalid", "worker", "admission", "cluster"]
CREDENTIALS = [*DENIED, "operator", "recovery"]


def auth_headers(kind: str) -> dict[str, str]:
    if kind == "missing":
        return {}
    if kind == "invalid":
        return {"Authorization": "Bearer not-a-known-token"}
    return {"Authorization": f"Bearer {TOKENS[kind]}"}


def perform(h: Harness, kind: str, transport: str, operation: str, garbage_body: bool):
    hdrs = auth_headers(kind)
    if transport == "http":
        method, _, rest = operation.partition(" ")
        if method == "GET":
            return h.client.simulate_get(rest, headers=hdrs)
        action = rest.split(" ")[1]
        body = b"{not json" if garbage_body else json.dumps({"action": action, **COMMANDS[action]})
        return h.client.simulate_post("/scheduler/v1/commands", headers=hdrs, body=body)
    if operation in ("tools/list", "server/discover"):
        document, extra = rpc(operation), headers(operation)
    else:
        document, extra = call(operation, COMMANDS[operation.removeprefix("scheduler_")])
    body = b"{not json" if garbage_body else json.dumps(document)
    return h.client.simulate_post("/mcp", headers={**hdrs, **extra}, body=body)


@pytest.mark.parametrize("kind", DENIED)
@pytest.mark.parametrize(("transport", "operation"), OPERATIONS)
def test_non_management_credentials_are_denied_before_body_parsing(
    harness: Harness, kind: str, transport: str, operation: str
) -> None:
    result = perform(harness, kind, transport, operation, garbage_body=True)
    assert result.status_code == 401
    assert result.json["error"]["code"] == "unauthorized"
    assert result.headers.get("www-authenticate") == "Bearer"
    assert harness.runner.executed == []


@pytest.mark.parametrize("kind", ["operator", "recovery"])
@pytest.mark.parametrize(("transport", "operation"), OPERATIONS)
def test_management_credentials_follow_the_matrix(
    harness: Harness, kind: str, transport: str, operation: str
) -> None:
    harness.runner.add_occurrence(1, "Unknown")  # occurrence 101
    result = perform(harness, kind, transport, operation, garbage_body=False)
    is_ack = operation.endswith("acknowledge_stopped")
    if transport == "http":
        if is_ack and kind == "operator":
            assert result.status_code == 403
            assert result.json["error"]["code"] == "recovery_required"
            assert harness.runner.executed == []
        else:
            assert result.status_code == 200, result.json
            assert result.json["ok"] is True
        return
    assert result.status_code == 200, result.text
    payload = result.json["result"]
    if operation == "tools/list":
        names = {tool["name"] for tool in payload["tools"]}
        assert ("scheduler_acknowledge_stopped" in names) is (kind == "recovery")
        assert len(names) == (14 if kind == "recovery" else 13)
        assert payload["cacheScope"] == "private"
    elif operation == "server/discover":
        assert payload["supportedVersions"] == ["2026-07-28"]
    elif is_ack and kind == "operator":
        assert payload["isError"] is True
        assert json.loads(payload["content"][0]["text"])["status"] == 403
        assert harness.runner.executed == []
    else:
        assert payload["isError"] is False, payload
        assert json.loads(payload["content"][0]["text"])["ok"] is True


def test_recovery_acknowledge_changes_the_occurrence_only_with_attestation(
    harness: Harness,
) -> None:
    occurrence = harness.runner.add_occurrence(1, "Unknown")
    hdrs = auth_headers("recovery")
    for attestation in (
        {},
        {"dispatcher_and_work_quiesced": False},
        {"dispatcher_and_work_quiesced": "true"},
        {"dispatcher_and_work_quiesced": 1},
    ):
        doc = {"action": "acknowledge_stopped", "occurrence_id": occurrence, **attestation}
        result = harness.client.simulate_post("/scheduler/v1/commands", headers=hdrs, json=doc)
        assert result.status_code == 400
        assert result.json["error"]["field"] == "dispatcher_and_work_quiesced"
    assert harness.runner.occurrences[occurrence]["state"] == "Unknown"
    doc = {
        "action": "acknowledge_stopped",
        "occurrence_id": occurrence,
        "dispatcher_and_work_quiesced": True,
    }
    result = harness.client.simulate_post("/scheduler/v1/commands", headers=hdrs, json=doc)
    assert result.status_code == 200
    assert harness.runner.occurrences[occurrence]["state"] == "Abandoned"


def test_omitting_recovery_bearer_env_disables_remote_recovery_entirely(
    no_recovery_harness: Harness,
) -> None:
    h = no_recovery_harness
    occurrence = h.runner.add_occurrence(1, "Unknown")
    ack = {
        "action": "acknowledge_stopped",
        "occurrence_id": occurrence,
        "dispatcher_and_work_quiesced": True,
    }
    # The would-be recovery token is just an unknown token now.
    result = h.client.simulate_post(
        "/scheduler/v1/commands", headers=auth_headers("recovery"), json=ack
    )
    assert result.status_code == 401
    result = h.client.simulate_post(
        "/scheduler/v1/commands", headers=auth_headers("operator"), json=ack
    )
    assert result.status_code == 403
    listed = h.client.simulate_post(
        "/mcp",
        headers={**auth_headers("operator"), **headers("tools/list")},
        json=rpc("tools/list"),
    )
    names = {tool["name"] for tool in listed.json["result"]["tools"]}
    assert "scheduler_acknowledge_stopped" not in names
    assert h.runner.occurrences[occurrence]["state"] == "Unknown"
    assert h.runner.executed == []
