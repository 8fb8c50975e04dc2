"""The management MCP tools, one per command of the table: names, JSON Schemas, who sees them.

The rows (fields, ids, role, description) are in appliance/commands/table.py. Seven tools
are seeds/001's; ``scheduler_run_now``, ``scheduler_enable``, ``scheduler_update``,
``scheduler_pause``, ``scheduler_resume``, ``scheduler_backfill`` and
``scheduler_backfill_preview`` are a documented extension (SPEC §11, issue 22), listed before the
recovery tool, which stays last.

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

from appliance.commands.table import COMMANDS, CommandSpec
from appliance.core.binding import HEAP_MB_RANGE, TIMEOUT_SECONDS_RANGE
from appliance.core.definition import (
    CODE_BYTES_MAX,
    CRON_BYTES_MAX,
    DELAY_SECONDS_MAX,
    JITTER_SECONDS_MAX,
    MAX_RETRIES_MAX,
    NAME_BYTES_MAX,
    TIMEZONE_BYTES_MAX,
)
from appliance.core.limits import GRACE_SECONDS_MAX, RECORDS_MAX, SCHEDULES_MAX, Limits
from appliance.core.occurrence import INT_MAX
from appliance.core.placement import LABELS_MAX
from appliance.management.commands import allowed_actions

# A label set (appliance/core/placement.py): names and values are short identifiers.
_LABELS: Final = {
    "type": "object",
    "maxProperties": LABELS_MAX,
    "propertyNames": {"pattern": "^[A-Za-z0-9][A-Za-z0-9_./-]{0,62}$"},
    "additionalProperties": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"},
}
_ID: Final = {"type": "integer", "minimum": 1}
# The contract amendments' fields (issue 20; the owner checks the values again).
_AMENDMENT_FIELDS: Final[Mapping[str, dict[str, Any]]] = {
    "expires_at": {
        "type": "string",
        "description": "RFC 3339 instant with an offset, later than now: the new grant expiry",
    },
    "timeout_seconds": {
        "type": "integer",
        "minimum": TIMEOUT_SECONDS_RANGE[0],
        "maximum": TIMEOUT_SECONDS_RANGE[1],
    },
    "heap_mb": {"type": "integer", "minimum": HEAP_MB_RANGE[0], "maximum": HEAP_MB_RANGE[1]},
    "session": {"type": "string", "description": "printable ASCII without spaces, 1-128 bytes"},
    "url": {"type": "string", "description": "the worker origin, http(s)://host[:port]"},
    "worker_id": {"type": "string", "description": "the worker identity claims are bound to"},
    # The fleet's commands (issue 33); the owner checks the values against the fleet in force.
    "labels": dict(_LABELS, description="the worker's labels, matched by placement rules"),
    "bearer_env": {
        "type": "string",
        "description": "optional: the variable (set on every voter) holding the credential the "
        "runner presents to this worker; default remote.bearer_env",
    },
    "admission_bearer_env": {
        "type": "string",
        "description": "optional: the variable (set on every voter) holding this worker's own "
        "admission credential; default the runner's admission_bearer_env",
    },
    "schedules": {"type": "integer", "minimum": 1, "maximum": SCHEDULES_MAX},
    "records": {"type": "integer", "minimum": 1, "maximum": RECORDS_MAX},
    "outstanding": {"type": "integer", "minimum": 1, "maximum": RECORDS_MAX},
    "running": {"type": "integer", "minimum": 1, "maximum": RECORDS_MAX},
    "grace_seconds": {"type": "integer", "minimum": 0, "maximum": GRACE_SECONDS_MAX},
    "base_amendment": {
        "type": "integer",
        "minimum": 0,
        "maximum": INT_MAX,
        "description": "the contract.amendment that status showed; a stale one is refused",
    },
}


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
            "jitter_seconds": {
                "type": "integer",
                "minimum": 0,
                "maximum": JITTER_SECONDS_MAX,
                "description": "optional: each slot starts up to this many seconds late, by a "
                "delay derived from SHA-256 of (schedule id, slot), never at the next slot",
            },
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
            "placement": _object(
                {"labels": _LABELS, "prefer": _LABELS},
            )
            | {
                "description": "optional (issue 33): labels every worker that runs it must have, "
                "and labels to prefer"
            },
        },
        ("code", "cron", "timezone"),
    )


_INSTANT: Final = {
    "type": "string",
    "description": "an RFC 3339 instant with an offset, e.g. 2026-12-01T10:00:00Z",
}
# The fields of the commands beyond seeds/001 (command_args.py checks them).
_EXTENSION_FIELDS: Final[Mapping[str, Mapping[str, Any]]] = {
    "request_id": {
        "type": "string",
        "pattern": "^[A-Za-z0-9._:-]{1,64}$",
        "description": "deduplicates repeats (the newest 64 are remembered)",
    },
    "catch_up": {
        "type": "boolean",
        "description": "apply the schedule's missed policy to the span (default false: no backlog)",
    },
    "name": {"type": ["string", "null"], "description": "the new name; null removes it"},
    "start": _INSTANT,
    "end": _INSTANT,
    "overlap": {
        "enum": ["Skip", "Queue", "Concurrent"],
        "description": "how the backfilled slots are admitted (default Queue): Skip creates "
        "none while the schedule has live work",
    },
}


# The membership commands' fields (issue 20; command_args.check_add_voter checks them).
_MEMBERSHIP_FIELDS: Final[Mapping[str, dict[str, Any]]] = {
    "id": {
        "type": "string",
        "pattern": "^[A-Za-z0-9_-]{1,64}$",
        "description": "the node id, as in its runner config (node_id)",
    },
    "address": {
        "type": "string",
        "description": "the new node's cluster listener host:port (advertise_addr:cluster_port)",
    },
}


def _field_schema(field: str, spec: CommandSpec, limits: Limits) -> dict[str, Any]:
    if spec.membership is not None and field in _MEMBERSHIP_FIELDS:
        return dict(_MEMBERSHIP_FIELDS[field])
    if field in spec.id_fields:
        return dict(_ID)
    if field == "definition":
        return definition_schema(limits)
    if field == "dispatcher_and_work_quiesced":
        return {
            "type": "boolean",
            "description": "true only when a human attested quiescence; never "
            "inferred or auto-approved by an agent",
        }
    if field in _AMENDMENT_FIELDS:
        return dict(_AMENDMENT_FIELDS[field])
    if field in _EXTENSION_FIELDS:
        return dict(_EXTENSION_FIELDS[field])
    if field in ("code", "cron", "timezone", "policy", "placement"):  # update: one of them
        return definition_schema(limits)["properties"][field]
    raise ValueError(f"{spec.action}.{field}: no JSON Schema for this field")


def tool_specs(limits: Limits) -> dict[str, dict[str, Any]]:
    """tool name → {action, description, inputSchema}, in documentation order (one per row of
    appliance/commands/table.py)."""
    tools: dict[str, dict[str, Any]] = {}
    for action, spec in COMMANDS.items():
        properties = {field: _field_schema(field, spec, limits) for field in spec.fields}
        required = tuple(
            f for f in spec.fields if f not in spec.schema_optional and f not in spec.optional
        )
        schema = _object(properties, required)
        if spec.schema_min_properties:
            schema["minProperties"] = spec.schema_min_properties
        tools[f"scheduler_{action}"] = {
            "action": action,
            "description": spec.description,
            "inputSchema": schema,
        }
    return tools


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
