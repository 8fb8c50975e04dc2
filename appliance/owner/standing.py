"""Where this voter stands: the term, the leader it knows of, the ownership epoch it holds.

One mutable record shared by the owner's parts (appliance/owner/owner.py composes them): the
``Owner`` alone writes it (leadership events, acquisition, loss, drain); the attempts and the
request decisions read it. Owner-side memory, never replicated.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Standing:
    node_id: str
    term: int = 0
    leader_hint: str | None = None
    epoch: int | None = None  # the acquired ownership epoch; None: this voter does not schedule
    draining: bool = False  # the process stops: no new scheduling or sends
    # The initial schedules wait for the version gate (a placement or jitter not every voter
    # applies yet): operator mutations wait too, so the ids stay 1…N (owner.py, ``_seed``).
    seeding: bool = False
