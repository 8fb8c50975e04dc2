"""The deterministic scheduler state: schedules, occurrences, commands and their pure apply.

Theory of operation
-------------------
Every replica holds one :class:`SchedulerState` and changes it only through :func:`apply` with a
committed command (a frozen dataclass). Apply is a function of (state, command) alone: every
instant and every calendar result travels inside the command, computed by the owner (SPEC §2), so
replicas with different clocks or tzdata cannot diverge.

Apply is a compare-and-set. Each command's preconditions (the exact occurrence and attempt, the
state table, the limits, the checkpoint budget) are checked inside a :class:`Txn`, an overlay over
the committed state; only :meth:`Txn.commit` writes, and only after every check passed, so a
rejected command raises a :class:`CoreError` and changes nothing.

The state is a set of named *parts* — ``meta``, ``schedule/<id>`` (the definition),
``progress/<id>`` (cursor and drop counters, which change on every observation) and
``occurrence/<id>`` — whose canonical JSON is cached. The checkpoint is the canonical JSON object
of all parts; each apply reports the parts it touched and deleted, so a store persists only those,
and the total size is tracked incrementally (``1 + sum(len(name) + 4 + len(part))``).

The 4 MiB cap (SPEC §3) is enforced with a *budget*: every part counts at the largest size it can
reach without another growth command — a non-terminal record at the most it can reach, a progress
part at ``PROGRESS_BYTES_MAX`` — and only creation and observation may raise the budget, refusing
beyond ``CHECKPOINT_BYTES_MAX - HEADROOM_BYTES``. Claims, outcomes, cancellations, fences and
acknowledgements only move a part within its reservation, so they always fit. The headroom is left
for the runner's own singleton parts (ownership, retired, charging).

"The most a live record can reach" has two committed *charging rules* (``charging.py``): rules 1
charge every live record ``RECORD_BYTES_MAX`` plus each bound part's maximum; rules 2, once the
checkpoint's ``charging`` part names them, charge what this record can still reach from its fixed
fields (ids, due instant, creation entry, its schedule's name) within the claim bounds rules 2
enforce. The budget is apply semantics (it decides what growth commands create), so the rules
switch only by a committed, version-gated command, and a reload charges by the rules it names.

Extending (the runner's ownership, claims and permits): a new command is a new frozen dataclass
plus a function registered with :func:`register`; it works on the same ``Txn`` and inherits the
all-or-nothing commit. Its own parts are registered with :func:`register_part_kind` and written
with ``Txn.put_extra`` (sized, budgeted, serialized and reloaded like the core's), and
:func:`on_retire` hooks delete what is bound to a record when retention retires it.

Module map: ``state_errors`` (refusals), ``state_parts`` (values, part encodings, budgets, part
kinds), ``commands`` (the command dataclasses), ``state_model`` (the aggregate), ``txn`` (the
overlay, ``register``, ``apply``), ``policy_apply`` (the policy commands), ``ownership`` and
``admission`` (the runner's commands, see docs/runner-core.md), ``charging`` (the switch to
charging rules 2), ``serialisation`` (checkpoint and command JSON). This module re-exports every
public name, so callers import from here.
"""

from __future__ import annotations

from appliance.core import policy_apply as _policy_apply  # noqa: F401
from appliance.core.admission import (
    ADMISSION_STATES,
    Admit,
    ClaimOccurrence,
    FenceAfterCancel,
    FenceDispatch,
    Granted,
    MarkUnknown,
    admission_record,
    binding_for,
    needs_cancelling_reader,
    permit_to_json,
)

# Importing the apply modules registers their commands.
from appliance.core.amendments import (
    Amended,
    AmendLimits,
    AmendRemote,
    RenewGrant,
    amendment_index,
    needs_amended_reader,
    remote_in_force,
)
from appliance.core.binding import (
    Authority,
    Binding,
    Invocation,
    binding_from_json,
    binding_to_json,
    invocation_from_json,
    invocation_to_json,
)
from appliance.core.capacity_wait import NoteCapacityWait
from appliance.core.charging import AdoptCharging, charging_rules, needs_charging_reader
from appliance.core.commands import (
    AcknowledgeStopped,
    Applied,
    Cancel,
    Claim,
    ConfirmCancelled,
    CreateSchedule,
    DeleteSchedule,
    DisableSchedule,
    FenceNotLaunched,
    Observe,
    ObservedSchedule,
    ObserveReport,
    RecordOutcome,
    RetryDue,
)
from appliance.core.features import (
    FEATURE_KINDS,
    JITTER_KIND,
    command_kind,
    needs_commands_reader,
)
from appliance.core.fleet import (
    AddWorker,
    DrainWorker,
    RemoveWorker,
    UndrainWorker,
    bound_live_attempts,
    fleet_state,
    needs_fleet_reader,
    workers_in_force,
)
from appliance.core.live_code import code_for, record_code
from appliance.core.observe_claim import ObserveAndClaim, ObservedAndClaimed
from appliance.core.observe_place import ObserveAndPlace
from appliance.core.ownership import (
    AcquireOwnership,
    SeedInitialSchedules,
    Takeover,
    current_epoch,
    current_ownership,
)
from appliance.core.pause import Pause, Resume, Skipped, paused_since
from appliance.core.runner_errors import (
    ADMISSION_REFUSAL_CODES,
    AdmissionRefused,
    AlreadySeeded,
    AttemptNotRunning,
    BindingMismatch,
    Fenced,
    GrantExpired,
    IncarnationMismatch,
    NotAcquired,
    PermitExists,
    RunnerRefusal,
    StaleEpoch,
    StaleTerm,
)
from appliance.core.runner_parts import (
    ADMISSION_BYTES_MAX,
    AdmissionRecord,
    Fence,
    Ownership,
    Permit,
    UnknownNote,
)
from appliance.core.schedule_commands import (
    Backfill,
    BackfillReport,
    EnableSchedule,
    RunNow,
    RunNowResult,
    UpdateSchedule,
    preview_backfill,
)
from appliance.core.serialisation import (
    COMMAND_TYPES,
    command_from_json,
    command_to_json,
    from_json,
    register_command_type,
    to_json,
)
from appliance.core.state_errors import (
    AttemptMismatch,
    CheckpointFull,
    ClaimRefused,
    CorruptState,
    InvalidCommand,
    OutstandingLimitReached,
    Paused,
    RetryNotDue,
    ScheduleLimitReached,
    UnknownOccurrence,
    UnknownSchedule,
)
from appliance.core.state_model import (
    ListSnapshot,
    SchedulerState,
    list_snapshot,
    list_view,
    render_list,
)
from appliance.core.state_parts import (
    _PART_KINDS,
    DROP_REASONS,
    GROWTH_BYTES_MAX,
    HEADROOM_BYTES,
    PROGRESS_BYTES_MAX,
    RECENT_DROPS_MAX,
    SCHEMA_VERSION,
    Counts,
    DropEvent,
    DropReason,
    Progress,
    S,
    Schedule,
    _progress_json,
    definition_from_checkpoint,
    encode_progress,
    register_part_kind,
)
from appliance.core.txn import Txn, apply, on_retire, register
from appliance.core.unique_names import (
    CreateNamedSchedule,
    NameTaken,
    UpdateNamedSchedule,
    name_holder,
    with_unique_name,
)

