"""The OpenAPI 3.1 document of the management HTTP routes (docs/openapi.json; served nowhere).

Generated from the same tables the listener uses (command fields, tool schemas, limits), so the
document cannot drift from the code: a test compares docs/openapi.json with ``openapi_document``.
Regenerate with ``python -m appliance.management.openapi > docs/openapi.json``.
"""

from __future__ import annotations

import json
from typing import Any

from appliance.core.limits import Limits
from appliance.management.app import (
    COMMANDS_PATH,
    EVENTS_PATH,
    HEALTH_PATH,
    HISTORY_PATH,
    MCP_PATH,
    METRICS_PATH,
    OCCURRENCE_PATH,
    OUTPUT_PATH,
    REQUEST_BYTES_MAX,
    SCHEDULE_PATH,
    SCHEDULES_PATH,
    STATUS_PATH,
)
from appliance.management.mcp_tools import tool_specs
from appliance.protocol.v1 import ID_MAX

_REF = "#/components/schemas/"
_ERR = "#/components/responses/"


def _command_schemas(limits: Limits) -> list[dict[str, Any]]:
    variants = []
    for spec in tool_specs(limits).values():
        schema = json.loads(json.dumps(spec["inputSchema"]))
        schema["properties"] = {"action": {"const": spec["action"]}, **schema["properties"]}
        schema["required"] = ["action", *schema.get("required", [])]
        if spec["action"] == "acknowledge_stopped":
            schema["required"].append("dispatcher_and_work_quiesced")
        variants.append(schema)
    return variants


def _error_response(description: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"$ref": _REF + "Error"}
    if extra:
        schema = {"allOf": [schema, {"type": "object", "properties": extra}]}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _id_parameter(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "integer", "minimum": 1, "maximum": ID_MAX},
    }


def _view(schema: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF + schema}}},
    }


def _extension_paths() -> dict[str, Any]:
    """The operability extensions (docs/operations.md): read-only local views, never queued."""
    errors = {
        "401": {"$ref": _ERR + "Unauthorized"},
        "403": {"$ref": _ERR + "Forbidden"},
    }
    by_id = {**errors, "400": _error_response("the path id is not a positive integer")}
    return {
        METRICS_PATH: {
            "get": {
                "operationId": "metrics",
                "summary": "extension: Prometheus metrics of this voter (text exposition)",
                "responses": {
                    "200": {
                        "description": "Prometheus text exposition format 0.0.4",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **errors,
                },
            }
        },
        HEALTH_PATH: {
            "get": {
                "operationId": "health",
                "summary": "extension: voters, owner and epoch, worker, grant, warnings "
                "(this voter's view)",
                "responses": {"200": _view("Health", "the health view"), **errors},
            }
        },
        OCCURRENCE_PATH: {
            "get": {
                "operationId": "occurrence",
                "summary": "extension: one occurrence's detail (due time, timeline, attempt, "
                "execution id, failure reason, a retry's note) with each dispatched attempt's "
                "report fetched from the worker (the newest 5); a local view",
                "parameters": [_id_parameter("occurrence_id")],
                "responses": {
                    "200": _view("OccurrenceDetail", "the retained record"),
                    "404": _error_response("no retained occurrence with this id"),
                    **by_id,
                },
            }
        },
        OUTPUT_PATH: {
            "get": {
                "operationId": "occurrence_output",
                "summary": "extension: what one attempt did — completion value (JSON, at most "
                "16 KiB), the thrown error's message and stack (at most 8 KiB), console output "
                "(at most 64 KiB), timings — fetched from the worker; the latest dispatched "
                "attempt unless ?attempt=N",
                "parameters": [
                    _id_parameter("occurrence_id"),
                    {
                        "name": "attempt",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1},
                    },
                ],
                "responses": {
                    "200": _view("Output", "the attempt as the worker holds it"),
                    "404": _error_response("no such occurrence or attempt, or never dispatched"),
                    "502": _error_response("the worker did not return the execution"),
                    **by_id,
                },
            }
        },
        SCHEDULE_PATH: {
            "get": {
                "operationId": "describe_schedule",
                "summary": "extension (issue 35): one schedule whole — its definition WITH the "
                "code, enabled, paused, next runs with their jittered start (held while paused), "
                "newest outcomes, live occurrences, counters, changes; a local view",
                "parameters": [_id_parameter("schedule_id")],
                "responses": {
                    "200": _view("Describe", "the schedule"),
                    "404": _error_response("no schedule with this id (no_such_schedule)"),
                    **by_id,
                },
            }
        },
        EVENTS_PATH: {
            "get": {
                "operationId": "events",
                "summary": "extension (issue 35): the committed changes this voter applied after "
                "the cursor `after` (a Raft index; leave it out to get the current cursor only), "
                "waiting up to `wait_ms` (at most 25,000) for one; with `occurrence_id` the "
                "occurrence as it is now, and with `output=true` its latest attempt's report so "
                "far (fetched from the worker). Serves `admin watch`, `admin output --follow` and "
                "the web console's live view; a local view any voter answers",
                "parameters": _events_parameters(),
                "responses": {
                    "200": _view("Events", "the changes after the cursor"),
                    "400": _error_response("a malformed query (invalid_query, naming it)"),
                    "404": _error_response("no such occurrence (no_such_occurrence)"),
                },
            }
        },
        HISTORY_PATH: {
            "get": {
                "operationId": "schedule_history",
                "summary": "extension: a schedule's drop counters, recent drop reasons and "
                "retained occurrences with their timelines; a local view",
                "parameters": [_id_parameter("schedule_id")],
                "responses": {
                    "200": _view("History", "the schedule's history"),
                    "404": _error_response("no schedule with this id"),
                    **by_id,
                },
            }
        },
    }


