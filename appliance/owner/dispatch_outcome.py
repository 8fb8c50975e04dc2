"""What the owner does with the answer to a dispatch: pure decisions (issues 23 and 17).

Theory of operation (SPEC §1, §11 "Unknown only when it is true", seeds/000)
----------------------------------------------------------------------------
A dispatch ends in one of three kinds of knowledge, and each has exactly one way out:

* **Not dispatched** — a well-formed protocol-1 ``pool_full`` or ``engine_unavailable`` answer.
  The worker gives it before it reserves anything, so no permit was asked for. The owner keeps
  the attempt Running and re-sends *the same committed binding* after a backoff, while the
  committed record is that attempt in Running, this owner holds the binding's epoch and the
  grant has not expired. Each send restarts the ``timeout_seconds`` + grace deadline. At grant
  expiry no permit can ever be granted, so the attempt is fenced.
* **Ambiguous and no committed permit** — a timeout, a reset, any other answer, or silence past
  the deadline. The owner commits ``FenceDispatch``: the apply refuses it if an ``Admit`` for the
  invocation committed first, and otherwise proves no permit exists and refuses every later
  admission. The attempt is then definitely not launched and the occurrence is Pending again as
  the next attempt, after a backoff that grows with the fences it already had (so an unreachable
  worker is not hammered), without spending a retry.
* **Ambiguous with a committed permit** — the attempt may have run. It is observed; it becomes
  Unknown only when the outcome stays lost past the deadline, or at once when the worker reports
  the invocation fenced before consume (a permit can never become "not launched"). The reason
  names the evidence that is missing or contradicting, for ``acknowledge_stopped``.

A definite refusal (HTTP 403) before any permit is a failure of the attempt, as before.

Everything here is a pure function of what the committed state says about the attempt
(:class:`Committed`) and the worker's answer; the loop performs the decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from appliance.core.occurrence import OccurrenceState

S = OccurrenceState

# A well-formed protocol-1 answer with one of these codes means the worker reserved nothing.
NOT_DISPATCHED_CODES: Final = frozenset({"pool_full", "engine_unavailable"})
RESEND_FIRST_S: Final = 0.1  # real seconds before the first re-send
RESEND_MAX_S: Final = 1.0  # real seconds: the longest pause between two sends
FENCE_BACKOFF_FIRST_S: Final = 2  # wall seconds before the attempt after a second fence
FENCE_BACKOFF_MAX_S: Final = 60


@dataclass(frozen=True)
class Committed:
    """What the committed state says about the dispatched attempt (the same attempt)."""

    state: OccurrenceState
    permit: str | None  # a description of the committed permit, or None when there is none
    epoch_held: bool  # this owner holds the binding's epoch
    grant_expired: bool  # the grant's expires_at has passed: no permit can be granted any more
    fenced_before: int  # earlier attempts of this occurrence that were fenced (not launched)


@dataclass(frozen=True)
class Observe:
    """Observe the attempt (or keep observing it)."""


@dataclass(frozen=True)
class Resend:
    """Send exactly the committed binding again after ``delay_s`` real seconds."""

    delay_s: float
    code: str  # the worker's not-dispatched code


@dataclass(frozen=True)
class Fence:
    """Commit ``FenceDispatch``; the next attempt may be claimed ``backoff_s`` wall seconds on."""

    reason: str
    backoff_s: int


@dataclass(frozen=True)
class MarkUnknown:
    reason: str


@dataclass(frozen=True)
class RecordFailed:
    reason: str


Decision = Observe | Resend | Fence | MarkUnknown | RecordFailed


def resend_delay_s(sends: int) -> float:
    """The pause after the ``sends``-th send answered "not dispatched" (doubling, bounded)."""
    return min(RESEND_FIRST_S * 2 ** max(0, min(sends - 1, 16)), RESEND_MAX_S)


def fence_backoff_s(fenced_before: int) -> int:
    """The wait before the attempt that follows a fence: none after the first fence of an
    occurrence, then doubling up to ``FENCE_BACKOFF_MAX_S``."""
    if fenced_before <= 0:
        return 0
    return min(FENCE_BACKOFF_FIRST_S * 2 ** min(fenced_before - 1, 16), FENCE_BACKOFF_MAX_S)


def _fence(reason: str, c: Committed) -> Fence:
    return Fence(reason, fence_backoff_s(c.fenced_before))


def after_exec(kind: str, code: str | None, detail: str, c: Committed, sends: int) -> Decision:
    """The answer to a send: ``kind`` is the worker client's classification (accepted, refused,
    not_dispatched, uncertain); ``sends`` counts the sends of this binding so far."""
    if kind == "accepted" or c.state is not S.RUNNING:
        return Observe()  # Unknown and Cancelling attempts keep their own paths
    if kind == "not_dispatched" and c.permit is None:
        if c.epoch_held and not c.grant_expired:
            return Resend(resend_delay_s(sends), str(code))
        why = "the grant expired" if c.grant_expired else "this owner's epoch ended"
        return _fence(f"not dispatched ({code}) and re-sending stopped: {why}", c)
    if c.permit is not None:
        return Observe()  # an Admit committed: its outcome is observed, Unknown only if lost
    if kind == "refused":
        return RecordFailed(f"worker refused: {code}")
    text = f"{code} {detail}".strip() if code else detail
    return _fence(f"dispatch uncertain, no permit committed: {text}", c)


def at_deadline(c: Committed, last_observation: str) -> Decision:
    """No outcome within ``timeout_seconds`` + grace of the last send."""
    if c.state is not S.RUNNING:
        return Observe()  # Unknown stays observed slowly: a confirmed outcome still wins
    if c.permit is None:
        return _fence(
            "no permit committed and no answer within timeout_seconds + grace"
            f" (last observation: {last_observation or 'none'})",
            c,
        )
    return MarkUnknown(
        f"permit committed ({c.permit}) but no outcome observed within timeout_seconds + grace"
        f" (last observation: {last_observation or 'none'})"
    )


def after_fenced_observation(c: Committed, fence_reason: str) -> Decision:
    """The worker reports the invocation ``fenced`` (reserved, never consumed, never launched by
    that worker)."""
    if c.state is not S.RUNNING:
        return Observe()
    if c.permit is None:
        return _fence(f"worker reports the invocation fenced before consume: {fence_reason}", c)
    return MarkUnknown(
        f"permit committed ({c.permit}) but the worker reports the invocation fenced before "
        f"consume ({fence_reason}); a permit cannot be proven unused"
    )
