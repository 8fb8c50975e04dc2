"""Missed-run selection: which calendar slots an observation turns into occurrences.

Theory of operation
-------------------
Each schedule has a *cursor*: every calendar slot at or before it has been consumed (selected or
counted as dropped). An observation at ``now`` considers the slots in ``(cursor, now]`` and moves
the cursor to ``now`` (SPEC §3 "Missed-run selection"):

* ``Skip``: only the latest due slot, and only if ``now - slot <= grace_seconds`` (inclusive);
* ``RunOnce``: all unobserved slots coalesce into the newest;
* ``CatchUp{cap}``: the newest ``cap`` slots in chronological order.

Every other due slot is *missed*. Only the newest one or ``cap`` slots are ever materialised
(``latest_at_or_before`` is O(count)); the number missed comes from ``count_between``, which counts
by day, so a year of ``* * * * *`` downtime costs O(cap + days), never a walk over 525,600 slots.

This runs on the owner only: it needs the calendar (tzdata), so its result travels inside the
replicated ``Observe`` command and replicas never recompute it (SPEC §2). Instants here are whole
seconds since the Unix epoch (``*_s``); the calendar speaks aware UTC datetimes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple, Protocol

from appliance.core.definition import MissedCatchUp, MissedPolicy, MissedRunOnce, MissedSkip
from appliance.core.jitter import jittered_instant_s
from appliance.core.limits import Limits
from appliance.core.state import Observe, ObservedSchedule, SchedulerState


class CompiledSchedule(Protocol):
    """The calendar helper's compiled cron + timezone (appliance.core.calendar)."""

    def next_after(self, after: datetime) -> datetime: ...

    def latest_at_or_before(
        self, instant: datetime, count: int, after: datetime | None = None
    ) -> list[datetime]: ...

    def count_between(self, after: datetime, until: datetime) -> int: ...


class Selection(NamedTuple):
    """The result of selecting one schedule's due slots at one observation (a NamedTuple: the
    pulse builds one per due schedule, and a tuple is several times cheaper to make)."""

    slots_s: tuple[int, ...]
    missed: int
    cursor_s: int
    # The first slot after the new cursor when selection learned it for free; the pulse heap uses
    # it instead of asking the calendar again. Owner-side only, never replicated.
    next_due_s: int | None = None


def to_instant(value: datetime) -> int:
    if value.tzinfo is None:
        raise ValueError("instant must be timezone-aware")
    return int(value.timestamp())


def to_datetime(instant_s: int) -> datetime:
    return datetime.fromtimestamp(instant_s, UTC)


def next_after_s(compiled: CompiledSchedule, after_s: int) -> int:
    """The first slot strictly after ``after_s``, in whole seconds.

    Uses the calendar's integer entry point ``next_after_s`` when it has one (the pulse calls
    this once per due schedule, and two datetime conversions cost more than the step itself);
    otherwise the datetime API of the protocol.
    """
    fast = getattr(compiled, "next_after_s", None)
    if fast is not None:
        return fast(after_s)
    return to_instant(compiled.next_after(to_datetime(after_s)))


def _wanted(policy: MissedPolicy) -> int:
    if isinstance(policy, MissedCatchUp):
        return policy.cap
    if isinstance(policy, MissedSkip | MissedRunOnce):
        return 1
    raise TypeError(f"policy.missed: unsupported policy {policy!r}")


def _choose(
    policy: MissedPolicy, newest_s: list[int], total: int, now_s: int, grace_seconds: int
) -> tuple[tuple[int, ...], int]:
    """From the newest due slots (chronological) and the total due, the chosen slots and missed."""
    if isinstance(policy, MissedSkip):
        latest = newest_s[-1]
        if now_s - latest <= grace_seconds:
            return (latest,), total - 1
        return (), total
    chosen = tuple(newest_s[-_wanted(policy) :])
    return chosen, total - len(chosen)