_OBJECT: dict[str, Any] = {"type": "object"}
_INSTANT: dict[str, Any] = {"type": ["string", "null"], "format": "date-time"}


def _events_parameters() -> list[dict[str, Any]]:
    def query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
        return {
            "name": name,
            "in": "query",
            "required": False,
            "schema": schema,
            "description": description,
        }

    return [
        query("after", {"type": "integer", "minimum": 0}, "the cursor of the last reply"),
        query("wait_ms", {"type": "integer", "minimum": 0, "maximum": 25_000}, "long poll"),
        query("schedule_id", {"type": "integer", "minimum": 1, "maximum": ID_MAX}, "filter"),
        query("occurrence_id", {"type": "integer", "minimum": 1, "maximum": ID_MAX}, "filter"),
        query("output", {"type": "boolean"}, "with occurrence_id: its attempt's report so far"),
    ]


_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["kind", "index"],
    "properties": {
        "kind": {"enum": ["occurrence", "schedule", "pause", "owner"]},
        "index": {"type": "integer", "description": "the Raft index of the entry (the cursor)"},
        "at": {"type": "string", "format": "date-time"},
        "occurrence_id": {"type": "integer"},
        "schedule_id": {"type": "integer"},
        "state": {"type": "string", "description": "occurrence: the state it moved to"},
        "previous": {"type": ["string", "null"], "description": "occurrence: null when new"},
        "attempt": {"type": "integer"},
        "due": {"type": "string", "format": "date-time"},
        "reason": {"type": "string"},
        "failure_reason": {"type": "string"},
        "not_before": {"type": "string", "format": "date-time"},
        "change": {
            "enum": [
                "created",
                "updated",
                "deleted",
                "enabled",
                "disabled",
                "paused",
                "resumed",
                "acquired",
            ]
        },
        "node": {"type": "string", "description": "owner: the voter that acquired ownership"},
        "term": {"type": "integer"},
        "epoch": {"type": "integer", "description": "owner: the ownership epoch it acquired"},
        "name": {"type": ["string", "null"]},
        "fields": {"type": "array", "items": {"type": "string"}},
        "resync": {"const": True, "description": "a snapshot install: the difference at once"},
    },
}


