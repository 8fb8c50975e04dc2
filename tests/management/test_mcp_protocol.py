"""MCP 2026-07-28 on POST /mcp, spoken raw: the sessionless ladder and the tool contract.

Sessionless: no initialize, no session id; each request carries ``_meta`` with its protocol
version and capabilities, the ``MCP-Protocol-Version`` header, ``Mcp-Method`` on every request and
``Mcp-Name`` on tools/call, validated against the body (HEADER_MISMATCH, HTTP 400).
"""

from __future__ import annotations

import json

import pytest
from mcp_types.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)

from tests.management.conftest import DEFINITION, Harness, bearer
from tests.management.mcp_raw import META, VERSION, call, headers, rpc


def mcp(h: Harness, document, extra: dict[str, str], role: str = "operator"):
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return h.client.simulate_post("/mcp", headers={**bearer(role), **extra}, body=body)


def error_code(result) -> int:
    return result.json["error"]["code"]


def test_a_legacy_initialize_gets_unsupported_version_listing_2026_07_28(harness: Harness) -> None:
    legacy = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "legacy", "version": "1"},
        },
    }
    result = mcp(harness, legacy, {"Accept": "application/json, text/event-stream"})
    assert result.status_code == 400
    assert error_code(result) == UNSUPPORTED_PROTOCOL_VERSION
    assert result.json["error"]["data"] == {"supported": [VERSION], "requested": "2025-11-25"}
    assert result.json["id"] == 0
    assert "mcp-session-id" not in result.headers


def test_no_session_is_needed_and_none_is_issued(harness: Harness) -> None:
    result = mcp(harness, rpc("tools/list"), headers("tools/list"))
    assert result.status_code == 200
    assert "mcp-session-id" not in result.headers
    assert result.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize(
    ("document", "extra", "why"),
    [
        (rpc("tools/list"), {"MCP-Protocol-Version": VERSION}, "Mcp-Method missing"),
        (rpc("tools/list"), {**headers("tools/list"), "Mcp-Method": "tools/call"}, "mismatch"),
        (rpc("tools/list"), {"Mcp-Method": "tools/list"}, "version header missing"),
        (
            rpc("tools/list"),
            {**headers("tools/list"), "MCP-Protocol-Version": "2025-11-25"},
            "version header differs from _meta",
        ),
        (call("scheduler_list", {})[0], headers("tools/call"), "Mcp-Name missing"),
        (
            call("scheduler_list", {})[0],
            headers("tools/call", "scheduler_status"),
            "Mcp-Name differs",
        ),
    ],
)
def test_missing_or_mismatched_routing_headers_are_header_mismatch(
    harness: Harness, document, extra, why
) -> None:
    result = mcp(harness, document, extra)
    assert result.status_code == 400, why
    assert error_code(result) == HEADER_MISMATCH, why
    assert result.json["id"] == 1
    assert harness.runner.executed == []


def test_meta_envelope_is_required_per_request(harness: Harness) -> None:
    document = {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}}
    result = mcp(harness, document, headers("tools/list"))
    assert result.status_code == 400
    assert error_code(result) == INVALID_PARAMS
    partial = rpc("tools/list")
    del partial["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert error_code(mcp(harness, partial, headers("tools/list"))) == INVALID_PARAMS


def test_an_unserved_version_is_unsupported(harness: Harness) -> None:
    document = rpc("tools/list")
    document["params"]["_meta"] = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    result = mcp(harness, document, {**headers("tools/list"), "MCP-Protocol-Version": "2099-01-01"})
    assert result.status_code == 400
    assert error_code(result) == UNSUPPORTED_PROTOCOL_VERSION
    assert result.json["error"]["data"]["supported"] == [VERSION]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{", PARSE_ERROR),
        (b"[]", INVALID_REQUEST),
        (b'{"jsonrpc":"1.0","id":1,"method":"x"}', INVALID_REQUEST),
    ],
)
def test_malformed_bodies_are_jsonrpc_errors_with_null_id(harness: Harness, body, code) -> None:
    result = mcp(harness, body, headers("tools/list"))
    assert result.status_code == 400
    assert error_code(result) == code
    assert result.json["id"] is None


def test_unknown_methods_are_method_not_found(harness: Harness) -> None:
    result = mcp(harness, rpc("prompts/list"), headers("prompts/list"))
    assert result.status_code == 404
    assert error_code(result) == METHOD_NOT_FOUND


def test_notifications_are_acknowledged_and_dropped(harness: Harness) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    result = mcp(harness, note, {"MCP-Protocol-Version": VERSION})
    assert result.status_code == 202
    assert result.content == b""


def test_discover_advertises_only_2026_07_28_and_tools(harness: Harness) -> None:
    result = mcp(harness, rpc("server/discover"), headers("server/discover"))
    payload = result.json["result"]
    assert payload["supportedVersions"] == [VERSION]
    assert payload["capabilities"] == {"tools": {}}
    assert payload["resultType"] == "complete"