__all__ = [
    "ADMISSION_BYTES_MAX",
    "ADMISSION_REFUSAL_CODES",
    "ADMISSION_STATES",
    "COMMAND_TYPES",
    "DROP_REASONS",
    "FEATURE_KINDS",
    "GROWTH_BYTES_MAX",
    "HEADROOM_BYTES",
    "JITTER_KIND",
    "PROGRESS_BYTES_MAX",
    "RECENT_DROPS_MAX",
    "SCHEMA_VERSION",
    "_PART_KINDS",
    "AcknowledgeStopped",
    "AcquireOwnership",
    "AddWorker",
    "AdmissionRecord",
    "AdmissionRefused",
    "Admit",
    "AdoptCharging",
    "AlreadySeeded",
    "AmendLimits",
    "AmendRemote",
    "Amended",
    "Applied",
    "AttemptMismatch",
    "AttemptNotRunning",
    "Authority",
    "Backfill",
    "BackfillReport",
    "Binding",
    "BindingMismatch",
    "Cancel",
    "CheckpointFull",
    "Claim",
    "ClaimOccurrence",
    "ClaimRefused",
    "ConfirmCancelled",
    "CorruptState",
    "Counts",
    "CreateNamedSchedule",
    "CreateSchedule",
    "DeleteSchedule",
    "DisableSchedule",
    "DrainWorker",
    "DropEvent",
    "DropReason",
    "EnableSchedule",
    "Fence",
    "FenceAfterCancel",
    "FenceDispatch",
    "FenceNotLaunched",
    "Fenced",
    "GrantExpired",
    "Granted",
    "IncarnationMismatch",
    "InvalidCommand",
    "Invocation",
    "ListSnapshot",
    "MarkUnknown",
    "NameTaken",
    "NotAcquired",
    "NoteCapacityWait",
    "Observe",
    "ObserveAndClaim",
    "ObserveAndPlace",
    "ObserveReport",
    "ObservedAndClaimed",
    "ObservedSchedule",
    "OutstandingLimitReached",
    "Ownership",
    "Pause",
    "Paused",
    "Permit",
    "PermitExists",
    "Progress",
    "RecordOutcome",
    "RemoveWorker",
    "RenewGrant",
    "Resume",
    "RetryDue",
    "RetryNotDue",
    "RunNow",
    "RunNowResult",
    "RunnerRefusal",
    "S",
    "Schedule",
    "ScheduleLimitReached",
    "SchedulerState",
    "SeedInitialSchedules",
    "Skipped",
    "StaleEpoch",
    "StaleTerm",
    "Takeover",
    "Txn",
    "UndrainWorker",
    "UnknownNote",
    "UnknownOccurrence",
    "UnknownSchedule",
    "UpdateNamedSchedule",
    "UpdateSchedule",
    "_progress_json",
    "admission_record",
    "amendment_index",
    "apply",
    "binding_for",
    "binding_from_json",
    "binding_to_json",
    "bound_live_attempts",
    "charging_rules",
    "code_for",
    "command_from_json",
    "command_kind",
    "command_to_json",
    "current_epoch",
    "current_ownership",
    "definition_from_checkpoint",
    "encode_progress",
    "fleet_state",
    "from_json",
    "invocation_from_json",
    "invocation_to_json",
    "list_snapshot",
    "list_view",
    "name_holder",
    "needs_amended_reader",
    "needs_cancelling_reader",
    "needs_charging_reader",
    "needs_commands_reader",
    "needs_fleet_reader",
    "on_retire",
    "paused_since",
    "permit_to_json",
    "preview_backfill",
    "record_code",
    "register",
    "register_command_type",
    "register_part_kind",
    "remote_in_force",
    "render_list",
    "to_json",
    "with_unique_name",
    "workers_in_force",
]
