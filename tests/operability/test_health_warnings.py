"""The health document's warnings, at their boundaries (appliance.metrics.health)."""

from __future__ import annotations

from dataclasses import replace

from appliance.metrics.health import (
    CHECKPOINT_WARNING_BYTES,
    DAY_S,
    GRANT_WARNING_S,
    WARNING_RULES,
    HealthInputs,
    HealthWarning,
    WorkerView,
    health_document,
    warning_rule,
    warnings_for,
)
from appliance.metrics.runner import RunnerMetrics, StateFigures, VoterView

FIGURES = StateFigures(
    by_state={"Unknown": 0},
    records=0,
    outstanding=0,
    running=0,
    schedules={},
    ownership_node="v1",
    ownership_epoch=3,
    checkpoint_bytes=100,
    budget_bytes=200,
)
HEALTHY = HealthInputs(
    node_id="v1",
    raft={"role": "leader", "term": 4, "leader_id": "v1", "commit_index": 10, "applied_index": 10},
    peers=[VoterView("v2", True, "follower", 4, 10, 9, 1), VoterView("v3", True, "follower", 4)],
    figures=FIGURES,
    unknown_ids=[],
    acquired_epoch=3,
    grant_expires_at="2099-01-01T00:00:00Z",
    grant_seconds_left=10 * GRANT_WARNING_S,
    worker=WorkerView("http://127.0.0.1:1", True, True),
    voters_total=3,
)


def codes(inputs: HealthInputs) -> list[str]:
    return [w["code"] for w in warnings_for(inputs)]


def test_a_healthy_cluster_has_no_warnings() -> None:
    assert codes(HEALTHY) == []


def test_no_quorum_when_fewer_than_a_majority_of_voters_answer() -> None:
    both_down = replace(HEALTHY, peers=[VoterView("v2", False), VoterView("v3", False)])
    assert codes(both_down) == ["no_quorum", "voter_unreachable", "voter_unreachable"]
    assert warnings_for(both_down)[0]["severity"] == "critical"


def test_one_voter_down_is_unreachable_and_quorum_at_risk() -> None:
    one_down = replace(HEALTHY, peers=[HEALTHY.peers[0], VoterView("v3", False)])
    warnings = warnings_for(one_down)
    assert [w["code"] for w in warnings] == ["quorum_at_risk", "voter_unreachable"]
    assert "v3" in warnings[1]["message"]
    assert "losing one more" in warnings[0]["message"]


def test_five_voters_with_one_down_are_not_at_risk_yet() -> None:
    peers = [VoterView(f"v{i}", True) for i in (2, 3, 4)] + [VoterView("v5", False)]
    assert codes(replace(HEALTHY, peers=peers, voters_total=5)) == ["voter_unreachable"]
    two_down = [VoterView(f"v{i}", True) for i in (2, 3)] + [
        VoterView("v4", False),
        VoterView("v5", False),
    ]
    assert codes(replace(HEALTHY, peers=two_down, voters_total=5)) == [
        "quorum_at_risk", "voter_unreachable", "voter_unreachable"
    ]  # fmt: skip


def test_a_single_voter_is_never_at_risk() -> None:
    assert codes(replace(HEALTHY, peers=[], voters_total=1)) == []


def test_no_leader_is_warned() -> None:
    assert codes(replace(HEALTHY, raft={**HEALTHY.raft, "leader_id": None})) == ["no_leader"]


def _grant(left_s: float) -> list[tuple[str, str]]:
    return [
        (w["code"], w["severity"])
        for w in warnings_for(replace(HEALTHY, grant_seconds_left=left_s))
    ]


def test_grant_expiry_is_warned_at_30_7_and_1_days_and_expired_at_zero() -> None:
    assert GRANT_WARNING_S == 30 * DAY_S
    assert _grant(30 * DAY_S) == []
    assert _grant(30 * DAY_S - 1) == [("grant_expiring", "notice")]
    assert _grant(7 * DAY_S) == [("grant_expiring", "notice")]
    assert _grant(7 * DAY_S - 1) == [("grant_expiring", "warning")]
    assert _grant(1 * DAY_S) == [("grant_expiring", "warning")]
    assert _grant(1 * DAY_S - 1) == [("grant_expiring", "critical")]
    assert _grant(1) == [("grant_expiring", "critical")]
    assert _grant(0) == [("grant_expired", "critical")]


def test_another_area_adds_a_warning_with_one_rule() -> None:
    @warning_rule
    def _growth(h: HealthInputs):
        if h.extra.get("log_bytes", 0) > 100:
            yield HealthWarning("log_growing", "notice", "the log is large")

    try:
        assert codes(replace(HEALTHY, extra={"log_bytes": 101})) == ["log_growing"]
        assert codes(replace(HEALTHY, extra={"log_bytes": 100})) == []
        # most severe first, whatever the registration order
        mixed = replace(HEALTHY, extra={"log_bytes": 101}, raft={**HEALTHY.raft, "leader_id": None})
        assert codes(mixed) == ["no_leader", "log_growing"]
    finally:
        WARNING_RULES.remove(_growth)


def test_checkpoint_near_cap_from_eighty_percent_of_the_budget() -> None:
    limit = CHECKPOINT_WARNING_BYTES
    assert limit == 3_355_443
    below = replace(HEALTHY, figures=replace(FIGURES, budget_bytes=limit - 1))
    at = replace(HEALTHY, figures=replace(FIGURES, budget_bytes=limit))
    assert codes(below) == []
    assert codes(at) == ["checkpoint_near_cap"]


def test_unknown_occurrences_await_an_operator_and_are_listed_bounded() -> None:
    many = replace(HEALTHY, unknown_ids=list(range(1, 40)))
    (warning,) = warnings_for(many)
    assert warning["code"] == "unknown_occurrences"
    assert warning["message"].startswith("39 Unknown occurrence(s)")
    assert health_document(many)["unknown_occurrences"] == list(range(1, 17))


def test_worker_unreachable_and_refused_bearer_are_warned() -> None:
    down = replace(HEALTHY, worker=WorkerView("http://w", False, False, "refused"))
    refused = replace(HEALTHY, worker=WorkerView("http://w", True, False, "HTTP 401"))
    assert codes(down) == ["worker_unreachable"]
    assert codes(refused) == ["worker_refuses_bearer"]


def test_health_document_lists_every_voter_with_role_term_reachability_and_lag() -> None:
    document = health_document(HEALTHY)
    voters = {v["node"]: v for v in document["voters"]}
    assert voters["v1"]["self"] is True and voters["v1"]["role"] == "leader"
    assert voters["v2"]["lag_entries"] == 1 and voters["v2"]["reachable"] is True
    assert document["ownership"] == {"node": "v1", "epoch": 3, "acquired_here": True}


def test_admission_reasons_are_a_closed_set() -> None:
    metrics = RunnerMetrics()
    metrics.record_admission(200)
    metrics.record_admission(403, "stale_epoch")
    metrics.record_admission(403, "made-up-by-a-bug")
    metrics.record_admission(409)
    metrics.record_admission(503)
    got = {
        (s.labels["result"], s.labels["reason"]): s.value
        for family in metrics.registry.collect()
        if family.name == "appliance_admissions"
        for s in family.samples
        if s.name.endswith("_total")
    }
    assert got == {
        ("granted", "none"): 1,
        ("refused", "stale_epoch"): 1,
        ("refused", "other"): 1,
        ("refused", "not_owner"): 1,
        ("refused", "uncertain"): 1,
    }
