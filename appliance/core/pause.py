"""``pause`` and ``resume``: the cluster-wide maintenance switch, a committed singleton part.

Theory of operation
-------------------
An operator stopping all scheduling for maintenance needs it on every voter at once and across a
failover, so the switch is replicated state: ``Pause`` writes the ``paused`` part
(``{"at": instant}``) and ``Resume`` deletes it. While it exists:

* ``Observe`` (and ``ObserveAndClaim``) select nothing and move no cursor: every entry is ignored
  as ``paused`` (policy_apply.py), so no slot of the paused span is consumed yet;
* no ``Pending`` record — ready, queued or retry-due — is claimed (``Claim``/``ClaimOccurrence``
  refuse with ``ClaimRefused``), and ``run_now`` and ``backfill`` are refused (``Paused``);
* everything else goes on: running work completes, fails (a retry then waits Pending), becomes
  Unknown, and can be cancelled or acknowledged; takeovers fence as always.

``Resume`` without ``catch_up`` applies no backlog: every enabled schedule's cursor moves to the
resuming instant, and the slots it skips are counted as ``missed`` from the owner's counts (the
calendar is the owner's, SPEC §2; a count planned from another cursor is not recorded, as in
``Observe``). With ``catch_up: true`` the cursors stay, and the next observation applies each
schedule's missed policy to the whole paused span.

Budget: the part is a constant-size singleton inside the checkpoint's headroom, like
``ownership``, so pausing always fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.core.canonical import canonical_json
from appliance.core.occurrence import INSTANT_MAX_S, INT_MAX
from appliance.core.serialisation import register_command_type
from appliance.core.state_errors import InvalidCommand
from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import (
    DROP_REASONS,
    PAUSED_PART,
    RECENT_DROPS_MAX,
    DropEvent,
    DropReason,
    Progress,
    register_part_kind,
)
from appliance.core.txn import Txn, _check_id, _check_instant, register

PAUSED_BYTES_MAX = len(canonical_json({"at": INSTANT_MAX_S}))
register_part_kind(PAUSED_PART, lambda value: PAUSED_BYTES_MAX)


@dataclass(frozen=True)
class Skipped:
    """Slots the owner counted in ``(base_cursor_s, at_s]`` for one schedule (the calendar's)."""

    schedule_id: int
    base_cursor_s: int
    missed: int


@dataclass(frozen=True)
class Pause:
    at_s: int


@dataclass(frozen=True)
class Resume:
    at_s: int
    catch_up: bool = False
    skipped: tuple[Skipped, ...] = ()


def paused_since(state: SchedulerState) -> int | None:
    value = state.extra.get(PAUSED_PART)
    return None if value is None else value["at"]


@register(Pause)
def _pause(txn: Txn, cmd: Pause) -> bool:
    _check_instant("at_s", cmd.at_s)
    if txn.extra(PAUSED_PART) is not None:
        return False  # already paused: the first instant stays
    txn.put_extra(PAUSED_PART, {"at": cmd.at_s})
    return True


def check_skipped(skipped: tuple[Skipped, ...]) -> dict[int, Skipped]:
    if not isinstance(skipped, tuple):
        raise InvalidCommand("skipped: must be a tuple of Skipped")
    out: dict[int, Skipped] = {}
    for entry in skipped:
        if not isinstance(entry, Skipped):
            raise InvalidCommand("skipped: must be Skipped values")
        _check_id("skipped.schedule_id", entry.schedule_id)
        _check_instant("skipped.base_cursor_s", entry.base_cursor_s)
        if type(entry.missed) is not int or not 0 <= entry.missed <= INT_MAX:
            raise InvalidCommand("skipped.missed: must be a non-negative integer")
        if entry.schedule_id in out:
            raise InvalidCommand(f"skipped: schedule {entry.schedule_id} appears twice")
        out[entry.schedule_id] = entry
    return out


def skip_to(txn: Txn, schedule_id: int, at_s: int, counted: Skipped | None) -> bool:
    """Move the schedule's cursor to ``at_s`` (never back), counting the slots it skips as
    missed when the count was planned from the current cursor. True if the cursor moved."""
    progress = txn.progress(schedule_id)
    if progress is None or progress.cursor_s >= at_s:
        return False
    missed = 0
    if counted is not None and counted.base_cursor_s == progress.cursor_s:
        missed = counted.missed
    totals, recent = progress.dropped, progress.recent
    if missed:
        index = DROP_REASONS.index(DropReason.MISSED)
        totals = tuple(  # type: ignore[assignment]
            min(n + missed, INT_MAX) if i == index else n for i, n in enumerate(totals)
        )
        recent = (*recent, DropEvent(at_s, DropReason.MISSED, missed))[-RECENT_DROPS_MAX:]
    txn.put_progress(schedule_id, Progress(at_s, totals, recent))
    return True


@register(Resume)
def _resume(txn: Txn, cmd: Resume) -> tuple[int, ...]:
    """Delete the switch; without catch_up, move every enabled schedule's cursor to ``at_s``.
    The value: the schedules whose cursor moved (nothing when it was not paused)."""
    _check_instant("at_s", cmd.at_s)
    if type(cmd.catch_up) is not bool:
        raise InvalidCommand("catch_up: must be true or false")
    counted = check_skipped(cmd.skipped)
    if txn.extra(PAUSED_PART) is None:
        return ()
    txn.delete_extra(PAUSED_PART)
    if cmd.catch_up:
        return ()
    moved = []
    for schedule_id in sorted(txn.state.schedules):
        schedule = txn.schedule(schedule_id)
        enabled = schedule is not None and schedule.enabled
        if enabled and skip_to(txn, schedule_id, cmd.at_s, counted.get(schedule_id)):
            moved.append(schedule_id)
    return tuple(moved)


def _skipped_to_json(skipped: tuple[Skipped, ...]) -> list[list[int]]:
    return [[s.schedule_id, s.base_cursor_s, s.missed] for s in skipped]


def _skipped_from_json(value: object) -> tuple[Skipped, ...]:
    if not isinstance(value, list):
        raise InvalidCommand("skipped: must be a list of [schedule_id, base_cursor, missed]")
    out = []
    for item in value:
        if not isinstance(item, list) or len(item) != 3:
            raise InvalidCommand("skipped: each entry is [schedule_id, base_cursor, missed]")
        out.append(Skipped(*item))
    return tuple(out)


register_command_type(Pause)
register_command_type(Resume, {"skipped": (_skipped_to_json, _skipped_from_json)})
