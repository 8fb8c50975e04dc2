"""What the owner tracks for one attempt (``Work``), and when it looks at one.

Owner-side memory, never replicated: after a takeover it is rebuilt from the committed claims.
The decisions that move a ``Work`` are appliance/owner/attempts.py; what the owner is doing with
it is its ``phase``, moved only through the table of appliance/owner/attempt_phase.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from appliance.owner.attempt_phase import AttemptPhase, PhaseEvent, next_phase
from appliance.owner.worker_answers import Capacity, ObserveResult

OBSERVE_GRACE_S: Final = 30  # wall (possibly scaled) seconds past timeout_seconds
OBSERVE_FIRST_POLL_S: Final = 0.05  # real seconds
OBSERVE_POLL_MAX_S: Final = 2.0
# Accepted behind a queue (every engine slot busy): the first look comes later. A burst queued at
# the worker otherwise costs several early observations per execution, each on the same CPU the
# queue needs; the backoff reaches OBSERVE_POLL_MAX_S for a long wait either way.
OBSERVE_QUEUED_FIRST_POLL_S: Final = 0.4  # real seconds
# An execution waiting in the worker's queue is looked at this soon once it reaches the front or
# the queue drained (appliance/owner/queue.py), not at the end of its backoff: without it
# the tail of a burst was recorded up to OBSERVE_POLL_MAX_S after it ended.
OBSERVE_AFTER_QUEUE_S: Final = 0.05  # real seconds
# After the deadline an Unknown attempt is still asked about, slowly, so that a confirmed outcome
# that arrives later (a healed link, a worker back up) resolves it (SPEC §3). Bounded: Unknown
# attempts hold running reservations, so there are at most limits.running of them.
UNKNOWN_POLL_S: Final = 10.0  # real seconds
CANCEL_RETRY_S: Final = 0.5
CANCEL_ATTEMPTS_MAX: Final = 40


@dataclass
class Work:
    """What the owner tracks for one dispatched attempt (owner-side, never replicated). Its
    ``phase`` changes only through ``move`` (the table in appliance/owner/attempt_phase.py)."""

    occurrence_id: int
    attempt: int
    binding: dict[str, Any]
    deadline_s: float  # wall (scaled) time after which a silent attempt is fenced or Unknown
    phase: AttemptPhase
    due_s: int = 0  # the occurrence's due instant (for the latency fields of the logs)
    code: str = ""  # the committed claim's code: a re-send sends exactly the same request
    sends: int = 1  # sends of this binding (0: never sent; re-sent only after "not dispatched")
    poll_s: float = OBSERVE_FIRST_POLL_S
    look: int = 0  # the generation of its next look: a look brought forward voids the old timer
    cancel_attempts: int = 0
    # What the worker last said (facts, not phases: see attempt_phase.py).
    last_observation: str = ""  # why the last observation gave no outcome (for the reasons)
    waited_for_slot: bool = False  # the last observation: accepted, not started yet
    parked: bool = False  # Unknown and no longer running at the worker: holds no slot there

    @property
    def busy(self) -> bool:
        """A worker call (or the re-send timer) owns it: nothing else may touch it."""
        return self.phase.busy

    @property
    def observing(self) -> bool:
        """Its observation is going."""
        return self.phase.observed

    def move(self, event: PhaseEvent) -> None:
        what = f"occurrence {self.occurrence_id} attempt {self.attempt}"
        self.phase = next_phase(self.phase, event, what)


def first_poll_s(capacity: Capacity | None) -> float:
    """When to look first at an accepted execution: later when the worker's answer shows every
    slot held and something queued (FIFO: this one waits behind it)."""
    if (
        capacity is not None
        and capacity.free_slots == 0
        and capacity.queue_room < capacity.max_queued
    ):
        return OBSERVE_QUEUED_FIRST_POLL_S
    return OBSERVE_FIRST_POLL_S


def waiting_for_slot(result: ObserveResult | Exception) -> bool:
    """A protocol-1 observation of an accepted execution that has not started: ``running``
    with ``started_at: null`` (docs/protocol.md, the observation route)."""
    if not isinstance(result, ObserveResult) or result.status != "running":
        return False
    document = result.document
    return isinstance(document, dict) and "started_at" in document and not document["started_at"]
