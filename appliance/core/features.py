"""What an older binary cannot read or apply: the version gate's kinds and the reader version.

Theory of operation (SPEC §11 "A version gate for the log", SPEC §4 rollback protection)
---------------------------------------------------------------------------------------
The new commands (``EnableSchedule``, ``UpdateSchedule``, ``RunNow``, ``Backfill``, ``Pause``,
``Resume``) are new command kinds, so the owner proposes them only once every voter reports them;
they are not in ``BASELINE_COMMAND_KINDS`` and never will be. One feature rides on baseline
kinds: a definition with ``policy.jitter_seconds`` in ``CreateSchedule`` or
``SeedInitialSchedules`` (an older binary would decode it without the jitter, and then its
checkpoint bytes and its observations would differ). :func:`command_kind` therefore names such a
command :data:`JITTER_KIND`, a kind every binary of this round reports; the owner gates on
``command_kind(command)`` rather than the type's name.

Reader version, decided per field (an older binary refuses the store instead of misreading it):

* ``paused`` part — while paused (it is deleted by ``resume``);
* ``run_requests`` part — while it exists (once a ``run_now`` carried a request id; it is never
  deleted, because a later repeat must still find its answer);
* a schedule part with ``policy.jitter_seconds``, kept code or a change history — while any
  schedule carries one (deleting or re-updating without jitter does not clear the history, so
  practically once a schedule was updated, until it is deleted).

Records made by the new commands (``run_now``/``backfill`` creation reasons, the ``jitter_due``
timeline entry, a jittered ``not_before``) use the record's existing fields and decode in an older
binary unchanged, so they do not raise it on their own.
"""

from __future__ import annotations

from typing import Any

from appliance.core.commands import CreateSchedule
from appliance.core.ownership import SeedInitialSchedules
from appliance.core.schedule_commands import RUN_REQUESTS_PART
from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import PAUSED_PART

JITTER_KIND = "policy.jitter_seconds"
# Issue 33: a definition's ``placement`` (appliance/core/placement.py). A binary before the fleet
# would refuse the field (or, from a checkpoint, drop it), so a command carrying one is gated on
# this kind, whatever its own kind is.
PLACEMENT_KIND = "definition.placement"
# Kinds a binary reports beyond its command types: features carried by baseline commands.
FEATURE_KINDS = frozenset({JITTER_KIND, PLACEMENT_KIND})


def command_kind(command: Any) -> str:
    """The kind the version gate checks before ``command`` is proposed."""
    if _carries_placement(command):
        return PLACEMENT_KIND
    if isinstance(command, CreateSchedule) and command.definition.policy.jitter_seconds:
        return JITTER_KIND
    if isinstance(command, SeedInitialSchedules) and any(
        d.policy.jitter_seconds for d in command.definitions
    ):
        return JITTER_KIND
    return type(command).__name__


def _carries_placement(command: Any) -> bool:
    if isinstance(command, SeedInitialSchedules):
        return any(d.placement for d in command.definitions)
    if "placement" in getattr(command, "fields", ()):  # an update that changes (or clears) it
        return True
    definition = getattr(command, "definition", None)  # CreateSchedule, UpdateSchedule
    return bool(getattr(definition, "placement", None))


def needs_commands_reader(state: SchedulerState) -> bool:
    """True while the checkpoint holds a part or field an older binary cannot read (above)."""
    extra = state.extra
    if PAUSED_PART in extra or RUN_REQUESTS_PART in extra:
        return True
    return bool(state.extended_schedules)  # kept on every schedule write (O(1) here)
