"""The official MCP Python SDK client (mode="2026-07-28" over streamable HTTP) as the test peer.

Against the real listener (waitress on loopback) with the fake runner behind the real queue:
list tools (the recovery tool is absent for the operator credential), create, list, cancel,
acknowledge; protocol errors surface as the SDK's MCPError with JSON-RPC invalid params.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS

from tests.management.conftest import DEFINITION, TOKENS, Live

Session = Callable[[Client], Awaitable[Any]]


def with_client(live: Live, role: str, body: Session, mode: str = "2026-07-28") -> Any:
    async def main() -> Any:
        headers = {"Authorization": f"Bearer {TOKENS[role]}"}
        async with httpx2.AsyncClient(headers=headers, timeout=10.0) as http:
            transport = streamable_http_client(f"{live.base}/mcp", http_client=http)
            with anyio.fail_after(30):
                async with Client(transport, mode=mode) as client:
                    return await body(client)

    return anyio.run(main)


def reply(result) -> dict[str, Any]:
    return json.loads(result.content[0].text)


@pytest.mark.parametrize("mode", ["2026-07-28", "auto"])  # auto: server/discover probe first
def test_operator_lists_tools_without_the_recovery_tool(live: Live, mode: str) -> None:
    async def body(client: Client):
        assert client.protocol_version == "2026-07-28"
        return [tool.name for tool in (await client.list_tools()).tools]

    assert with_client(live, "operator", body, mode) == [
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
    ]
    names = with_client(live, "recovery", body, mode)
    assert names[-1] == "scheduler_acknowledge_stopped" and len(names) == 14


def test_operator_creates_lists_and_cancels(live: Live) -> None:
    async def body(client: Client):
        created = await client.call_tool("scheduler_create", {"definition": DEFINITION})
        occurrence = live.runner.add_occurrence(reply(created)["result"]["id"], "Running")
        listed = await client.call_tool("scheduler_list", {})
        cancelled = await client.call_tool("scheduler_cancel", {"occurrence_id": occurrence})
        refused = await client.call_tool(
            "scheduler_acknowledge_stopped",
            {"occurrence_id": occurrence, "dispatcher_and_work_quiesced": True},
        )
        return created, listed, cancelled, refused, occurrence

    created, listed, cancelled, refused, occurrence = with_client(live, "operator", body)
    assert created.is_error is False and reply(created)["result"] == {"id": 1}
    schedules = reply(listed)["result"]["schedules"]
    assert [s["id"] for s in schedules] == [1]
    assert "code" not in schedules[0]["definition"]
    assert cancelled.is_error is False
    assert "intent was recorded" in reply(cancelled)["meaning"]
    assert refused.is_error is True and reply(refused)["status"] == 403
    assert live.runner.occurrences[occurrence]["state"] == "Cancelling"


def test_recovery_acknowledges_with_explicit_attestation(live: Live) -> None:
    occurrence = live.runner.add_occurrence(1, "Unknown")

    async def body(client: Client):
        missing = await client.call_tool(
            "scheduler_acknowledge_stopped", {"occurrence_id": occurrence}
        )
        done = await client.call_tool(
            "scheduler_acknowledge_stopped",
            {"occurrence_id": occurrence, "dispatcher_and_work_quiesced": True},
        )
        return missing, done

    missing, done = with_client(live, "recovery", body)
    assert missing.is_error is True and reply(missing)["status"] == 400
    assert done.is_error is False
    assert live.runner.occurrences[occurrence]["state"] == "Abandoned"


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("scheduler_retry", {"id": 1}),
        ("scheduler_update", {"id": 1}),  # a known tool, but no field to change
        ("scheduler_disable", {"id": 1, "force": True}),
    ],
)
def test_unknown_tools_and_fields_raise_invalid_params_in_the_sdk(
    live: Live, name: str, arguments: dict[str, Any]
) -> None:
    async def body(client: Client):
        with pytest.raises(MCPError) as raised:
            await client.call_tool(name, arguments)
        return raised.value.code

    assert with_client(live, "operator", body) == INVALID_PARAMS
    assert live.runner.executed == []


def test_the_extension_tools_are_called_like_the_others(live: Live) -> None:
    async def body(client: Client):
        created = await client.call_tool("scheduler_create", {"definition": DEFINITION})
        sid = reply(created)["result"]["id"]
        ran = await client.call_tool("scheduler_run_now", {"id": sid, "request_id": "r-1"})
        paused = await client.call_tool("scheduler_pause", {})
        with pytest.raises(MCPError) as malformed:
            await client.call_tool("scheduler_backfill", {"id": sid, "start": 5, "end": 6})
        return ran, paused, malformed.value.code

    ran, paused, malformed = with_client(live, "operator", body)
    assert ran.is_error is False and reply(ran)["action"] == "run_now"
    assert "repeated request_id" in reply(ran)["meaning"]
    assert paused.is_error is False and reply(paused)["result"]["paused"] is True
    assert malformed == INVALID_PARAMS
    assert [c["action"] for c in live.runner.executed] == ["create", "run_now", "pause"]