def _extension_schemas() -> dict[str, Any]:
    timeline = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "state": {"type": "string"},
                "at": _INSTANT,
                "attempt": {"type": "integer"},
                "reason": {"type": "string"},
            },
        },
    }
    occurrence = {
        "type": "object",
        "required": ["id", "schedule_id", "state", "due", "attempt", "timeline"],
        "properties": {
            "id": {"type": "integer"},
            "schedule_id": {"type": "integer"},
            "state": {"type": "string"},
            "due": {"type": "integer", "description": "Unix seconds"},
            "due_at": _INSTANT,
            "attempt": {"type": "integer"},
            "retries_used": {"type": "integer"},
            "not_before_at": _INSTANT,
            "execution_id": {"type": ["string", "null"]},
            "failure_reason": {"type": ["string", "null"]},
            "timeline": timeline,
            "schedule_name": {"type": ["string", "null"]},
            "schedule_deleted": {"type": "boolean"},
        },
    }
    return {
        "Events": {
            "type": "object",
            "required": ["ok", "cursor", "first_cursor", "gap", "more", "events"],
            "properties": {
                "ok": {"const": True},
                "local_view": {"const": True},
                "node": {"type": "string"},
                "cursor": {"type": "integer", "description": "pass it as `after` next time"},
                "first_cursor": {
                    "type": "integer",
                    "description": "the oldest `after` answered without a gap (4,096 events kept)",
                },
                "gap": {"type": "boolean", "description": "changes after `after` were dropped"},
                "more": {"type": "boolean", "description": "512 events cut the page: ask again"},
                "events": {"type": "array", "items": _EVENT},
                "wait_refused": {"type": "string", "description": "4 requests were waiting"},
                "occurrence": {"type": ["object", "null"]},
                "output": {
                    "oneOf": [{"$ref": _REF + "Output"}, {"type": "null"}],
                    "description": "with output=true: as GET .../output (output so far while "
                    "running, when the worker reports it)",
                },
                "output_unavailable": _OBJECT,
            },
        },
        "Describe": {
            "type": "object",
            "required": ["ok", "schedule", "next_runs", "last_outcomes", "live"],
            "properties": {
                "ok": {"const": True},
                "local_view": {"const": True},
                "now": _INSTANT,
                "schedule": _OBJECT,
                "paused": {"type": ["object", "null"]},
                "next_runs": {"type": "array", "items": _OBJECT},
                "next_runs_held": {"type": "boolean"},
                "last_outcomes": {"type": "array", "items": occurrence},
                "live": {"type": "array", "items": occurrence},
                "counts": _OBJECT,
                "cursor_at": _INSTANT,
                "dropped": _OBJECT,
                "recent_drops": {"type": "array", "items": _OBJECT},
            },
        },
        "Health": {
            "type": "object",
            "required": ["ok", "node", "voters", "ownership", "grant", "warnings"],
            "properties": {
                "ok": {"const": True},
                "local_view": {"const": True},
                "node": {"type": "string"},
                "leader": {"type": ["string", "null"]},
                "voters": {"type": "array", "items": _OBJECT},
                "ownership": _OBJECT,
                "grant": _OBJECT,
                "checkpoint": _OBJECT,
                "counts": _OBJECT,
                "unknown_occurrences": {"type": "array", "items": {"type": "integer"}},
                "worker": {"type": ["object", "null"]},
                "warnings": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                    },
                },
            },
        },
        "OccurrenceDetail": {
            "type": "object",
            "required": ["ok", "occurrence"],
            "properties": {
                "ok": {"const": True},
                "local_view": {"const": True},
                "occurrence": occurrence,
            },
        },
        "History": {
            "type": "object",
            "required": ["ok", "schedule", "dropped", "recent_drops", "occurrences"],
            "properties": {
                "ok": {"const": True},
                "local_view": {"const": True},
                "schedule": _OBJECT,
                "cursor_at": _INSTANT,
                "dropped": {
                    "type": "object",
                    "properties": {
                        "missed": {"type": "integer"},
                        "overlap": {"type": "integer"},
                        "capacity": {"type": "integer"},
                    },
                },
                "recent_drops": {"type": "array", "items": _OBJECT},
                "counts": _OBJECT,
                "occurrences": {"type": "array", "items": occurrence},
            },
        },
        "Output": {
            "type": "object",
            "required": ["ok", "occurrence_id", "attempt", "execution_id", "status", "output"],
            "properties": {
                "ok": {"const": True},
                "occurrence_id": {"type": "integer"},
                "attempt": {"type": "integer"},
                "execution_id": {"type": "string"},
                "status": {"type": "string"},
                "reason": {"type": ["string", "null"]},
                "note": {"type": ["string", "null"]},
                "value": {
                    "type": ["object", "null"],
                    "description": "completed runs: the completion value as JSON text",
                    "properties": {"json": {"type": "string"}, "truncated": {"type": "boolean"}},
                },
                "error": {
                    "type": ["object", "null"],
                    "properties": {
                        "message": {"type": "string"},
                        "stack": {"type": ["string", "null"]},
                        "stack_truncated": {"type": "boolean"},
                    },
                },
                "started_at": _INSTANT,
                "finished_at": _INSTANT,
                "duration_ms": {"type": ["integer", "null"]},
                "output": {
                    "type": "object",
                    "properties": {
                        "text": {"type": "string"},
                        "bytes": {"type": "integer"},
                        "truncated": {"type": "boolean"},
                    },
                },
                "egress": {
                    "type": ["object", "null"],
                    "description": "each request the script made through fetch() (issue 32; "
                    "docs/protocol.md, 'Egress records'); null when the worker has no egress",
                    "properties": {
                        "requests": {"type": "array", "items": _OBJECT},
                        "over_limit": {"type": "integer"},
                        "records_dropped": {"type": "integer"},
                    },
                },
            },
        },
    }


