"""``/metrics`` and history of real ``appliance runner`` voters and a real ``appliance worker``.

Issue 10, "Must show": exact counters after a known workload on real processes — two slots of a
``Skip`` schedule dropped as ``missed`` after a simulated downtime, one ``Unknown`` after a worker
kill, the worker's own ``lost`` count — and, after a failover, one voter's metrics and history
agreeing with another's (history is replicated state, not process memory).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.operability.procs import ObservedCluster, parse, sample
from tests.runner.cluster import Voter, wait_for

LONG = {
    "name": "long",
    "code": "const end = Date.now() + 600000; while (Date.now() < end) {}",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}
DROPPED = "appliance_schedule_slots_dropped_total"


def _state(voter: Voter, occurrence_id: int) -> str | None:
    for record in voter.command({"action": "list"})["occurrences"]:
        if record["id"] == occurrence_id:
            return record["state"]
    return None


def _accepted(voter: Voter, occurrence_id: int) -> bool:
    return any(
        e.get("event") == "dispatch_accepted" and e.get("occurrence") == occurrence_id
        for e in voter.events()
    )


def test_real_voter_and_worker_count_two_missed_slots_and_one_unknown_exactly(
    tmp_path: Path,
) -> None:
    cluster = ObservedCluster(tmp_path, 1, time_scale=1.0, worker=True, timeout_seconds=600)
    voter = cluster.voters["v1"]
    # The voter's clock starts 5 s after a minute boundary F of its own (shifted) calendar.
    minute_s = (int(time.time()) // 60 + 2) * 60
    voter.offset_s = minute_s + 5 - time.time()  # type: ignore[attr-defined]
    try:
        cluster.start()
        owner = cluster.owner()
        assert owner.command({"action": "create", "definition": LONG}) == {
            "ok": True,
            "action": "create",
            "id": 1,
        }
        assert owner.terminate() == 0
        # Downtime: it comes back at F+170. Slots F+60 and F+120 are due; the newest is 50 s
        # late, past the 5 s grace, so Skip drops both as missed. F+180 then runs normally.
        voter.offset_s = minute_s + 170 - time.time()  # type: ignore[attr-defined]
        voter.start()
        cluster.owner()
        wait_for(lambda: _accepted(voter, 1), "the F+180 slot to be accepted by the engine")
        cluster.worker.kill()
        cluster.worker.start()  # the new incarnation reports the killed run as lost
        wait_for(lambda: _state(voter, 1) == "Unknown", "the killed run to become Unknown")

        found = cluster.scrape_voter("v1")
        assert sample(found, DROPPED, schedule="1", reason="missed") == 2
        assert sample(found, DROPPED, schedule="1", reason="overlap") == 0
        assert sample(found, DROPPED, schedule="1", reason="capacity") == 0
        assert sample(found, "appliance_occurrences_unknown") == 1
        assert sample(found, "appliance_occurrences", state="Unknown") == 1
        assert sample(found, "appliance_occurrences_records") == 1
        assert sample(found, "appliance_schedule_slots_selected_total", schedule="1") == 1
        assert sample(found, "appliance_admissions_total", result="granted", reason="none") == 1
        assert sample(found, "appliance_dispatch_latency_seconds_count") == 1
        assert sample(found, "appliance_ownership_epoch") == 2  # one acquisition per start
        assert sample(found, "appliance_raft_role", role="leader") == 1
        assert sample(found, "appliance_store_log_entries") == sample(
            found, "appliance_raft_last_log_index"
        )

        worker = cluster.scrape_worker()
        assert worker.status == 200
        counts = parse(worker.body.decode())
        assert sample(counts, "appliance_engine_executions_total", outcome="lost") == 1
        for outcome in ("completed", "failed", "timed_out", "cancelled"):
            assert sample(counts, "appliance_engine_executions_total", outcome=outcome) == 0
        assert sample(counts, "appliance_engine_pool_running") == 0
        assert sample(counts, "appliance_engine_pool_max_concurrent") == 4
        assert sample(counts, "appliance_worker_store_invocations") == 1
        assert sample(counts, "appliance_worker_store_executions") == 1
        assert cluster.scrape_worker(token="operator-token-dddddddddddd").status == 401

        health = cluster.view("v1", "/scheduler/v1/health")
        assert [w["code"] for w in health["warnings"]] == ["unknown_occurrences"]
        assert health["unknown_occurrences"] == [1]
        assert health["worker"]["reachable"] is True and health["worker"]["authorized"] is True
        history = cluster.view("v1", "/scheduler/v1/schedules/1/history")
        assert history["dropped"] == {"missed": 2, "overlap": 0, "capacity": 0}
        assert [d["reason"] for d in history["recent_drops"]] == ["missed"]
        assert history["occurrences"][0]["due"] == minute_s + 180
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        cluster.stop()


# ---- failover --------------------------------------------------------------------------------

QUICK_OVERLAPPING = {
    "name": "overlapping",
    # ~1.5 real s = 90 scaled s at 60x: every run overlaps the next slot, which Skip drops.
    "code": "const end = Date.now() + 1500; while (Date.now() < end) {}",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}
REPLICATED = (
    DROPPED,
    "appliance_occurrences",
    "appliance_occurrences_records",
    "appliance_occurrences_unknown",
    "appliance_ownership_epoch",
    "appliance_schedules",
    "appliance_checkpoint_bytes",
    "appliance_raft_commit_index",
    "appliance_raft_applied_index",
)


def _replicated(found: dict[Any, float]) -> dict[Any, float]:
    return {key: v for key, v in found.items() if key[0] in REPLICATED}


def _settled(cluster: ObservedCluster, nodes: list[str]) -> bool:
    """Both voters applied the same committed index, and no occurrence is still live."""
    scraped = [cluster.scrape_voter(n) for n in nodes]
    applied = {sample(s, "appliance_raft_applied_index") for s in scraped}
    commit = {sample(s, "appliance_raft_commit_index") for s in scraped}
    live = sum(
        sample(scraped[0], "appliance_occurrences", state=s) or 0
        for s in ("Pending", "Running", "Cancelling")
    )
    return len(applied) == 1 and applied == commit and live == 0


def test_after_failover_metrics_and_history_agree_between_voters(tmp_path: Path) -> None:
    cluster = ObservedCluster(tmp_path, 3, time_scale=60.0, worker=True, timeout_seconds=600)
    try:
        cluster.start()
        owner = cluster.owner()
        assert owner.command({"action": "create", "definition": QUICK_OVERLAPPING})["ok"]
        wait_for(
            lambda: (sample(cluster.scrape_voter(owner.node_id), DROPPED, schedule="1",
                            reason="overlap") or 0) >= 1,
            "an overlap drop",
        )  # fmt: skip
        before = cluster.view(owner.node_id, "/scheduler/v1/schedules/1/history")
        owner.kill()
        survivor = cluster.owner(exclude=(owner.node_id,))
        other = next(v for v in cluster.voters.values() if v.alive and v is not survivor)
        assert survivor.command({"action": "disable", "id": 1})["ok"]
        nodes = [survivor.node_id, other.node_id]
        wait_for(lambda: _settled(cluster, nodes), "both voters to apply everything")

        a, b = (_replicated(cluster.scrape_voter(n)) for n in nodes)
        assert a == b
        assert sample(a, "appliance_ownership_epoch") == 2
        history_a = cluster.view(survivor.node_id, "/scheduler/v1/schedules/1/history")
        history_b = cluster.view(other.node_id, "/scheduler/v1/schedules/1/history")
        assert history_a == history_b
        # What the dead owner decided is still there, unchanged, on the new owner.
        assert history_a["dropped"]["overlap"] >= before["dropped"]["overlap"] >= 1
        now_by_id = {o["id"]: o for o in history_a["occurrences"]}
        for old in before["occurrences"]:
            if old["state"] in ("Succeeded", "Failed", "Cancelled"):
                assert now_by_id[old["id"]] == old
        assert cluster.view(other.node_id, "/scheduler/v1/health")["ownership"] == {
            "node": survivor.node_id,
            "epoch": 2,
            "acquired_here": False,
        }
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        cluster.stop()
