"""Contract amendments (appliance/core/amendments.py): renewal, remote change, limits change."""

from __future__ import annotations

from dataclasses import replace

import pytest

from appliance.core.amendments import HISTORY_MAX, AmendmentRefused, StaleAmendment, history
from appliance.core.errors import CoreError
from appliance.core.limits import Limits
from appliance.core.runner_errors import BindingMismatch
from appliance.core.state import (
    AmendLimits,
    AmendRemote,
    RenewGrant,
    amendment_index,
    apply,
    from_json,
    needs_amended_reader,
    remote_in_force,
)
from tests.core.runner_helpers import AUTHORITY, admit, bind, claim, owned_state
from tests.core.test_state import T0, observe

RENEWED = "2027-06-01T00:00:00Z"


def test_renew_grant_sets_the_authority_new_claims_must_carry():
    state = owned_state()
    assert not needs_amended_reader(state)
    value = apply(state, RenewGrant(0, RENEWED, T0, heap_mb=256)).value
    assert (value.amendment, value.kind) == (1, "renew_grant")
    assert amendment_index(state) == 1
    assert remote_in_force(state) == {"expires_at": RENEWED, "heap_mb": 256}
    assert needs_amended_reader(state)
    # A claim with the genesis authority is refused, naming the field; the amended one binds.
    with pytest.raises(BindingMismatch, match=r"authority\.expires_at"):
        claim(state)
    amended = replace(AUTHORITY, expires_at=RENEWED, heap_mb=256)
    binding = claim(state, authority=amended)
    assert admit(state, binding).existing is False
    # The part survives a checkpoint round trip byte for byte.
    assert from_json(state.to_json()).to_json() == state.to_json()


def test_a_binding_issued_before_the_renewal_keeps_its_authority():
    state = owned_state()
    binding = claim(state)  # genesis authority
    apply(state, RenewGrant(0, RENEWED, T0 + 1))
    assert admit(state, binding).existing is False  # admission compares with the claim


def test_renewal_bounds_and_compare_and_set():
    state = owned_state()
    with pytest.raises(AmendmentRefused, match="expires_at"):
        apply(state, RenewGrant(0, "2020-01-01T00:00:00Z", T0))
    with pytest.raises(CoreError, match="timeout_seconds"):
        apply(state, RenewGrant(0, RENEWED, T0, timeout_seconds=86_401))
    with pytest.raises(CoreError, match="heap_mb"):
        apply(state, RenewGrant(0, RENEWED, T0, heap_mb=15))
    apply(state, RenewGrant(0, RENEWED, T0, timeout_seconds=86_400, heap_mb=16))
    with pytest.raises(StaleAmendment, match="amendment 1"):
        apply(state, RenewGrant(0, RENEWED, T0))
    assert amendment_index(state) == 1


def test_amend_remote_and_a_new_timeout_are_refused_while_an_attempt_is_live():
    state = owned_state()
    claim(state)  # occurrence 1 Running
    with pytest.raises(AmendmentRefused, match="1 attempt"):
        apply(state, AmendRemote(0, T0 + 2, worker_id="worker-2"))
    with pytest.raises(AmendmentRefused, match="timeout_seconds: 1 attempt"):
        apply(state, RenewGrant(0, RENEWED, T0 + 2, timeout_seconds=60))
    assert amendment_index(state) == 0
    apply(state, RenewGrant(0, RENEWED, T0 + 2, heap_mb=64))  # the grant alone renews


def test_amend_remote_rotates_the_worker_identity():
    state = owned_state()
    apply(state, AmendRemote(0, T0, url="http://127.0.0.1:9999/", worker_id="worker-2"))
    assert remote_in_force(state) == {"url": "http://127.0.0.1:9999/", "worker_id": "worker-2"}
    with pytest.raises(BindingMismatch, match="worker_id"):
        claim(state)
    claim(state, worker_id="worker-2")
    with pytest.raises(CoreError, match="url"):
        apply(state, AmendRemote(1, T0, url="ftp://x"))


def test_limits_raise_always_lower_only_when_the_state_fits():
    state = owned_state(overlap="Concurrent")  # one schedule, one Pending record
    assert state.counts().records == 1
    raised = Limits(schedules=128, records=8192, outstanding=256, running=32)
    apply(state, AmendLimits(0, raised, T0))
    assert state.limits == raised
    reloaded = from_json(state.to_json())
    assert reloaded.limits == raised and reloaded.to_json() == state.to_json()
    observe(state, T0 + 60)  # a second Pending record
    assert state.counts().outstanding == 2
    # Lowering to exactly what is held fits; one below does not.
    apply(state, AmendLimits(1, Limits(schedules=1, records=2, outstanding=2, running=1), T0))
    with pytest.raises(AmendmentRefused, match=r"limits\.outstanding: 1 is below the current 2"):
        apply(state, AmendLimits(2, Limits(schedules=1, records=2, outstanding=1, running=1), T0))
    with pytest.raises(CoreError, match="running"):
        apply(state, AmendLimits(2, Limits(records=10, outstanding=5, running=6), T0))
    assert amendment_index(state) == 2


def test_history_keeps_the_last_amendments():
    state = owned_state()
    for i in range(HISTORY_MAX + 2):
        apply(state, RenewGrant(i, f"2027-06-{i + 1:02d}T00:00:00Z", T0))
    kept = history(state)
    assert len(kept) == HISTORY_MAX
    assert kept[-1]["amendment"] == HISTORY_MAX + 2
    assert kept[0]["amendment"] == 3


def test_the_claim_refusal_does_not_change_the_state():
    state = owned_state()
    apply(state, RenewGrant(0, RENEWED, T0))
    before = state.to_json()
    with pytest.raises(BindingMismatch):
        claim(state, authority=replace(AUTHORITY, expires_at="2027-06-02T00:00:00Z"))
    assert state.to_json() == before
    assert bind(state).authority == AUTHORITY  # binding_for takes what the owner passes


def test_the_grant_horizon_passes_exactly_at_the_limit_and_refuses_one_second_past_it():
    from appliance.core.amendments import (
        GRANT_HORIZON_DAYS_MAX,
        GRANT_HORIZON_S_MAX,
        check_grant_horizon,
    )
    from appliance.core.binding import instant_text

    assert GRANT_HORIZON_S_MAX == GRANT_HORIZON_DAYS_MAX * 86_400 == 1826 * 86_400
    at_limit = instant_text(T0 + GRANT_HORIZON_S_MAX)
    assert check_grant_horizon(at_limit, T0) == at_limit
    with pytest.raises(AmendmentRefused, match=r"^expires_at: .* more than 1826 days"):
        check_grant_horizon(instant_text(T0 + GRANT_HORIZON_S_MAX + 1), T0)
    with pytest.raises(AmendmentRefused, match="expires_at"):
        check_grant_horizon("9999-12-31T23:59:59Z", T0)


def test_every_amendment_kind_is_refused_on_a_stale_base_and_changes_nothing():
    """The compare-and-set is one rule (``_record``) shared by every amendment kind."""
    state = owned_state()
    apply(state, AmendLimits(0, Limits(records=8192), T0))
    before = state.to_json()
    stale = (
        RenewGrant(0, RENEWED, T0),
        AmendRemote(0, T0, worker_id="w2"),
        AmendLimits(0, Limits(records=9000), T0),
        AmendLimits(2, Limits(records=9000), T0),  # a base the cluster has not reached
    )
    for command in stale:
        with pytest.raises(StaleAmendment, match=r"^base_amendment: .*amendment 1"):
            apply(state, command)
    assert state.to_json() == before
