"""The attempt machine: the only code that changes what the owner is doing with an attempt.

Theory of operation
-------------------
Each attempt the owner tracks (``Work``, appliance/owner/attempts.py) is in exactly one *phase*:
what the owner is doing with it right now, which worker call (if any) is in flight for it and
whether its observation is going. The legal moves are one table, ``TRANSITIONS``, keyed by
(phase, event), in the manner of appliance/core/occurrence.py: anything not in the table raises
:class:`IllegalPhase` naming the phase and the event. A strict owner (the simulator, the tests)
raises it out of ``Owner.handle``, so a move nobody designed fails the seed that made it.

The phases, and the flags every reader derives from them:

==================== ===== ========= ==================================================
phase                busy  observed  what the owner is doing with the attempt
==================== ===== ========= ==================================================
WAITING                          claimed, not sent: waits for the worker's capacity
SENDING              yes         an exec request is in flight
DECIDING                         its exec answer is being acted on (a fence may wait
                                 for its commit); or a re-send was found not allowed
BACKING_OFF          yes         answered "not dispatched": the same binding is sent
                                 again when the backoff ends
ADOPTED                          tracked again from the committed state (a takeover,
                                 a cancel): observed or cancelled next
OBSERVING                  yes   looked at when its next look is due
LOOKING              yes   yes   an observation request is in flight
CANCELLING           yes         a cancel request is in flight (never observed)
CANCEL_PAUSED                    the cancel answer settled nothing: asked again soon
CANCELLING_OBSERVED  yes   yes   a cancel request is in flight for an observed attempt
==================== ===== ========= ==================================================

*busy*: nothing else may touch it (a worker call, or the re-send timer, owns it). *observed*:
its observation is going — its looks may be brought forward, and the drain waits for it. An
observed attempt that is being cancelled stays observed between cancel requests (the
cancellation path owns its outcome: an observation then only refreshes the pacing and queue
views). An attempt leaves the machine when it is forgotten (outcome recorded, fenced, cancelled,
or no longer this owner's); a late answer for it is then dropped by ``Attempts._current``.

Two facts about an attempt are not phases, because they are orthogonal to what the owner is
doing with it and only describe what the worker last said: ``parked`` (Unknown, and the worker
says it no longer runs: it holds no slot there, for the pacing count) and ``waited_for_slot``
(the last observation: accepted, not started — the engine's timeout starts with the run). Nor is
"never sent": ``sends == 0``.
"""

from __future__ import annotations

import enum


class AttemptPhase(enum.Enum):
    WAITING = "waiting"
    SENDING = "sending"
    DECIDING = "deciding"
    BACKING_OFF = "backing_off"
    ADOPTED = "adopted"
    OBSERVING = "observing"
    LOOKING = "looking"
    CANCELLING = "cancelling"
    CANCEL_PAUSED = "cancel_paused"
    CANCELLING_OBSERVED = "cancelling_observed"

    __hash__ = object.__hash__  # singletons: identity hashing is exact (see OccurrenceState)

    @property
    def busy(self) -> bool:
        """A worker call (or the re-send timer) owns the attempt: nothing else may touch it."""
        return self in _BUSY

    @property
    def observed(self) -> bool:
        """Its observation is going (looks may be brought forward; the drain waits for it)."""
        return self in _OBSERVED


class PhaseEvent(enum.Enum):
    SEND = "send"  # an exec request goes out
    EXEC_ANSWERED = "exec_answered"  # its answer (or a finding that it may not be sent)
    BACK_OFF = "back_off"  # "not dispatched": re-sent after a backoff
    RESEND_DUE = "resend_due"  # the backoff ended
    OBSERVE = "observe"  # observation starts (or restarts after a decision)
    LOOK = "look"  # an observation request goes out
    OBSERVE_ANSWERED = "observe_answered"
    CANCEL = "cancel"  # a cancel request goes out
    CANCEL_ANSWERED = "cancel_answered"

    __hash__ = object.__hash__


P = AttemptPhase
E = PhaseEvent

_BUSY = frozenset({P.SENDING, P.BACKING_OFF, P.LOOKING, P.CANCELLING, P.CANCELLING_OBSERVED})
_OBSERVED = frozenset({P.OBSERVING, P.LOOKING, P.CANCELLING_OBSERVED})

TRANSITIONS: dict[tuple[AttemptPhase, PhaseEvent], AttemptPhase] = {
    # Claimed, waiting for capacity: sent when the worker has room; found unsendable (the
    # grant expired, the epoch ended) it is decided as "not dispatched", i.e. fenced.
    (P.WAITING, E.SEND): P.SENDING,
    (P.WAITING, E.EXEC_ANSWERED): P.DECIDING,
    (P.WAITING, E.CANCEL): P.CANCELLING,
    # Sending: only its answer moves it (a cancel waits for it).
    (P.SENDING, E.EXEC_ANSWERED): P.DECIDING,
    # Deciding what the answer means: observe, back off to re-send, or (forgotten) nothing.
    (P.DECIDING, E.OBSERVE): P.OBSERVING,
    (P.DECIDING, E.BACK_OFF): P.BACKING_OFF,
    (P.DECIDING, E.SEND): P.SENDING,  # the backoff ended and it may still be sent
    (P.DECIDING, E.EXEC_ANSWERED): P.DECIDING,  # ... or may not: decided as not dispatched
    # Backing off: the timer ends it.
    (P.BACKING_OFF, E.RESEND_DUE): P.DECIDING,
    # Tracked again from the committed state.
    (P.ADOPTED, E.OBSERVE): P.OBSERVING,
    (P.ADOPTED, E.CANCEL): P.CANCELLING,
    # Observed: looked at, answered, and observed again after a decision.
    (P.OBSERVING, E.LOOK): P.LOOKING,
    (P.OBSERVING, E.OBSERVE): P.OBSERVING,
    (P.OBSERVING, E.CANCEL): P.CANCELLING_OBSERVED,
    (P.LOOKING, E.OBSERVE_ANSWERED): P.OBSERVING,
    # Cancelling: asked until a definite answer; an observed attempt stays observed meanwhile.
    (P.CANCELLING, E.CANCEL_ANSWERED): P.CANCEL_PAUSED,
    (P.CANCEL_PAUSED, E.CANCEL): P.CANCELLING,
    (P.CANCELLING_OBSERVED, E.CANCEL_ANSWERED): P.OBSERVING,
}


class IllegalPhase(Exception):
    """An attempt move the phase table does not allow; nothing was changed."""


def next_phase(phase: AttemptPhase, event: PhaseEvent, what: str = "attempt") -> AttemptPhase:
    """The phase after ``event``, or :class:`IllegalPhase` naming both (``what``: the attempt)."""
    try:
        return TRANSITIONS[(phase, event)]
    except KeyError:
        raise IllegalPhase(f"{what}: {event.value} is not allowed in phase {phase.value}") from None