def openapi_document(limits: Limits | None = None) -> dict[str, Any]:
    limits = limits or Limits()
    read_responses = {
        "200": {"$ref": _ERR + "Ok"},
        "401": {"$ref": _ERR + "Unauthorized"},
        "403": {"$ref": _ERR + "Forbidden"},
        "409": {"$ref": _ERR + "NotOwner"},
        "413": {"$ref": _ERR + "TooLarge"},
        "503": {"$ref": _ERR + "Unavailable"},
    }
    mcp_headers = [
        {
            "name": "MCP-Protocol-Version",
            "in": "header",
            "required": True,
            "schema": {"type": "string", "enum": ["2026-07-28"]},
        },
        {
            "name": "Mcp-Method",
            "in": "header",
            "required": True,
            "schema": {"type": "string", "enum": ["server/discover", "tools/list", "tools/call"]},
        },
        {
            "name": "Mcp-Name",
            "in": "header",
            "required": False,
            "description": "required on tools/call: the tool name",
            "schema": {"type": "string", "enum": list(tool_specs(limits))},
        },
    ]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "appliance management listener",
            "version": "1",
            "description": "Loopback-only operator listener (SPEC §8). Every request needs a "
            "bearer (operator or recovery credential), checked before the body is read; any "
            f"Origin header is refused (403); requests are capped at {REQUEST_BYTES_MAX} bytes "
            "of serialized JSON (413). See docs/management.md.",
        },
        "servers": [{"url": "http://127.0.0.1:4601"}],
        "security": [{"bearer": []}],
        "paths": {
            STATUS_PATH: {
                "get": {
                    "operationId": "status",
                    "summary": "the status command: node, term, acquired ownership, counts",
                    "responses": read_responses,
                }
            },
            SCHEDULES_PATH: {
                "get": {
                    "operationId": "list",
                    "summary": "the list command: explicitly a stale local view",
                    "responses": read_responses,
                }
            },
            COMMANDS_PATH: {
                "post": {
                    "operationId": "command",
                    "summary": "one tagged command (the stdin document of seeds/001)",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": {"$ref": _REF + "Command"}}},
                    },
                    "responses": {
                        **read_responses,
                        "400": {"$ref": _ERR + "BadRequest"},
                        "404": {"$ref": _ERR + "NoSuchId"},
                        "422": {"$ref": _ERR + "StateForbids"},
                    },
                }
            },
            MCP_PATH: {
                "post": {
                    "operationId": "mcp",
                    "summary": "sessionless MCP 2026-07-28: discover, tools/list, tools/call",
                    "parameters": mcp_headers,
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"$ref": _REF + "JsonRpcRequest"}}
                        },
                    },
                    "responses": {
                        "200": {
                            "description": "JSON-RPC result (tool failures: isError true)",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        "202": {"description": "notification acknowledged and dropped"},
                        "400": {
                            "description": "JSON-RPC error: parse error, invalid request, "
                            "invalid params, header mismatch, unsupported protocol version",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        "401": {"$ref": _ERR + "Unauthorized"},
                        "403": {"$ref": _ERR + "Forbidden"},
                        "404": {
                            "description": "JSON-RPC method not found",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        "413": {"$ref": _ERR + "TooLarge"},
                    },
                }
            },
            **_extension_paths(),
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Command": {"oneOf": _command_schemas(limits)},
                **_extension_schemas(),
                "JsonRpcRequest": {
                    "type": "object",
                    "required": ["jsonrpc", "method"],
                    "properties": {
                        "jsonrpc": {"const": "2.0"},
                        "id": {"type": ["integer", "string"]},
                        "method": {"type": "string"},
                        "params": {"type": "object"},
                    },
                },
                "Ok": {
                    "type": "object",
                    "required": ["ok", "action", "meaning", "result"],
                    "properties": {
                        "ok": {"const": True},
                        "action": {"type": "string"},
                        "meaning": {
                            "type": "string",
                            "description": "what success proves (e.g. cancel: intent "
                            "recorded only)",
                        },
                        "result": {
                            "type": "object",
                            "description": "the runner's reply, "
                            "redacted (source as code_bytes/code_sha256, no paths)",
                        },
                    },
                },
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "ok": {"const": False},
                        "status": {"type": "integer"},
                        "accepted": {"const": False},
                        "outcome": {"const": "uncertain"},
                        "retry_safe": {"const": False},
                        "leader_hint": {"type": "string"},
                        "leader_host": {
                            "type": "string",
                            "description": "the owner's advertise host (409 only)",
                        },
                        "owner_management_addr": {
                            "type": "string",
                            "description": "the owner's management listener as --addr takes "
                            "it, as the owner reports it on its Raft status (409 only)",
                        },
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {
                                "code": {"type": "string"},
                                "message": {"type": "string"},
                                "field": {"type": "string"},
                                "problems": {
                                    "type": "array",
                                    "description": "every problem of an invalid definition",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "field": {"type": "string"},
                                            "message": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
            "responses": {
                "Ok": {
                    "description": "success; `meaning` says what it proves",
                    "content": {"application/json": {"schema": {"$ref": _REF + "Ok"}}},
                },
                "BadRequest": _error_response(
                    "malformed command (error.field names it) or missing/false attestation; "
                    "nothing changed"
                ),
                "NoSuchId": _error_response(
                    "definite refusal: no such schedule (no_such_schedule) or occurrence "
                    "(no_such_occurrence); the message is the core's reason; nothing changed"
                ),
                "StateForbids": _error_response(
                    "definite refusal: the occurrence's state or a limit forbids the command "
                    "(not_allowed_in_state, schedule_limit, checkpoint_full, refused); the "
                    "message is the core's reason; nothing changed"
                ),
                "Unauthorized": _error_response("missing or invalid management bearer"),
                "Forbidden": _error_response(
                    "insufficient recovery authority, or an Origin header"
                ),
                "NotOwner": _error_response("no acquired owner; command not accepted"),
                "TooLarge": _error_response("request body exceeds the transport limit"),
                "Unavailable": _error_response(
                    "queue full (accepted: false), a read the runner could not answer, or a "
                    "mutation whose outcome is truly unknown (outcome: uncertain, retry_safe: "
                    "false)"
                ),
            },
        },
    }


if __name__ == "__main__":
    print(json.dumps(openapi_document(), indent=2, ensure_ascii=False))
