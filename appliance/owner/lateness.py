"""How late an attempt was dispatched, and against what (issue 35, item 7).

A p99 of "seconds from due to dispatch" is an alert on scheduling health only for *live* slots:
the first attempt of a slot the owner selected on time. A backfilled slot (due days ago), a slot
caught up after an outage or a ``resume --catch-up``, a ``run_now`` and a retry (due long before
its delay) are late by construction; 490,758 s of a backfill in the same histogram made the p99
meaningless. So each dispatch is measured against one base and labelled:

- ``live``: created by observation within ``LIVE_CREATION_S_MAX`` of its slot, first attempt —
  lateness from the slot's due instant (``appliance_dispatch_latency_seconds``);
- otherwise ``backlog``: from the instant this attempt became runnable — its record's creation
  for a first attempt (backfill, catch-up, run_now), its claim for a retry
  (``appliance_dispatch_backlog_latency_seconds``).

A pure function of the committed record (its creation timeline entry is always kept).
"""

from __future__ import annotations

from typing import Any, Final

from appliance.core.occurrence import Event, OccurrenceState

LIVE_CREATION_S_MAX: Final = 60  # an observation this late after the slot is a catch-up


def lateness_base(record: Any, attempt: int) -> tuple[int, bool]:
    """(the instant lateness is measured from, whether the slot is live)."""
    created = record.timeline[0] if record.timeline else None
    if created is None:
        return record.due_s, True
    observed = created.reason == Event.CREATED.value
    if attempt == 1 and observed and created.at_s - record.due_s <= LIVE_CREATION_S_MAX:
        return record.due_s, True
    if attempt == 1:
        return created.at_s, False
    running = OccurrenceState.RUNNING
    claims = [e.at_s for e in record.timeline if e.attempt == attempt and e.state is running]
    return (claims[-1] if claims else created.at_s), False
