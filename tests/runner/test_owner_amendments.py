"""The owner runs the contract in force (issue 20): an amendment committed through the operator
command changes what the next claim carries; values are checked before anything is proposed."""

from __future__ import annotations

import json
from typing import Any

from tests.runner.harness import T0, Voter, config, definition

# The genesis grant expires one hour after T0: without the renewal nothing is claimed after it.
GENESIS_EXPIRY = "2027-01-15T09:00:00Z"
RENEWED = "2027-02-01T00:00:00Z"


def _command(v: Voter, **doc: Any) -> dict[str, Any]:
    return v.command(json.dumps(doc))


def _create(v: Voter) -> None:
    assert _command(v, action="create", definition=definition())["ok"]


def _bindings(v: Voter) -> list[dict[str, Any]]:
    return [binding for kind, binding in v.worker.calls if kind == "exec"]


def test_a_renewed_grant_is_carried_by_the_next_claims_and_shown_by_status() -> None:
    with Voter(config(expires_at=GENESIS_EXPIRY)) as v:
        _create(v)
        v.advance_to(T0 + 60)
        v.wait_state(1, "Succeeded")
        assert _bindings(v)[0]["authority"]["expires_at"] == GENESIS_EXPIRY
        reply = _command(
            v, action="renew_grant", expires_at="2027-02-01T01:00:00+01:00", heap_mb=96
        )
        assert reply == {
            "ok": True,
            "action": "renew_grant",
            "amendment": 1,
            "changes": {"expires_at": RENEWED, "heap_mb": 96},  # normalized to UTC
        }
        # Past the genesis expiry, occurrences are still claimed, with the renewed authority.
        v.advance_to(T0 + 3600 + 60)
        record = v.wait_state(2, "Succeeded")
        assert record.due_s == T0 + 3600 + 60
        authority = _bindings(v)[-1]["authority"]
        assert (authority["expires_at"], authority["heap_mb"]) == (RENEWED, 96)
        status = _command(v, action="status")
        assert status["grant_expires_at"] == RENEWED and status["grant_expired"] is False
        assert status["contract"]["amendment"] == 1
        assert status["contract"]["remote"]["heap_mb"] == 96
        assert [(e["amendment"], e["kind"]) for e in v.events("contract_amended")] == [
            (1, "renew_grant")
        ]


def test_without_the_renewal_nothing_is_claimed_after_the_genesis_expiry() -> None:
    with Voter(config(expires_at=GENESIS_EXPIRY)) as v:
        _create(v)
        v.advance_to(T0 + 3600 + 60)
        assert _command(v, action="status")["grant_expired"] is True
        assert _bindings(v) == []


def test_a_rotated_worker_identity_is_bound_by_the_next_claim() -> None:
    with Voter() as v:
        _create(v)
        reply = _command(v, action="amend_remote", worker_id="w2")
        assert reply["ok"] and reply["changes"] == {"worker_id": "w2"}
        v.advance_to(T0 + 60)
        v.wait_state(1, "Succeeded")
        assert _bindings(v)[0]["worker_id"] == "w2"


def test_limits_are_raised_and_lowered_only_when_the_state_fits() -> None:
    with Voter() as v:
        _create(v)
        assert _command(v, action="create", definition=definition(name="second"))["ok"]
        below = _command(v, action="amend_limits", schedules=1)
        assert below["ok"] is False and below["status"] == 400
        assert "limits.schedules: 1 is below the current 2" in below["error"]["message"]
        reply = _command(v, action="amend_limits", schedules=2, records=8192)
        assert reply["ok"] and reply["amendment"] == 1  # the refused one took no index
        assert reply["changes"]["limits"]["schedules"] == 2
        limits = _command(v, action="status")["contract"]["limits"]
        assert (limits["schedules"], limits["records"]) == (2, 8192)
        third = _command(v, action="create", definition=definition(name="third"))
        assert third["ok"] is False  # the amended limit is in force
        assert _command(v, action="amend_limits", schedules=3)["amendment"] == 2
        assert _command(v, action="create", definition=definition(name="third"))["ok"]


