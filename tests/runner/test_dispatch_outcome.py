"""The owner's decision for every answer to a dispatch (appliance/owner/dispatch_outcome.py).

One test per row of docs/protocol.md's "worker answer → owner's action" table, plus the
backoff bounds."""

from __future__ import annotations

import pytest

from appliance.core.occurrence import OccurrenceState
from appliance.owner.dispatch_outcome import (
    FENCE_BACKOFF_FIRST_S,
    FENCE_BACKOFF_MAX_S,
    RESEND_FIRST_S,
    RESEND_MAX_S,
    Committed,
    Fence,
    MarkUnknown,
    Observe,
    RecordFailed,
    Resend,
    after_exec,
    after_fenced_observation,
    at_deadline,
    fence_backoff_s,
    resend_delay_s,
)

S = OccurrenceState
PERMIT = "granted in epoch 1 to worker incarnation inc-1"


def committed(
    state: OccurrenceState = S.RUNNING,
    permit: str | None = None,
    *,
    epoch_held: bool = True,
    grant_expired: bool = False,
    fenced_before: int = 0,
) -> Committed:
    return Committed(state, permit, epoch_held, grant_expired, fenced_before)


def test_accepted_is_observed() -> None:
    assert after_exec("accepted", None, "", committed(), 1) == Observe()


@pytest.mark.parametrize("code", ["pool_full", "engine_unavailable"])
def test_not_dispatched_re_sends_the_same_binding_after_a_backoff(code: str) -> None:
    assert after_exec("not_dispatched", code, "", committed(), 1) == Resend(RESEND_FIRST_S, code)
    assert after_exec("not_dispatched", code, "", committed(), 2) == Resend(
        RESEND_FIRST_S * 2, code
    )


def test_not_dispatched_past_the_grant_expiry_is_fenced_not_re_sent() -> None:
    decision = after_exec("not_dispatched", "pool_full", "", committed(grant_expired=True), 3)
    assert isinstance(decision, Fence) and "grant expired" in decision.reason


def test_not_dispatched_without_this_owners_epoch_is_never_re_sent() -> None:
    decision = after_exec("not_dispatched", "pool_full", "", committed(epoch_held=False), 1)
    assert not isinstance(decision, Resend)


@pytest.mark.parametrize("state", [S.UNKNOWN, S.CANCELLING, S.SUCCEEDED])
def test_only_a_running_attempt_is_re_sent_or_fenced(state: OccurrenceState) -> None:
    for kind in ("not_dispatched", "uncertain", "refused"):
        assert after_exec(kind, "pool_full", "", committed(state), 1) == Observe()


def test_an_uncertain_send_without_a_permit_is_fenced_with_its_evidence() -> None:
    decision = after_exec("uncertain", None, "ambiguous send: read timeout", committed(), 1)
    assert decision == Fence(
        "dispatch uncertain, no permit committed: ambiguous send: read timeout", 0
    )


@pytest.mark.parametrize("kind", ["uncertain", "refused", "not_dispatched"])
def test_with_a_committed_permit_the_attempt_is_observed_not_fenced(kind: str) -> None:
    assert after_exec(kind, "admission_uncertain", "", committed(permit=PERMIT), 1) == Observe()


def test_a_definite_refusal_without_a_permit_fails_the_attempt() -> None:
    decision = after_exec("refused", "binding_mismatch", "worker refused", committed(), 1)
    assert decision == RecordFailed("worker refused: binding_mismatch")


def test_silence_past_the_deadline_fences_without_a_permit_and_is_unknown_with_one() -> None:
    fence = at_deadline(committed(), "HTTP 404 unknown_execution")
    assert isinstance(fence, Fence) and "unknown_execution" in fence.reason
    unknown = at_deadline(committed(permit=PERMIT), "worker unreachable")
    assert isinstance(unknown, MarkUnknown)
    assert PERMIT in unknown.reason and "no outcome observed" in unknown.reason
    assert "worker unreachable" in unknown.reason
    assert at_deadline(committed(S.UNKNOWN, PERMIT), "x") == Observe()


def test_a_worker_fenced_before_consume_fences_without_a_permit_and_is_unknown_with_one() -> None:
    fence = after_fenced_observation(committed(), "admission uncertain: no quorum")
    assert isinstance(fence, Fence) and "no quorum" in fence.reason
    unknown = after_fenced_observation(committed(permit=PERMIT), "interrupted before consume")
    assert isinstance(unknown, MarkUnknown)
    assert "fenced before consume" in unknown.reason and PERMIT in unknown.reason
    assert after_fenced_observation(committed(S.UNKNOWN, PERMIT), "x") == Observe()


def test_the_re_send_backoff_doubles_and_is_bounded() -> None:
    delays = [resend_delay_s(n) for n in range(1, 40)]
    assert delays[0] == RESEND_FIRST_S
    assert delays == sorted(delays) and max(delays) == RESEND_MAX_S
    assert resend_delay_s(0) == RESEND_FIRST_S


def test_the_first_fence_claims_again_at_once_later_ones_back_off_to_a_bound() -> None:
    assert fence_backoff_s(0) == 0
    assert fence_backoff_s(1) == FENCE_BACKOFF_FIRST_S
    assert fence_backoff_s(2) == FENCE_BACKOFF_FIRST_S * 2
    assert fence_backoff_s(10_000) == FENCE_BACKOFF_MAX_S
    backoffs = [fence_backoff_s(n) for n in range(0, 64)]
    assert backoffs == sorted(backoffs)


def test_the_fence_backoff_grows_with_the_fences_the_occurrence_already_had() -> None:
    decision = after_exec("uncertain", None, "reset", committed(fenced_before=3), 1)
    assert isinstance(decision, Fence) and decision.backoff_s == fence_backoff_s(3)
