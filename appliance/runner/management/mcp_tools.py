"""The management MCP tools: names, descriptions, JSON Schemas, and who may see them.

Seven tools are seeds/001's; ``scheduler_run_now``, ``scheduler_enable``, ``scheduler_update``,
``scheduler_pause``, ``scheduler_resume``, ``scheduler_backfill`` and
``scheduler_backfill_preview`` are a documented extension (SPEC §11, issue 22), listed between
``scheduler_delete`` and the recovery tool, which stays last.

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
    JITTER_SECONDS_MAX,
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
    retry = _object(
        {
            "max_retries": {"type": "integer", "minimum": 0, "maximum": MAX_RETRIES_MAX},
            "delay_seconds": {"type": "integer", "minimum": 0, "maximum": DELAY_SECONDS_MAX},
        },
        ("max_retries", "delay_seconds"),
    )
    policy = _object(
        {
            "missed": missed,
            "overlap": {"enum": ["Skip", "Queue", "Concurrent"]},
            "retry": retry,
            "jitter_seconds": {
                "type": "integer",
                "minimum": 0,
                "maximum": JITTER_SECONDS_MAX,
                "description": "optional: each slot starts up to this many seconds late, by a "
                "delay derived from SHA-256 of (schedule id, slot), never at the next slot",
            },
        },
        ("missed", "overlap", "retry"),
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
        ("code", "cron", "timezone", "policy"),
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
        **_extension_tools(limits),
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


_INSTANT: Final = {
    "type": "string",
    "description": "an RFC 3339 instant with an offset, e.g. 2026-12-01T10:00:00Z",
}
_CATCH_UP: Final = {
    "type": "boolean",
    "description": "apply the schedule's missed policy to the span (default false: no backlog)",
}
_BACKFILL: Final = {
    "id": _ID,
    "start": _INSTANT,
    "end": _INSTANT,
    "overlap": {
        "enum": ["Skip", "Queue", "Concurrent"],
        "description": "how the backfilled slots are admitted (default Queue): Skip creates "
        "none while the schedule has live work",
    },
}


def _extension_tools(limits: Limits) -> dict[str, dict[str, Any]]:
    """The commands beyond seeds/001 (docs/policies.md, "Operator commands")."""
    definition = definition_schema(limits)["properties"]
    return {
        "scheduler_run_now": {
            "action": "run_now",
            "description": "Run a schedule once now (even if disabled), through its overlap "
            "policy and the running limit. Pass a request_id: after an uncertain result, "
            "repeating the call with the same request_id is safe and returns the first answer.",
            "inputSchema": _object(
                {
                    "id": _ID,
                    "request_id": {
                        "type": "string",
                        "pattern": "^[A-Za-z0-9._:-]{1,64}$",
                        "description": "deduplicates repeats (the newest 64 are remembered)",
                    },
                },
                ("id",),
            ),
        },
        "scheduler_enable": {
            "action": "enable",
            "description": "Enable a disabled schedule. It resumes from now without a backlog "
            "unless catch_up is true.",
            "inputSchema": _object({"id": _ID, "catch_up": _CATCH_UP}, ("id",)),
        },
        "scheduler_update": {
            "action": "update",
            "description": "Change a schedule's name, code, cron, timezone or policy (policy is "
            "replaced whole). Future occurrences use the new definition; live ones keep the "
            "code they were created with. Give at least one field.",
            "inputSchema": _object(
                {
                    "id": _ID,
                    "name": {"type": ["string", "null"], "description": "null removes it"},
                    "code": definition["code"],
                    "cron": definition["cron"],
                    "timezone": definition["timezone"],
                    "policy": definition["policy"],
                },
                ("id",),
            )
            | {"minProperties": 2},
        },
        "scheduler_pause": {
            "action": "pause",
            "description": "Pause all scheduling cluster-wide (a maintenance switch): nothing "
            "is selected or started; running work continues and can be cancelled.",
            "inputSchema": _object({}),
        },
        "scheduler_resume": {
            "action": "resume",
            "description": "Resume scheduling. The paused span is skipped (counted missed) "
            "unless catch_up is true.",
            "inputSchema": _object({"catch_up": _CATCH_UP}),
        },
        "scheduler_backfill": {
            "action": "backfill",
            "description": "Create occurrences for the schedule's past calendar slots in "
            "[start, end] that have no retained occurrence (at most 512 slots; all or none "
            "within the outstanding limit). Preview first with scheduler_backfill_preview.",
            "inputSchema": _object(_BACKFILL, ("id", "start", "end")),
        },
        "scheduler_backfill_preview": {
            "action": "backfill_preview",
            "description": "What scheduler_backfill would create now, without creating it.",
            "inputSchema": _object(_BACKFILL, ("id", "start", "end")),
        },
    }


def visible_tools(role: str, limits: Limits) -> list[dict[str, Any]]:
    """The tools ``role`` may discover (the recovery tool is omitted for the operator)."""
    allowed = allowed_actions(role)
    return [
        {"name": name, "description": spec["description"], "inputSchema": spec["inputSchema"]}
        for name, spec in tool_specs(limits).items()
        if spec["action"] in allowed
    ]