def test_tools_list_is_private_and_credential_dependent(harness: Harness) -> None:
    listed = {}
    for role in ("operator", "recovery"):
        result = mcp(harness, rpc("tools/list"), headers("tools/list"), role=role)
        assert result.json["result"]["cacheScope"] == "private"
        listed[role] = {tool["name"]: tool for tool in result.json["result"]["tools"]}
    assert set(listed["recovery"]) - set(listed["operator"]) == {"scheduler_acknowledge_stopped"}
    assert list(listed["recovery"]) == [
        "scheduler_status",
        "scheduler_list",
        "scheduler_create",
        "scheduler_disable",
        "scheduler_cancel",
        "scheduler_delete",
        "scheduler_run_now",
        "scheduler_enable",
        "scheduler_update",
        "scheduler_pause",
        "scheduler_resume",
        "scheduler_backfill",
        "scheduler_backfill_preview",
        "scheduler_acknowledge_stopped",
    ]
    for tool in listed["recovery"].values():
        assert tool["inputSchema"]["type"] == "object"
        assert tool["inputSchema"]["additionalProperties"] is False
    ack = listed["recovery"]["scheduler_acknowledge_stopped"]["description"]
    assert "never infer" in ack and "auto-approve" in ack


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("scheduler_update", {"id": 1}),
        ("scheduler_retry", {}),
        ("scheduler_status", {"verbose": True}),
        ("scheduler_disable", {}),
        ("scheduler_disable", {"id": "1"}),
        ("scheduler_cancel", {"occurrence_id": 0}),
        ("scheduler_create", {"definition": "nope"}),
        ("scheduler_create", {"definition": DEFINITION, "action": "create"}),
        ("scheduler_acknowledge_stopped", {"occurrence_id": 1, "extra": 1}),
    ],
)
def test_unknown_tools_and_fields_are_jsonrpc_invalid_params(
    harness: Harness, name: str, arguments
) -> None:
    document, extra = call(name, arguments)
    result = mcp(harness, document, extra, role="recovery")
    assert result.status_code == 400
    assert error_code(result) == INVALID_PARAMS
    assert harness.runner.executed == []


def tool_error(result) -> dict:
    payload = result.json["result"]
    assert payload["isError"] is True
    text = json.loads(payload["content"][0]["text"])
    assert payload["structuredContent"] == text
    return text


def test_operation_failures_are_is_error_with_the_safe_json_and_numeric_status(
    harness: Harness,
) -> None:
    ack = {"occurrence_id": 1, "dispatcher_and_work_quiesced": True}
    assert tool_error(mcp(harness, *call("scheduler_acknowledge_stopped", ack)))["status"] == 403
    no_attest = {"occurrence_id": 1}
    text = tool_error(mcp(harness, *call("scheduler_acknowledge_stopped", no_attest), "recovery"))
    assert text["status"] == 400 and text["error"]["code"] == "attestation_required"
    false_attest = {"occurrence_id": 1, "dispatcher_and_work_quiesced": False}
    text = tool_error(
        mcp(harness, *call("scheduler_acknowledge_stopped", false_attest), "recovery")
    )
    assert text["status"] == 400
    bad_cron = {"definition": {**DEFINITION, "cron": "@daily"}}
    text = tool_error(mcp(harness, *call("scheduler_create", bad_cron)))
    assert text["status"] == 400 and text["error"]["field"] == "definition.cron"
    harness.runner.owner = False
    text = tool_error(mcp(harness, *call("scheduler_status", {})))
    assert text["status"] == 409
    harness.runner.owner = True
    harness.runner.fail_next = RuntimeError("/var/lib/secret exploded")
    text = tool_error(mcp(harness, *call("scheduler_disable", {"id": 1})))
    assert text == {
        **text,
        "status": 503,
        "outcome": "uncertain",
        "retry_safe": False,
    }
    assert "secret" not in json.dumps(text)


def test_successful_tool_calls_carry_the_reply_and_its_meaning(harness: Harness) -> None:
    created = mcp(harness, *call("scheduler_create", {"definition": DEFINITION}))
    assert created.json["result"]["isError"] is False
    assert json.loads(created.json["result"]["content"][0]["text"])["result"] == {"id": 1}
    occurrence = harness.runner.add_occurrence(1, "Running")
    cancelled = mcp(harness, *call("scheduler_cancel", {"occurrence_id": occurrence}))
    body = cancelled.json["result"]["structuredContent"]
    assert "intent was recorded" in body["meaning"]
    assert harness.runner.occurrences[occurrence]["state"] == "Cancelling"


def test_mcp_name_may_use_the_base64_sentinel_and_a_corrupt_one_never_matches(
    harness: Harness,
) -> None:
    import base64

    document, extra = call("scheduler_status", {})
    encoded = base64.b64encode(b"scheduler_status").decode()
    ok = mcp(harness, document, {**extra, "Mcp-Name": f"=?base64?{encoded}?="})
    assert ok.status_code == 200 and ok.json["result"]["isError"] is False
    bad = mcp(harness, document, {**extra, "Mcp-Name": "=?base64?!!!?="})
    assert bad.status_code == 400 and error_code(bad) == HEADER_MISMATCH
