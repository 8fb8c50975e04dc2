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
from appliance.runner import command_args as args

# The management roles (seeds/001): an operator may do everything but the recovery actions.
OPERATOR: Final = "operator"
RECOVERY: Final = "recovery"


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
    # Checks the other fields (raises command_args.ArgumentError naming the field).
    check: Callable[[Mapping[str, Any]], None] | None = None
    # The owner's plan instead of ``build``, when the command needs the committed state or the
    # calendar: (arguments, instant, state, compiled calendar of a schedule id) -> core command.
    plan: Callable[..., Any] | None = None
    preview: bool = False  # planned by the owner and answered without being proposed
    schema_min_properties: int = 0  # e.g. update: the id and at least one field to change

    @property
    def mutates(self) -> bool:
        return (self.build is not None or self.plan is not None) and not self.preview

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

_ROWS: Final = (
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
    # Beyond seeds/001 (SPEC §11, issue 22), a documented extension: each commits one core
    # command (docs/policies.md, "Operator commands beyond the seeds").
    CommandSpec(
        "run_now",
        ("id", "request_id"),
        ("id",),
        optional=("request_id",),
        check=args.check_run_now,
        build=lambda a, at_s: core.RunNow(a["id"], at_s, a.get("request_id")),
        description="Run a schedule once now (even if disabled), through its overlap policy "
        "and the running limit. Pass a request_id: after an uncertain result, repeating the "
        "call with the same request_id is safe and returns the first answer.",
    ),
    CommandSpec(
        "enable",
        ("id", "catch_up"),
        ("id",),
        optional=("catch_up",),
        check=args.check_catch_up,
        plan=args.plan_enable_args,
        description="Enable a disabled schedule. It resumes from now without a backlog unless "
        "catch_up is true.",
    ),
    CommandSpec(
        "update",
        ("id", "name", "code", "cron", "timezone", "policy"),
        ("id",),
        optional=("name", "code", "cron", "timezone", "policy"),
        check=args.check_update,
        plan=args.plan_update_args,
        description="Change a schedule's name, code, cron, timezone or policy (policy is "
        "replaced whole). Future occurrences use the new definition; live ones keep the code "
        "they were created with. Give at least one field.",
        schema_min_properties=2,
    ),
    CommandSpec(
        "pause",
        (),
        build=lambda a, at_s: core.Pause(at_s),
        description="Pause all scheduling cluster-wide (a maintenance switch): nothing is "
        "selected or started; running work continues and can be cancelled.",
    ),
    CommandSpec(
        "resume",
        ("catch_up",),
        optional=("catch_up",),
        check=args.check_catch_up,
        plan=args.plan_resume_args,
        description="Resume scheduling. The paused span is skipped (counted missed) unless "
        "catch_up is true.",
    ),
    CommandSpec(
        "backfill",
        ("id", "start", "end", "overlap"),
        ("id",),
        optional=("overlap",),
        check=args.check_backfill,
        plan=args.plan_backfill_args,
        description="Create occurrences for the schedule's past calendar slots in [start, end] "
        "that have no retained occurrence (at most 512 slots; all or none within the "
        "outstanding limit). Preview first with scheduler_backfill_preview.",
    ),
    CommandSpec(
        "backfill_preview",
        ("id", "start", "end", "overlap"),
        ("id",),
        optional=("overlap",),
        check=args.check_backfill,
        plan=args.plan_backfill_args,
        preview=True,
        description="What scheduler_backfill would create now, without creating it.",
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
COMMANDS: Final[Mapping[str, CommandSpec]] = {row.action: row for row in _ROWS}
MUTATIONS: Final = frozenset(a for a, row in COMMANDS.items() if row.mutates)
RECOVERY_ACTIONS: Final = frozenset(a for a, row in COMMANDS.items() if row.role == RECOVERY)
PREVIEWS: Final = frozenset(a for a, row in COMMANDS.items() if row.preview)
