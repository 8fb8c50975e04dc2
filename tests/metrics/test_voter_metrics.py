"""Scraping ``GET /metrics`` and the history routes of a real voter after a known workload.

The workload is exact because the clock is manual: a ``Skip``/``Skip`` every-minute schedule is
created at T0+1, its T0+60 slot runs at T0+61, then the voter "sleeps" until T0+241 — slots T0+120
and T0+180 are missed (dropped, reason ``missed``) and T0+240, 1 s late and inside the 5 s grace,
runs. Every number below follows from that script.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from appliance.core.limits import CHECKPOINT_BYTES_MAX
from appliance.runner.worker_client import ObserveResult
from tests.metrics.conftest import Live, samples, value
from tests.runner.harness import T0, definition, wait_until

EXPIRES_AT_S = datetime(2099, 1, 1, tzinfo=UTC).timestamp()


def _create(live: Live, **policy: object) -> int:
    reply = live.voter.command(json.dumps({"action": "create", "definition": definition(**policy)}))
    assert reply["ok"], reply
    return reply["id"]


def _run_two_slots_across_downtime(live: Live) -> None:
    assert _create(live) == 1
    live.voter.advance_to(T0 + 61)
    live.voter.wait_state(1, "Succeeded")
    live.voter.advance_to(T0 + 241)
    live.voter.wait_state(2, "Succeeded")


def test_two_skip_dropped_slots_after_downtime_are_counted_exactly(live: Live) -> None:
    _run_two_slots_across_downtime(live)
    text = live.scrape()
    dropped = "appliance_schedule_slots_dropped_total"
    assert value(text, dropped, schedule="1", reason="missed") == 2
    assert value(text, dropped, schedule="1", reason="overlap") == 0
    assert value(text, dropped, schedule="1", reason="capacity") == 0
    assert value(text, "appliance_schedule_slots_selected_total", schedule="1") == 2
    assert value(text, "appliance_occurrences", state="Succeeded") == 2
    for state in ("Pending", "Running", "Cancelling", "Cancelled", "Failed", "Unknown"):
        assert value(text, "appliance_occurrences", state=state) == 0
    assert value(text, "appliance_occurrences_records") == 2
    assert value(text, "appliance_occurrences_unknown") == 0
    assert value(text, "appliance_schedules") == 1


def test_dispatch_latency_and_admissions_follow_the_due_instants(live: Live) -> None:
    _run_two_slots_across_downtime(live)
    text = live.scrape()
    # Both slots were accepted exactly 1 s after their due instant (manual clock).
    assert value(text, "appliance_dispatch_latency_seconds_count") == 2
    assert value(text, "appliance_dispatch_latency_seconds_sum") == 2.0
    assert value(text, "appliance_dispatch_latency_seconds_bucket", le="0.5") == 0
    assert value(text, "appliance_dispatch_latency_seconds_bucket", le="1.0") == 2
    assert value(text, "appliance_admissions_total", result="granted", reason="none") == 2
    refused = [
        k
        for k in samples(text)
        if k[0] == "appliance_admissions_total" and ("result", "refused") in k[1]
    ]
    assert refused == []


def test_proposal_commit_latency_counts_every_committed_proposal(live: Live) -> None:
    _run_two_slots_across_downtime(live)
    text = live.scrape()
    committed = value(text, "appliance_proposals_total", outcome="committed")
    # At least: acquire, create, and per slot an observation (which carries the claim), an
    # admission, an outcome.
    assert committed >= 2 + 2 * 3
    assert value(text, "appliance_proposal_commit_seconds_count") == committed


def test_raft_ownership_store_and_grant_gauges_read_the_live_voter(live: Live) -> None:
    _run_two_slots_across_downtime(live)
    text = live.scrape()
    raft = live.voter.replication.status()
    assert value(text, "appliance_raft_role", role="leader") == 1
    assert value(text, "appliance_raft_role", role="follower") == 0
    assert value(text, "appliance_raft_term") == raft["term"]
    assert value(text, "appliance_raft_commit_index") == value(text, "appliance_raft_applied_index")
    assert value(text, "appliance_ownership_epoch") == 1
    assert value(text, "appliance_ownership_acquired") == 1
    size = live.voter.machine.read(lambda st: st.size_bytes)
    assert value(text, "appliance_checkpoint_bytes") == size
    assert value(text, "appliance_checkpoint_bytes_max") == CHECKPOINT_BYTES_MAX
    assert value(text, "appliance_grant_expiry_seconds") == EXPIRES_AT_S - (T0 + 241)


def test_history_route_shows_drop_counters_recent_reasons_and_timelines(live: Live) -> None:
    _run_two_slots_across_downtime(live)
    history = live.json("/scheduler/v1/schedules/1/history")
    assert history["_status"] == 200 and history["local_view"] is True
    assert history["dropped"] == {"missed": 2, "overlap": 0, "capacity": 0}
    assert [(d["reason"], d["count"]) for d in history["recent_drops"]] == [("missed", 2)]
    assert "code" not in history["schedule"]["definition"]
    assert history["schedule"]["definition"]["code_bytes"] == len("console.log(1)")
    dues = [o["due_at"] for o in history["occurrences"]]
    assert dues == ["2027-01-15T08:01:00Z", "2027-01-15T08:04:00Z"]
    timeline = history["occurrences"][1]["timeline"]
    assert [step["state"] for step in timeline] == ["Pending", "Running", "Succeeded"]
    assert history["occurrences"][1]["execution_id"] == "s1-o2-a1"


def test_occurrence_detail_route_answers_one_record_and_refuses_bad_ids(live: Live) -> None:
    _run_two_slots_across_downtime(live)
    detail = live.json("/scheduler/v1/occurrences/2")
    assert detail["_status"] == 200
    occurrence = detail["occurrence"]
    assert occurrence["id"] == 2 and occurrence["schedule_id"] == 1
    assert occurrence["due"] == T0 + 240 and occurrence["attempt"] == 1
    assert occurrence["state"] == "Succeeded" and occurrence["failure_reason"] is None
    assert occurrence["schedule_name"] == "job"
    assert live.json("/scheduler/v1/occurrences/3")["_status"] == 404
    for bad in ("0", "abc", "-1", "1" * 20):
        assert live.get(f"/scheduler/v1/occurrences/{bad}").status == 400, bad
    assert live.json("/scheduler/v1/schedules/9/history")["_status"] == 404


def test_an_unknown_occurrence_is_counted_and_warned_until_acknowledged(live: Live) -> None:
    live.voter.worker.on_observe = lambda eid: ObserveResult("lost")
    _create(live)
    live.voter.advance_to(T0 + 61)
    live.voter.wait_state(1, "Unknown")
    text = live.scrape()
    assert value(text, "appliance_occurrences_unknown") == 1
    assert value(text, "appliance_occurrences", state="Unknown") == 1
    assert value(text, "appliance_occurrences_running") == 1
    health = live.json("/scheduler/v1/health")
    codes = [w["code"] for w in health["warnings"]]
    assert "unknown_occurrences" in codes
    assert health["unknown_occurrences"] == [1]
    live.voter.command(
        json.dumps(
            {
                "action": "acknowledge_stopped",
                "occurrence_id": 1,
                "dispatcher_and_work_quiesced": True,
            }
        )
    )
    wait_until(lambda: live.voter.state_of(1) == "Abandoned", "Abandoned")
    text = live.scrape()
    assert value(text, "appliance_occurrences_unknown") == 0
    assert value(text, "appliance_occurrences", state="Abandoned") == 1
    assert "unknown_occurrences" not in [
        w["code"] for w in live.json("/scheduler/v1/health")["warnings"]
    ]


def test_metrics_and_views_need_the_operator_or_recovery_bearer(live: Live) -> None:
    paths = [
        "/metrics",
        "/scheduler/v1/health",
        "/scheduler/v1/occurrences/1",
        "/scheduler/v1/occurrences/1/output",
        "/scheduler/v1/schedules/1/history",
    ]
    for path in paths:
        assert live.get(path, role=None).status == 401, path
        for role in ("worker", "admission", "cluster"):
            assert live.get(path, role=role).status == 401, (path, role)
        assert live.get(path, headers={"Origin": "http://x"}).status == 403, path
    assert live.get("/metrics", role="recovery").status == 200


def _completed_with_output(text: str):
    document = {
        "protocol": 1,
        "status": "completed",
        "output": {"text": text, "bytes": len(text.encode()), "truncated": False},
    }
    return lambda eid: ObserveResult("completed", document)


def test_output_route_fetches_console_output_from_the_worker_not_the_checkpoint(
    live: Live,
) -> None:
    live.voter.worker.on_observe = _completed_with_output("tick\n")
    _create(live)
    live.voter.advance_to(T0 + 61)
    live.voter.wait_state(1, "Succeeded")
    observed_before = live.voter.worker.count("observe")
    reply = live.json("/scheduler/v1/occurrences/1/output")
    assert reply["_status"] == 200
    assert reply["execution_id"] == "s1-o1-a1" and reply["attempt"] == 1
    assert reply["output"] == {"text": "tick\n", "bytes": 5, "truncated": False}
    # Fetched now, through the worker's executions route; never stored in the checkpoint.
    assert live.voter.worker.count("observe") == observed_before + 1
    assert b"tick" not in live.voter.machine.read(lambda st: st.to_json())


def test_output_reply_is_bounded_at_64_kib(live: Live) -> None:
    from appliance.metrics.voter import OUTPUT_REPLY_BYTES_MAX

    _create(live)
    live.voter.advance_to(T0 + 61)
    live.voter.wait_state(1, "Succeeded")
    live.voter.worker.on_observe = _completed_with_output("x" * OUTPUT_REPLY_BYTES_MAX)
    exact = live.json("/scheduler/v1/occurrences/1/output")["output"]
    assert exact["bytes"] == OUTPUT_REPLY_BYTES_MAX and exact["truncated"] is False
    live.voter.worker.on_observe = _completed_with_output("x" * (OUTPUT_REPLY_BYTES_MAX + 1))
    over = live.json("/scheduler/v1/occurrences/1/output")["output"]
    assert len(over["text"]) == OUTPUT_REPLY_BYTES_MAX and over["truncated"] is True
    assert over["bytes"] == OUTPUT_REPLY_BYTES_MAX + 1


def test_output_of_an_unreachable_worker_is_a_502_and_of_an_undispatched_one_a_404(
    live: Live,
) -> None:
    _create(live)
    live.voter.advance_to(T0 + 61)
    live.voter.wait_state(1, "Succeeded")
    live.voter.worker.on_observe = lambda eid: ObserveResult(None, detail="connection refused")
    reply = live.json("/scheduler/v1/occurrences/1/output")
    assert reply["_status"] == 502 and reply["error"]["code"] == "worker_unavailable"
    assert live.json("/scheduler/v1/occurrences/2/output")["_status"] == 404


def test_a_deleted_schedule_leaves_the_exposition_so_labels_stay_bounded(live: Live) -> None:
    _run_two_slots_across_downtime(live)
    assert live.voter.command(json.dumps({"action": "delete", "id": 1}))["ok"]
    found = samples(live.scrape())
    assert not [k for k in found if ("schedule", "1") in k[1]]
    assert found[("appliance_schedules", ())] == 0
    # The records it left are still history (retained until retention retires them).
    assert found[("appliance_occurrences", (("state", "Succeeded"),))] == 2


def test_health_and_the_grant_gauge_read_the_renewed_grant(live: Live) -> None:
    """``health`` warns 30, 7 and 1 days before the grant *in force* expires (issue 20)."""
    now_s = T0 + 1
    for days_left, severity in ((20, "notice"), (5, "warning"), (0.5, "critical")):
        expires = datetime.fromtimestamp(now_s + days_left * 86_400, UTC)
        text = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
        reply = live.voter.command(json.dumps({"action": "renew_grant", "expires_at": text}))
        assert reply["ok"], reply
        health = live.json("/scheduler/v1/health")
        assert health["grant"]["expires_at"] == text
        warnings = [w for w in health["warnings"] if w["code"].startswith("grant")]
        assert [(w["code"], w["severity"]) for w in warnings] == [("grant_expiring", severity)]
        assert "renew-grant" in warnings[0]["message"]
        gauge = value(live.scrape(), "appliance_grant_expiry_seconds")
        assert gauge == expires.timestamp() - now_s
    far = datetime.fromtimestamp(now_s + 31 * 86_400, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert live.voter.command(json.dumps({"action": "renew_grant", "expires_at": far}))["ok"]
    health = live.json("/scheduler/v1/health")
    assert not [w for w in health["warnings"] if w["code"].startswith("grant")]
