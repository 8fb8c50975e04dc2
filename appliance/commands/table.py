"""The operator command table: every command stdin, HTTP, MCP and ``admin`` carry, in one place.

Theory of operation (seeds/001 "Operator commands and states", "Authorization matrix"): each row
says the command's argument fields (documentation order), which of them are positive integer ids,
whether it changes replicated state, the least management role that may send it, and the core
command it commits. ``appliance/commands/operator.py`` (stdin), ``management/commands.py`` (HTTP and
MCP) and the owner core (appliance/owner/owner.py) all read this table; adding a command is one
row here (plus, if it needs one, the owner's follow-up after the commit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from appliance.commands import args
from appliance.core import state as core
from appliance.core.amendments import check_grant_horizon

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
    # Checks the other fields (raises command_args.ArgumentError naming the field).
    check: Callable[[Mapping[str, Any]], None] | None = None
    # The owner's plan instead of ``build``, when the command needs the committed state or the
    # calendar: (arguments, instant, state, compiled calendar of a schedule id) -> core command.
    plan: Callable[..., Any] | None = None
    preview: bool = False  # planned by the owner and answered without being proposed
    schema_min_properties: int = 0  # e.g. update: the id and at least one field to change
    # A membership change (issue 20): the ``RaftReplication`` method it calls directly (a Raft
    # CONFIG entry, not a Machine command: no build, no apply, no version gate).
    membership: str | None = None

    @property
    def mutates(self) -> bool:
        changes = self.build is not None or self.plan is not None or self.membership is not None
        return changes and not self.preview

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
        # A named definition is created by CreateNamedSchedule: names are unique among live
        # schedules, checked at apply (appliance/core/unique_names.py, issue 35).
        build=lambda a, at_s: core.with_unique_name(core.CreateSchedule(a["definition"], at_s)),
        description="Create a schedule from a definition (code, cron, timezone, policy). "
        "A name must not be the name of another live schedule (refused with existing_id). "
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
        ("id", "name", "code", "cron", "timezone", "policy", "placement"),
        ("id",),
        optional=("name", "code", "cron", "timezone", "policy", "placement"),
        check=args.check_update,
        plan=args.plan_update_args,
        description="Change a schedule's name, code, cron, timezone, policy or placement (policy "
        "and placement are replaced whole). Future occurrences use the new definition; live "
        "ones keep the code they were created with. Give at least one field.",
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
# The contract amendments (issue 20, appliance/core/amendments.py). Each takes an optional
# ``base_amendment`` (added to every amendment row below, issue 36); the owner fills in the
# amendment in force when it is left out and normalizes the values before ``build``
# (appliance/owner/contract.py); ``amend_limits`` fields left out keep their value.
_LIMIT_FIELDS: Final = ("schedules", "records", "outstanding", "running", "grace_seconds")
_AMENDMENT_ROWS: Final = (
    CommandSpec(
        "renew_grant",
        ("expires_at", "timeout_seconds", "heap_mb", "session"),
        role=ADMIN,
        optional=("timeout_seconds", "heap_mb", "session"),
        build=lambda a, at_s: core.RenewGrant(
            a["base_amendment"],
            check_grant_horizon(a["expires_at"], at_s),
            at_s,
            a.get("timeout_seconds"),
            a.get("heap_mb"),
            a.get("session"),
        ),
        description="Admin only: renew the execution grant. New claims carry the new expires_at "
        "(RFC 3339, later than now and at most 1826 days (5 years) ahead) and, when given, "
        "timeout_seconds, heap_mb and session; attempts already claimed keep the authority they "
        "were bound with.",
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
# The fleet's amendments (issue 33, appliance/core/fleet.py): the owner adds ``base_amendment``
# and the worker list in force after the change (appliance/owner/contract.py) before ``build``.
_WORKER_FIELDS: Final = ("worker_id", "url", "labels", "bearer_env", "admission_bearer_env")
_FLEET_ROWS: Final = (
    CommandSpec(
        "add_worker",
        _WORKER_FIELDS,
        role=ADMIN,
        optional=("labels", "bearer_env", "admission_bearer_env"),
        check=args.check_worker_args,
        build=lambda a, at_s: core.AddWorker(
            a["base_amendment"], at_s, a["worker"], tuple(a["workers"])
        ),
        description="Admin only: add a worker to the fleet (worker_id, its origin url, optional "
        "labels for placement and the names of its credentials' environment variables, which "
        "every voter must have set). A removed worker_id is never reused.",
    ),
    CommandSpec(
        "drain_worker",
        ("worker_id",),
        role=ADMIN,
        check=args.check_worker_args,
        build=lambda a, at_s: core.DrainWorker(a["base_amendment"], at_s, a["worker_id"]),
        description="Admin only: no new placements on this worker; its live attempts finish there.",
    ),
    CommandSpec(
        "undrain_worker",
        ("worker_id",),
        role=ADMIN,
        check=args.check_worker_args,
        build=lambda a, at_s: core.UndrainWorker(a["base_amendment"], at_s, a["worker_id"]),
        description="Admin only: a drained worker takes new placements again.",
    ),
    CommandSpec(
        "remove_worker",
        ("worker_id",),
        role=ADMIN,
        check=args.check_worker_args,
        build=lambda a, at_s: core.RemoveWorker(
            a["base_amendment"], at_s, a["worker_id"], tuple(a["workers"])
        ),
        description="Admin only: remove a worker from the fleet. Refused while any attempt "
        "bound to it is claimed, Running, Unknown or Cancelling (drain it first); its "
        "worker_id is never reused.",
    ),
)
# Membership changes of the built-in Raft (issue 20, docs/cluster.md "Changing the voters"):
# one server at a time; replacing a voter is add_voter, promote_voter, remove_voter.
_MEMBERSHIP_ROWS: Final = (
    CommandSpec(
        "add_voter",
        ("id", "address"),
        role=ADMIN,
        check=args.check_add_voter,
        membership="add_learner",
        description="Admin only: a new node (id, its cluster listener host:port) joins the Raft "
        "configuration as a learner: it receives the log and snapshots but does not vote until "
        "promote_voter. Start it first with a joining config (docs/cluster.md). One change at "
        "a time; refused on the etcd backend.",
    ),
    CommandSpec(
        "promote_voter",
        ("id",),
        role=ADMIN,
        check=args.check_voter_id,
        membership="promote",
        description="Admin only: the learner id becomes a voter. Refused (definitely, nothing "
        "changed) until it has caught up with the leader's commit index: ask again.",
    ),
    CommandSpec(
        "remove_voter",
        ("id",),
        role=ADMIN,
        check=args.check_voter_id,
        membership="remove",
        description="Admin only: remove a voter or learner from the Raft configuration. "
        "Removing the leader hands leadership over once the change commits. The removed node "
        "stops voting; stop its process afterwards.",
    ),
)


def _checks(*checks: Callable[[Mapping[str, Any]], None] | None) -> Callable[..., None]:
    def check(arguments: Mapping[str, Any]) -> None:
        for one in checks:
            if one is not None:
                one(arguments)

    return check


def _built_on_a_base(row: CommandSpec) -> CommandSpec:
    """Every amendment (an admin row that is not a membership change, whichever issue adds it)
    may name the amendment its author read (issue 36): a stale one is refused at apply."""
    if row.role != ADMIN or row.membership is not None or args.BASE_AMENDMENT_FIELD in row.fields:
        return row
    return replace(
        row,
        fields=(*row.fields, args.BASE_AMENDMENT_FIELD),
        optional=(*row.optional, args.BASE_AMENDMENT_FIELD),
        check=_checks(row.check, args.check_base_amendment),
        description=row.description + _BASE_DESCRIPTION,
    )


_BASE_DESCRIPTION: Final = (
    " Pass base_amendment, the contract.amendment that status showed: if another amendment "
    "committed since, this one is refused (read status and amend again) instead of "
    "overwriting it."
)
_ROWS = tuple(
    _built_on_a_base(row) for row in (*_ROWS, *_AMENDMENT_ROWS, *_FLEET_ROWS, *_MEMBERSHIP_ROWS)
)
COMMANDS: Final[Mapping[str, CommandSpec]] = {row.action: row for row in _ROWS}
MUTATIONS: Final = frozenset(a for a, row in COMMANDS.items() if row.mutates)
RECOVERY_ACTIONS: Final = frozenset(a for a, row in COMMANDS.items() if row.role == RECOVERY)
PREVIEWS: Final = frozenset(a for a, row in COMMANDS.items() if row.preview)
ADMIN_ACTIONS: Final = frozenset(a for a, row in COMMANDS.items() if row.role == ADMIN)
MEMBERSHIP_ACTIONS: Final = frozenset(a for a, row in COMMANDS.items() if row.membership)
# The contract amendments: admin commands the owner commits as Machine commands.
AMENDMENT_ACTIONS: Final = ADMIN_ACTIONS - MEMBERSHIP_ACTIONS
# The plain reads (status, list): what the admin credential may do besides amending.
READS: Final = frozenset(a for a, row in COMMANDS.items() if not row.mutates and not row.preview)
