"""The operator command table: every command stdin, HTTP, MCP and ``admin`` carry, in one place.

Theory of operation (seeds/001 "Operator commands and states", "Authorization matrix"): each row
says the command's argument fields (documentation order), which of them are positive integer ids,
whether it changes replicated state, the least management role that may send it, and the core
command it commits. ``appliance/runner/operator.py`` (stdin), ``management/commands.py`` (HTTP and
MCP) and the owner core (appliance/runner/owner.py) all read this table; adding a command is one
row here (plus, if it needs one, the owner's follow-up after the commit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from appliance.core import state as core

# The management roles (seeds/001): an operator may do everything but the recovery actions.
OPERATOR: Final = "operator"
RECOVERY: Final = "recovery"
# Extension (issue 20): the contract amendments need a credential of their own
# (management.admin_bearer_env); neither the operator nor the recovery credential grants them.
ADMIN: Final = "admin"


@dataclass(frozen=True)
class CommandSpec:
    action: str
    fields: tuple[str, ...]  # argument fields, the stdin document without ``action``
    id_fields: tuple[str, ...] = ()  # fields that must be positive integer ids
    role: str = OPERATOR  # the least role that may send it
    # The core command it commits, from the checked arguments (a create's ``definition`` is the
    # parsed Definition) and the wall instant; None for the read-only commands.
    build: Callable[[Mapping[str, Any], int], Any] | None = None
    description: str = ""  # what an agent reads (the MCP tool, the OpenAPI document)
    # Fields an MCP schema does not mark required: their absence is a content refusal (400,
    # a tool error), never a malformed call.
    schema_optional: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()  # fields that may be omitted everywhere (never required)

    @property
    def mutates(self) -> bool:
        return self.build is not None

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(f for f in self.fields if f not in self.optional)


_ACK_DESCRIPTION: Final = (
    "Recovery only: mark an Unknown or unresolved Cancelling occurrence Abandoned, releasing its "
    "running and overlap reservations, without replay. dispatcher_and_work_quiesced must be true "
    "and may ONLY be set after a human operator has established that the old dispatcher can no "
    "longer submit and that the accepted work has stopped. Agents must never infer, assume or "
    "auto-approve this attestation: ask the human and pass exactly what they attested. It does "
    "not cancel a previously admitted permit and does not undo external effects."
)

_ROWS: tuple[CommandSpec, ...] = (
    CommandSpec(
        "status",
        (),
        description="Status of this voter: node, term, acquired ownership (node, epoch), "
        "commit index, grant expiry and counts. Answers 409 on a voter that is not the "
        "acquired owner, naming the leader it knows.",
    ),
    CommandSpec(
        "list",
        (),
        description="List schedules and occurrences. This is explicitly a stale local "
        "view of this voter's replica, not a linearizable read.",
    ),
    CommandSpec(
        "create",
        ("definition",),
        build=lambda a, at_s: core.CreateSchedule(a["definition"], at_s),
        description="Create a schedule from a definition (code, cron, timezone, policy). "
        "Creation has no request deduplication: after an uncertain result, inspect "
        "the schedule list before creating again.",
    ),
    CommandSpec(
        "disable",
        ("id",),
        ("id",),
        build=lambda a, at_s: core.DisableSchedule(a["id"], at_s),
        description="Disable a schedule: stops future calendar selection only; it does "
        "not cancel occurrences already selected.",
    ),
    CommandSpec(
        "cancel",
        ("occurrence_id",),
        ("occurrence_id",),
        build=lambda a, at_s: core.Cancel(a["occurrence_id"], at_s),
        description="Request cancellation of one occurrence. Success means cancellation "
        "intent was recorded (Cancelling); the occurrence is Cancelled only once the engine "
        "confirms the work stopped, and completion may still win.",
    ),
    CommandSpec(
        "delete",
        ("id",),
        ("id",),
        build=lambda a, at_s: core.DeleteSchedule(a["id"], at_s),
        description="Delete a schedule definition; its live occurrences still run to a "
        "terminal state.",
    ),
    CommandSpec(
        "acknowledge_stopped",
        ("occurrence_id", "dispatcher_and_work_quiesced"),
        ("occurrence_id",),
        role=RECOVERY,
        build=lambda a, at_s: core.AcknowledgeStopped(
            a["occurrence_id"], a.get("dispatcher_and_work_quiesced") is True, at_s
        ),
        description=_ACK_DESCRIPTION,
        schema_optional=("dispatcher_and_work_quiesced",),
    ),
)
# The contract amendments (issue 20, appliance/core/amendments.py). The owner adds
# ``base_amendment`` (the amendment in force) and normalizes the values before ``build``
# (appliance/runner/owner_contract.py); ``amend_limits`` fields left out keep their value.
_LIMIT_FIELDS: Final = ("schedules", "records", "outstanding", "running", "grace_seconds")
_AMENDMENT_ROWS: Final = (
    CommandSpec(
        "renew_grant",
        ("expires_at", "timeout_seconds", "heap_mb", "session"),
        role=ADMIN,
        optional=("timeout_seconds", "heap_mb", "session"),
        build=lambda a, at_s: core.RenewGrant(
            a["base_amendment"],
            a["expires_at"],
            at_s,
            a.get("timeout_seconds"),
            a.get("heap_mb"),
            a.get("session"),
        ),
        description="Admin only: renew the execution grant. New claims carry the new expires_at "
        "(RFC 3339, later than now) and, when given, timeout_seconds, heap_mb and session; "
        "attempts already claimed keep the authority they were bound with.",
    ),
    CommandSpec(
        "amend_remote",
        ("url", "worker_id"),
        role=ADMIN,
        optional=("url", "worker_id"),
        build=lambda a, at_s: core.AmendRemote(
            a["base_amendment"], at_s, a.get("url"), a.get("worker_id")
        ),
        description="Admin only: change the worker URL and/or rotate the worker identity. "
        "Refused while any attempt is Running, Unknown or Cancelling (they are bound to the "
        "current remote).",
    ),
    CommandSpec(
        "amend_limits",
        _LIMIT_FIELDS,
        role=ADMIN,
        optional=_LIMIT_FIELDS,
        build=lambda a, at_s: core.AmendLimits(a["base_amendment"], a["limits"], at_s),
        description="Admin only: change limits (fields left out keep their value). Raising "
        "always fits; lowering is refused while the current state holds more.",
    ),
)
_ROWS = (*_ROWS, *_AMENDMENT_ROWS)
COMMANDS: Final[Mapping[str, CommandSpec]] = {row.action: row for row in _ROWS}
MUTATIONS: Final = frozenset(a for a, row in COMMANDS.items() if row.mutates)
RECOVERY_ACTIONS: Final = frozenset(a for a, row in COMMANDS.items() if row.role == RECOVERY)
ADMIN_ACTIONS: Final = frozenset(a for a, row in COMMANDS.items() if row.role == ADMIN)
READS: Final = frozenset(a for a, row in COMMANDS.items() if not row.mutates)
