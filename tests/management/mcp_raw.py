"""Helpers to speak raw MCP 2026-07-28 JSON-RPC to the listener (headers and _meta by hand)."""

from __future__ import annotations

from typing import Any

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def rpc(method: str, params: dict[str, Any] | None = None, request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {"_meta": dict(META), **(params or {})},
    }


def headers(method: str, name: str | None = None) -> dict[str, str]:
    out = {
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
        "Accept": "application/json, text/event-stream",
    }
    if name is not None:
        out["Mcp-Name"] = name
    return out


def call(name: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    return rpc("tools/call", {"name": name, "arguments": arguments}), headers("tools/call", name)