def select(
    policy: MissedPolicy,
    compiled: CompiledSchedule,
    cursor_s: int,
    now_s: int,
    grace_seconds: int,
    next_due_s: int | None = None,
    memo: dict[tuple[CompiledSchedule, int], int] | None = None,
) -> Selection:
    """Select the due slots in ``(cursor_s, now_s]``.

    ``next_due_s``, if given, must be ``compiled.next_after(cursor_s)`` (the pulse heap keeps it);
    it lets the common case — exactly one slot due — cost a single calendar step. ``memo`` shares
    that step between schedules with the same calendar within one pulse (the calendar is a pure
    function of its inputs, so equal schedules at the same instant have the same next slot).
    """
    if now_s <= cursor_s:
        # A duplicate or backward observation: nothing is due and the cursor never moves back.
        return Selection((), 0, cursor_s, next_due_s)
    if next_due_s is not None:
        if next_due_s <= cursor_s:
            raise ValueError("next_due_s must be strictly after the cursor")
        if next_due_s > now_s:
            return Selection((), 0, cursor_s, next_due_s)
        key = (compiled, next_due_s)
        following_s = memo.get(key) if memo is not None else None
        if following_s is None:
            following_s = next_after_s(compiled, next_due_s)
            if memo is not None:
                memo[key] = following_s
        if following_s > now_s:
            # Exactly one slot is due: every policy keeps it, except Skip past the grace window.
            if type(policy) is MissedSkip and now_s - next_due_s > grace_seconds:
                return Selection((), 1, now_s, following_s)
            return Selection((next_due_s,), 0, now_s, following_s)
    wanted = _wanted(policy)
    # One more than wanted tells whether anything older exists without counting all of it.
    newest = compiled.latest_at_or_before(to_datetime(now_s), wanted + 1, to_datetime(cursor_s))
    newest_s = [to_instant(slot) for slot in newest]
    if not newest_s:
        return Selection((), 0, now_s, None)
    if newest_s[0] <= cursor_s or newest_s[-1] > now_s:
        raise ValueError("calendar returned a slot outside (cursor, now]")
    if len(newest_s) <= wanted:
        total = len(newest_s)
    else:
        total = compiled.count_between(to_datetime(cursor_s), to_datetime(now_s))
        newest_s = newest_s[1:]
    slots, missed = _choose(policy, newest_s, total, now_s, grace_seconds)
    return Selection(slots, missed, now_s, None)


def jittered_slots_s(
    schedule_id: int, compiled: CompiledSchedule, slots_s: tuple[int, ...], jitter_seconds: int
) -> tuple[int, ...]:
    """Each slot's jittered instant (``appliance/core/jitter.py``): one calendar step per slot,
    for the next slot the delay must stay before; only jittered schedules pay it."""
    return tuple(
        jittered_instant_s(schedule_id, slot, jitter_seconds, next_after_s(compiled, slot))
        for slot in slots_s
    )


# ---- the owner's plan --------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """An ``Observe`` command plus what the owner learned for its pulse heap (not replicated)."""

    command: Observe
    cursors_s: dict[int, int]  # schedule id -> the cursor the command moves it to
    next_due_s: dict[int, int | None]  # schedule id -> first slot after that cursor, if known
    skipped: tuple[int, ...] = ()  # schedules asked for but deleted or disabled


def plan_with_hints(
    state: SchedulerState,
    compiled: Mapping[int, CompiledSchedule],
    now: datetime | int,
    limits: Limits | None = None,
    next_due_s: Mapping[int, int] | None = None,
) -> Plan:
    """Select every enabled schedule in ``compiled`` at ``now``: owner side, reads the calendar.

    ``next_due_s`` (the pulse heap's values, each ``next_after(cursor)``) lets the common case of a
    single due slot cost one calendar step per schedule.
    """
    now_s = now if isinstance(now, int) else to_instant(now)
    grace_seconds = (limits or state.limits).grace_seconds
    hints = next_due_s or {}
    memo: dict[tuple[CompiledSchedule, int], int] = {}
    entries: list[ObservedSchedule] = []
    cursors: dict[int, int] = {}
    following: dict[int, int | None] = {}
    skipped: list[int] = []
    for schedule_id in sorted(compiled):
        schedule = state.schedules.get(schedule_id)
        if schedule is None or not schedule.enabled:
            skipped.append(schedule_id)
            continue
        cursor_s = state.progress[schedule_id].cursor_s
        hint = hints.get(schedule_id)
        if hint is not None and hint <= cursor_s:
            hint = None  # stale: the cursor moved since the heap learned it
        chosen = select(
            schedule.definition.policy.missed,
            compiled[schedule_id],
            cursor_s,
            now_s,
            grace_seconds,
            hint,
            memo,
        )
        if chosen.slots_s or chosen.missed:
            jitter_s = schedule.definition.policy.jitter_seconds
            waits = (
                jittered_slots_s(schedule_id, compiled[schedule_id], chosen.slots_s, jitter_s)
                if jitter_s and chosen.slots_s
                else ()
            )
            entries.append(
                ObservedSchedule(
                    schedule_id, cursor_s, chosen.cursor_s, chosen.slots_s, chosen.missed, waits
                )
            )
            cursors[schedule_id] = chosen.cursor_s
            following[schedule_id] = chosen.next_due_s
        else:
            cursors[schedule_id] = cursor_s
            following[schedule_id] = hint
    return Plan(Observe(now_s, tuple(entries)), cursors, following, tuple(skipped))


def plan_observation(
    state: SchedulerState,
    compiled: Mapping[int, CompiledSchedule],
    now: datetime | int,
    limits: Limits | None = None,
) -> Observe:
    """The ``Observe`` command for ``now`` (see :func:`plan_with_hints`)."""
    return plan_with_hints(state, compiled, now, limits).command