def test_bad_values_are_refused_naming_the_field_and_nothing_is_proposed() -> None:
    with Voter() as v:
        cases = [
            ({"action": "renew_grant", "expires_at": "tomorrow"}, "expires_at"),
            (
                {"action": "renew_grant", "expires_at": "2030-01-01T00:00:00Z", "session": "a b"},
                "session",
            ),
            ({"action": "renew_grant", "expires_at": "2000-01-01T00:00:00Z"}, "expires_at"),
            ({"action": "amend_remote"}, "url"),
            ({"action": "amend_remote", "url": "ftp://x"}, "url"),
            ({"action": "amend_limits"}, "limits"),
            ({"action": "amend_limits", "records": 0}, "limits.records"),
            (
                {"action": "renew_grant", "expires_at": "2030-01-01T00:00:00Z", "heap_mb": 15},
                "heap_mb",
            ),
        ]
        for doc, field in cases:
            reply = v.command(json.dumps(doc))
            assert reply["ok"] is False and reply["status"] == 400, (doc, reply)
            assert reply["error"]["message"].startswith(field), (doc, reply)
        assert _command(v, action="status")["contract"]["amendment"] == 0


# ---- issue 36, finding 6: the operator's base, and the grant's horizon ------------------------


def test_two_amendments_built_on_the_same_base_the_second_is_refused_as_stale() -> None:
    """Two operators read ``status`` (amendment 0) and amend: the second is refused, naming the
    amendment in force, and changes nothing; without ``base_amendment`` the owner still fills in
    the one in force (as before)."""
    with Voter() as v:
        base = _command(v, action="status")["contract"]["amendment"]
        assert base == 0
        first = _command(v, action="amend_limits", records=8192, base_amendment=base)
        assert first["ok"] and first["amendment"] == 1, first
        second = _command(v, action="amend_limits", records=4000, base_amendment=base)
        assert second["ok"] is False and second["status"] == 400, second
        message = second["error"]["message"]
        assert message.startswith("base_amendment") and "amendment 1" in message, message
        assert "read status and amend again" in message
        renew = _command(
            v, action="renew_grant", expires_at="2027-06-01T00:00:00Z", base_amendment=base
        )
        assert renew["ok"] is False and "amendment 1" in renew["error"]["message"], renew
        limits = _command(v, action="status")["contract"]["limits"]
        assert limits["records"] == 8192  # the first stays; nothing was overwritten
        # A base the cluster has not reached is stale as well, and so refused.
        ahead = _command(v, action="amend_remote", worker_id="w2", base_amendment=5)
        assert ahead["ok"] is False and "amendment 1" in ahead["error"]["message"], ahead
        # Without a base the owner builds on the amendment in force.
        assert _command(v, action="amend_limits", records=4000)["amendment"] == 2
        assert _command(v, action="amend_remote", worker_id="w2", base_amendment=2)["ok"]


def test_a_malformed_base_amendment_is_refused_naming_the_field() -> None:
    with Voter() as v:
        for bad in ("0", -1, True, 1.0, 2**63):
            reply = _command(v, action="amend_limits", records=8192, base_amendment=bad)
            assert reply["ok"] is False and reply["status"] == 400, (bad, reply)
            assert reply["error"]["message"].startswith("base_amendment"), (bad, reply)
        assert _command(v, action="status")["contract"]["amendment"] == 0
        # The range's ends: INT_MAX is a well-formed base (stale here), one more is not.
        from appliance.core.occurrence import INT_MAX

        at_most = _command(v, action="amend_limits", records=8192, base_amendment=INT_MAX)
        assert at_most["ok"] is False and "the contract in force is amendment 0" in str(at_most)
        over = _command(v, action="amend_limits", records=8192, base_amendment=INT_MAX + 1)
        assert over["error"]["message"] == f"base_amendment: must be between 0 and {INT_MAX}"
        assert _command(v, action="amend_limits", records=8192, base_amendment=0)["ok"]


def test_grant_renewal_is_bounded_by_the_documented_horizon() -> None:
    """At most GRANT_HORIZON_DAYS_MAX days after now: exactly at it passes, a second past it
    (and 9999-12-31) is refused naming expires_at, before anything is proposed."""
    from appliance.core.amendments import GRANT_HORIZON_DAYS_MAX
    from appliance.core.binding import instant_text

    horizon_s = GRANT_HORIZON_DAYS_MAX * 86_400
    assert GRANT_HORIZON_DAYS_MAX == 1826  # five years
    with Voter(now_s=T0) as v:
        for expires_at in ("9999-12-31T23:59:59Z", instant_text(T0 + horizon_s + 1)):
            reply = _command(v, action="renew_grant", expires_at=expires_at)
            assert reply["ok"] is False and reply["status"] == 400, (expires_at, reply)
            message = reply["error"]["message"]
            assert message.startswith("expires_at") and "1826 days" in message, message
        assert _command(v, action="status")["contract"]["amendment"] == 0
        at_limit = _command(v, action="renew_grant", expires_at=instant_text(T0 + horizon_s))
        assert at_limit["ok"] and at_limit["amendment"] == 1, at_limit
