"""Live bindings across an update: each occurrence runs the code it was created with.

Theory of operation
-------------------
An attempt is bound to the SHA-256 of its code (the claim's ``payload_sha256``), the worker checks
that digest before it runs anything, and a retry or a takeover re-claim is the *same* occurrence
(SPEC §3): so an ``update`` that changes the code must not change what a live occurrence runs. The
update keeps the replaced code in the schedule part as a :class:`KeptCode` ``(until_id, code)``:
occurrence ids only grow, so the records of the schedule with an id below ``until_id`` (and not
below the previous entry's) are exactly those created before that update, and they run that code;
every later record runs the current definition's code. No record carries a digest of its own, so
the record encoding (and the checkpoint of a store that never updated) is unchanged.

A kept code is needed until every record in its id range is terminal. A ``before_commit`` hook
drops the entries no live record needs whenever a record of the schedule turns terminal (or is
retired), so kept code lives exactly as long as the live occurrences that use it. The claim
(``ClaimOccurrence``), the claim the owner plans (``binding_for``) and the dispatch all take the
code from :func:`code_for`, so an update mid-run leaves the live claim valid.
"""

from __future__ import annotations

from dataclasses import replace

from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import KeptCode, Schedule
from appliance.core.txn import Txn, before_commit
from appliance.protocol.v1 import payload_sha256

# An update that would keep more codes than this for one schedule is refused (wait for the live
# occurrences of the older updates to end): it bounds the schedule part at about 9 x 64 KiB.
KEPT_CODES_MAX = 8


def code_for(schedule: Schedule, occurrence_id: int) -> str:
    """The code the schedule's occurrence ``occurrence_id`` was created with."""
    for kept in schedule.kept:
        if occurrence_id < kept.until_id:
            return kept.code
    return schedule.definition.code


def digest_for(schedule: Schedule, occurrence_id: int) -> str:
    return payload_sha256(code_for(schedule, occurrence_id))


def record_code(state: SchedulerState, occurrence_id: int) -> str | None:
    """The code to dispatch for a retained occurrence, or None if it or its schedule is gone."""
    record = state.occurrences.get(occurrence_id)
    schedule = None if record is None else state.schedules.get(record.schedule_id)
    if record is None or schedule is None:
        return None
    return code_for(schedule, record.id)


def _live_ids(txn: Txn, schedule_id: int) -> list[int]:
    ids = set(txn.state.occurrences) | set(txn._occ)
    out = []
    for oid in ids:
        record = txn.occurrence(oid)
        if record is not None and record.schedule_id == schedule_id and not record.terminal:
            out.append(oid)
    return out


def needed_kept(txn: Txn, schedule: Schedule) -> tuple[KeptCode, ...]:
    """The kept entries some live record of the schedule still runs."""
    if not schedule.kept:
        return ()
    if txn.nonterminal(schedule.id) == 0:
        return ()
    live = _live_ids(txn, schedule.id)
    out: list[KeptCode] = []
    low = 0
    for kept in schedule.kept:
        if any(low <= oid < kept.until_id for oid in live):
            out.append(kept)
        low = kept.until_id
    return tuple(out)


def keep_current_code(txn: Txn, schedule: Schedule) -> tuple[KeptCode, ...]:
    """The kept entries after replacing the current code: the current code is kept if a live
    record created since the last update runs it."""
    low = schedule.kept[-1].until_id if schedule.kept else 0
    kept = needed_kept(txn, schedule)
    if txn.nonterminal(schedule.id) and any(oid >= low for oid in _live_ids(txn, schedule.id)):
        kept = (*kept, KeptCode(txn.next_occurrence_id, schedule.definition.code))
    return kept


@before_commit
def _drop_unneeded_code(txn: Txn) -> None:
    if not txn.state.extended_schedules and not txn._sch:
        return  # no schedule keeps code (the pulse's common case costs one test)
    ended = {r.schedule_id for r in txn._occ.values() if r is not None and r.terminal}
    for schedule_id in sorted(ended):
        schedule = txn.schedule(schedule_id)
        if schedule is None or not schedule.kept:
            continue
        kept = needed_kept(txn, schedule)
        if kept != schedule.kept:
            txn.put_schedule(_with_kept(schedule, kept))


def _with_kept(schedule: Schedule, kept: tuple[KeptCode, ...]) -> Schedule:
    return replace(schedule, kept=kept)
