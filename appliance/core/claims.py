"""When an occurrence may start: the one claim-eligibility rule (SPEC §3 "Overlap", "Accounting").

Theory of operation: a Pending record may be claimed (Pending → Running) only when it is not
retry-waiting, the global running limit has room (``running`` counts Running + Cancelling +
Unknown: they hold reservations), and — unless its schedule's overlap is ``Concurrent`` — it is
*first in line*: nothing of its schedule holds a reservation and no older Pending of the schedule
waits ("``Queue`` is FIFO with one active occurrence per schedule"; ``Skip`` never keeps more than
one live record, so the same test holds). Three places ask, each from its own view of the state:
the apply of ``ClaimOccurrence`` (appliance/core/policy_apply.py), the claims folded into an
observation (appliance/core/observe_claim.py) and the owner's planning (:func:`claimable`, used by
appliance/owner/owner.py). They compute the inputs; this module decides.
"""

from __future__ import annotations

import enum

from appliance.core.definition import OverlapPolicy
from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import PAUSED_PART


class ClaimBlock(enum.Enum):
    RETRY_WAITING = "retry_waiting"
    RUNNING_LIMIT = "running_limit"
    OVERLAP = "overlap"


def claim_block(
    *,
    retry_waiting: bool,
    running: int,
    running_max: int,
    overlap: OverlapPolicy,
    first_in_line: bool,
) -> ClaimBlock | None:
    """Why a Pending record may not be claimed now, or None when it may."""
    if retry_waiting:
        return ClaimBlock.RETRY_WAITING
    if running >= running_max:
        return ClaimBlock.RUNNING_LIMIT
    if overlap is not OverlapPolicy.CONCURRENT and not first_in_line:
        return ClaimBlock.OVERLAP
    return None


def claimable(st: SchedulerState) -> list[tuple[int, int]]:
    """(occurrence id, attempt) of every record that may start now, in schedule order, taking
    each planned claim's reservation into account (the owner proposes them together)."""
    out: list[tuple[int, int]] = []
    if PAUSED_PART in st.extra:
        return out  # paused (appliance/core/pause.py): nothing starts
    running = st.counts().running
    for sid in st.schedules_with_pending():
        schedule = st.schedules[sid]
        pending = st.pending_ids(sid)
        overlap = schedule.definition.policy.overlap
        schedule_free = not st.schedule_counts(sid)["running"]
        for oid in pending:
            record = st.occurrences[oid]
            block = claim_block(
                retry_waiting=record.retry_waiting,
                running=running,
                running_max=st.limits.running,
                overlap=overlap,
                first_in_line=schedule_free and oid == pending[0],
            )
            if block is ClaimBlock.RUNNING_LIMIT:
                return out
            if block is ClaimBlock.OVERLAP:
                break
            if block is None:
                out.append((oid, record.attempt))
                running += 1
                if overlap is not OverlapPolicy.CONCURRENT:
                    break  # one active occurrence per schedule
    return out
