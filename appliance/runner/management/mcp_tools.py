"""The seven management MCP tools: names, descriptions, JSON Schemas, and who may see them.

Arguments are the stdin commands of seeds/001 without ``action``; ``status`` and ``list`` take an
empty object. Schemas are JSON Schema 2020-12 with ``additionalProperties: false`` everywhere, so
an agent reading them learns exactly what the listener accepts (the listener itself validates
with ``commands.check_arguments``, the same gate as HTTP). The acknowledge tool is listed only to
the recovery credential, and its description tells agents never to infer or auto-approve the
attestation (seeds/000, seeds/001 "Authorization matrix").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from appliance.core.definition import (
    CODE_BYTES_MAX,
    CRON_BYTES_MAX,
    DELAY_SECONDS_MAX,
    MAX_RETRIES_MAX,
    NAME_BYTES_MAX,
    TIMEZONE_BYTES_MAX,
)
from appliance.core.limits import Limits
from appliance.runner.management.commands import allowed_actions

_ID: Final = {"type": "integer", "minimum": 1}


def _object(properties: Mapping[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": dict(properties),
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


def definition_schema(limits: Limits) -> dict[str, Any]:
    missed = {
        "oneOf": [
            {"enum": ["Skip", "RunOnce"]},
            _object(
                {
                    "CatchUp": _object(
                        {"cap": {"type": "integer", "minimum": 1, "maximum": limits.outstanding}},
                        ("cap",),
                    )
                },
                ("CatchUp",),
            ),
        ],
        "description": 'missed-run policy: "Skip", "RunOnce" or {"CatchUp": {"cap": N}}',
    }
    # Every policy member is optional (missed Skip, overlap Skip, no retries), as is the policy.
    retry = _object(
        {
            "max_retries": {"type": "integer", "minimum": 0, "maximum": MAX_RETRIES_MAX},
            "delay_seconds": {"type": "integer", "minimum": 0, "maximum": DELAY_SECONDS_MAX},
        },
    )
    policy = _object(
        {
            "missed": missed,
            "overlap": {"enum": ["Skip", "Queue", "Concurrent"]},
            "retry": retry,
        },
    )
    return _object(
        {
            "name": {"type": "string", "description": f"optional, at most {NAME_BYTES_MAX} bytes"},
            "code": {
                "type": "string",
                "description": f"JavaScript source, at most {CODE_BYTES_MAX} UTF-8 bytes",
            },
            "cron": {
                "type": "string",
                "description": f"numeric five-field cron expression, at most {CRON_BYTES_MAX} "
                "bytes (no names, aliases, seconds or L/W/#/?)",
            },
            "timezone": {
                "type": "string",
                "description": f"explicit IANA timezone, at most {TIMEZONE_BYTES_MAX} bytes",
            },
            "policy": policy,
        },
        ("code", "cron", "timezone"),
    )


_ACK_DESCRIPTION: Final = (
    "Recovery only: mark an Unknown or unresolved Cancelling occurrence Abandoned, releasing its "
    "running and overlap reservations, without replay. dispatcher_and_work_quiesced must be true "
    "and may ONLY be set after a human operator has established that the old dispatcher can no "
    "longer submit and that the accepted work has stopped. Agents must never infer, assume or "
    "auto-approve this attestation: ask the human and pass exactly what they attested. It does "
    "not cancel a previously admitted permit and does not undo external effects."
)


def tool_specs(limits: Limits) -> dict[str, dict[str, Any]]:
    """tool name → {action, description, inputSchema}, in documentation order."""
    return {
        "scheduler_status": {
            "action": "status",
            "description": "Status of this voter: node, term, acquired ownership (node, epoch), "
            "commit index, grant expiry and counts. Answers 409 on a voter that is not the "
            "acquired owner, naming the leader it knows.",
            "inputSchema": _object({}),
        },
        "scheduler_list": {
            "action": "list",
            "description": "List schedules and occurrences. This is explicitly a stale local "
            "view of this voter's replica, not a linearizable read.",
            "inputSchema": _object({}),
        },
        "scheduler_create": {
            "action": "create",
            "description": "Create a schedule from a definition (code, cron, timezone, policy). "
            "Creation has no request deduplication: after an uncertain result, inspect "
            "the schedule list before creating again.",
            "inputSchema": _object({"definition": definition_schema(limits)}, ("definition",)),
        },
        "scheduler_disable": {
            "action": "disable",
            "description": "Disable a schedule: stops future calendar selection only; it does "
            "not cancel occurrences already selected.",
            "inputSchema": _object({"id": _ID}, ("id",)),
        },
        "scheduler_cancel": {
            "action": "cancel",
            "description": "Request cancellation of one occurrence. Success means cancellation "
            "intent was recorded (Cancelling); the occurrence is Cancelled only once the engine "
            "confirms the work stopped, and completion may still win.",
            "inputSchema": _object({"occurrence_id": _ID}, ("occurrence_id",)),
        },
        "scheduler_delete": {
            "action": "delete",
            "description": "Delete a schedule definition; its live occurrences still run to a "
            "terminal state.",
            "inputSchema": _object({"id": _ID}, ("id",)),
        },
        "scheduler_acknowledge_stopped": {
            "action": "acknowledge_stopped",
            "description": _ACK_DESCRIPTION,
            # The attestation is not "required" in the schema: a missing or false attestation is
            # an operation failure (isError, status 400), not a malformed call.
            "inputSchema": _object(
                {
                    "occurrence_id": _ID,
                    "dispatcher_and_work_quiesced": {
                        "type": "boolean",
                        "description": "true only when a human attested quiescence; never "
                        "inferred or auto-approved by an agent",
                    },
                },
                ("occurrence_id",),
            ),
        },
    }


# Documented extension (docs/management.md): a read-only local view, mounted only on a live
# voter (with its observability); it never enters the runner loop.
OCCURRENCE_TOOL: Final = "scheduler_occurrence"
OCCURRENCE_TOOL_SPEC: Final = {
    "description": "Extension, read-only: what ran for one occurrence — its state, timeline, a "
    "retry's 'retrying at T (attempt N of M)', and per dispatched attempt the completion value "
    "(JSON), the thrown error's message and stack, console output and timings, fetched from the "
    "worker. With attempt: that attempt's report only. A local view of this voter's replica.",
    "inputSchema": _object({"occurrence_id": _ID, "attempt": _ID}, ("occurrence_id",)),
}


def visible_tools(role: str, limits: Limits, *, extensions: bool = False) -> list[dict[str, Any]]:
    """The tools ``role`` may discover (the recovery tool is omitted for the operator)."""
    allowed = allowed_actions(role)
    tools = [
        {"name": name, "description": spec["description"], "inputSchema": spec["inputSchema"]}
        for name, spec in tool_specs(limits).items()
        if spec["action"] in allowed
    ]
    if extensions and allowed:
        tools.append({"name": OCCURRENCE_TOOL, **OCCURRENCE_TOOL_SPEC})
    return tools
