"""Jitter: the deterministic delay of one slot of a schedule with ``policy.jitter_seconds``.

Theory of operation
-------------------
Many schedules on the same minute start at once; a jitter spreads them (systemd's
``RandomizedDelaySec``, Temporal's jitter). Randomness would break two promises: replicas must
agree (SPEC §2: apply never reads a clock or a random source) and an owner that takes over must
wait for the same instant the previous owner planned. So the delay is a pure function of
``(schedule id, slot)``: the first 8 bytes of SHA-256 of ``"<schedule id>/<slot>"`` (the slot in
whole seconds since the epoch) taken modulo ``span + 1``, where ``span`` is ``jitter_seconds``
clipped to one second before the next slot. The record therefore never waits until (or past) the
next slot, and every voter, every owner and every later reader computes the same instant.

The owner computes it (it needs the next slot, i.e. the calendar) and carries it in the
``Observe`` entry; the apply refuses one outside ``[slot, slot + JITTER_SECONDS_MAX]`` and clips it
to the schedule's current ``jitter_seconds`` (a plan made before an update lowered it).
The binding's ``due_time`` stays the slot: jitter delays the start, never the occurrence's name.
"""

from __future__ import annotations

import hashlib

from appliance.core.definition import JITTER_SECONDS_MAX


def jitter_delay_s(schedule_id: int, slot_s: int, jitter_seconds: int, next_slot_s: int) -> int:
    """The delay in ``[0, min(jitter_seconds, next_slot_s - slot_s - 1)]`` of this slot."""
    if not 0 <= jitter_seconds <= JITTER_SECONDS_MAX:
        raise ValueError(f"jitter_seconds: must be in [0, {JITTER_SECONDS_MAX}]")
    if next_slot_s <= slot_s:
        raise ValueError("next_slot_s: must be after slot_s")
    span = min(jitter_seconds, next_slot_s - slot_s - 1)
    if span <= 0:
        return 0
    digest = hashlib.sha256(f"{schedule_id}/{slot_s}".encode("ascii")).digest()
    return int.from_bytes(digest[:8], "big") % (span + 1)


def jittered_instant_s(schedule_id: int, slot_s: int, jitter_seconds: int, next_slot_s: int) -> int:
    """The instant the slot's record waits for: the slot plus its delay."""
    return slot_s + jitter_delay_s(schedule_id, slot_s, jitter_seconds, next_slot_s)
