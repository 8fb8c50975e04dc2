"""The commands beyond the seeds on three real ``appliance runner`` voters and a real worker
(issue 22, "Must show"): ``run_now`` across a leader kill runs once (with a repeated
``request_id``), an update mid-run leaves the running occurrence on its old code and it
Succeeds, and pause/resume over a minute boundary selects nothing while paused and nothing
extra after. Built-in Raft; JavaScript really runs in the worker's engine.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.runner.cluster import Cluster, Voter, wait_for

NEVER_SOON = "0 0 1 1 *"  # once a year: only run_now makes occurrences


def schedule(cron: str, code: str, overlap: str = "Concurrent") -> dict[str, Any]:
    return {
        "name": "ops",
        "code": code,
        "cron": cron,
        "timezone": "UTC",
        "policy": {
            "missed": "Skip",
            "overlap": overlap,
            "retry": {"max_retries": 0, "delay_seconds": 0},
        },
    }


def occurrences(voter: Voter) -> list[dict[str, Any]]:
    return voter.command({"action": "list"})["occurrences"]


def state_of(voter: Voter, occurrence_id: int) -> str | None:
    for record in occurrences(voter):
        if record["id"] == occurrence_id:
            return record["state"]
    return None


def claims(cluster: Cluster) -> Counter[tuple[int, int]]:
    out: Counter[tuple[int, int]] = Counter()
    for voter in cluster.voters.values():
        for event in voter.events():
            if event.get("event") == "claim":
                out[(event["occurrence"], event["attempt"])] += 1
    return out


def gate_open(cluster: Cluster) -> Voter:
    """The owner, once every voter has reported the new command kinds (the version gate polls
    peers every 5 s; until then a new kind is refused, definitely). ``enable`` of an enabled
    schedule is the probe: a new kind that changes nothing."""

    def probe() -> Voter | None:
        owner = cluster.owner()
        reply = owner.command({"action": "enable", "id": 1})
        return owner if reply.get("ok") else None

    return wait_for(probe, "the version gate to open for the new commands")


def committed_run_now(voter: Voter) -> bool:
    return any(
        e.get("event") == "operator" and e.get("action") == "run_now" for e in voter.events()
    )


def test_run_now_across_a_leader_kill_runs_exactly_once_with_a_repeated_request_id(
    tmp_path: Path,
) -> None:
    cluster = Cluster(
        tmp_path, 3, time_scale=10.0, schedules=[schedule(NEVER_SOON, "1 + 1")], worker=True
    )
    try:
        cluster.start()
        first = gate_open(cluster)
        request = {"action": "run_now", "id": 1, "request_id": "deploy-42"}
        # The client's answer is lost: the owner dies right after committing the command.
        assert first.proc is not None and first.proc.stdin is not None
        first.proc.stdin.write(json.dumps(request) + "\n")
        first.proc.stdin.flush()
        wait_for(lambda: committed_run_now(first), "the run_now committed on the first owner")
        first.kill()
        # A voter the new owner has not heard from counts as an old binary, so the new kinds
        # wait for it (the version gate): the killed voter restarts as a follower and reports.
        first.start()
        second = gate_open(cluster)
        again = second.command(request)  # the client repeats after the uncertain answer
        assert again["ok"] is True and again["repeated"] is True, again
        assert again["occurrence_id"] == 1
        wait_for(lambda: state_of(second, 1) == "Succeeded", "the run_now occurrence succeeds")
        third = second.command(request)
        assert third["occurrence_id"] == 1 and third["repeated"] is True
        records = occurrences(second)
        assert [r["id"] for r in records] == [1], records
        assert records[0]["timeline"][0][3] == "run_now"
        counted = claims(cluster)
        assert counted and max(counted.values()) == 1, counted  # no attempt claimed twice
        launched = [
            e for v in cluster.voters.values() for e in v.events()
            if e.get("event") == "dispatch_accepted"
        ]  # fmt: skip
        assert len(launched) <= 1 + sum(1 for k in counted if k[1] > 1), launched
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        cluster.stop()


def test_update_mid_run_leaves_the_running_occurrence_on_its_old_code_and_it_succeeds(
    tmp_path: Path,
) -> None:
    old = "const end = Date.now() + 3000; while (Date.now() < end) {} 'old'"
    cluster = Cluster(
        tmp_path, 3, time_scale=10.0, schedules=[schedule(NEVER_SOON, old)], worker=True
    )
    try:
        cluster.start()
        owner = gate_open(cluster)
        assert owner.command({"action": "run_now", "id": 1})["occurrence_id"] == 1
        wait_for(lambda: state_of(owner, 1) == "Running", "the old code running")
        updated = owner.command({"action": "update", "id": 1, "code": "'new'"})
        assert updated["ok"] is True and updated["changed"] is True, updated
        listed = owner.command({"action": "list"})["schedules"][0]
        old_digest = hashlib.sha256(old.encode()).hexdigest()
        assert listed["kept"] == [[2, old_digest]]  # occurrence 1 keeps the old code
        wait_for(lambda: state_of(owner, 1) == "Succeeded", "the running occurrence succeeds")
        assert owner.command({"action": "run_now", "id": 1})["occurrence_id"] == 2
        wait_for(lambda: state_of(owner, 2) == "Succeeded", "the new code's occurrence")
        listed = owner.command({"action": "list"})["schedules"][0]
        assert "kept" not in listed  # dropped once occurrence 1 ended
        assert [change[1] for change in listed["changes"]] == [["code"]]
        refused = [e for e in owner.events() if e.get("event") == "claim_refused"]
        assert refused == []  # no binding_mismatch, no refusal of any kind
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        cluster.stop()


def test_pause_over_a_minute_boundary_selects_nothing_and_resume_adds_nothing_extra(
    tmp_path: Path,
) -> None:
    scale = 30.0  # a scaled minute is 2 s of wall time
    cluster = Cluster(
        tmp_path, 3, time_scale=scale, schedules=[schedule("* * * * *", "1")], worker=True
    )
    try:
        cluster.start()
        owner = gate_open(cluster)
        wait_for(lambda: occurrences(owner), "a first slot")
        assert owner.command({"action": "pause"})["ok"] is True
        status = owner.command({"action": "status"})
        assert status["paused"] is not None, status
        paused_ids = {r["id"] for r in occurrences(owner)}
        time.sleep(150 / scale)  # 150 scaled seconds: at least two minute boundaries pass
        assert {r["id"] for r in occurrences(owner)} == paused_ids  # nothing selected
        resumed = owner.command({"action": "resume"})
        assert resumed["ok"] is True and resumed["moved"] == [1], resumed
        resumed_at = owner.command({"action": "list"})["schedules"][0]["cursor"]
        wait_for(
            lambda: len({r["id"] for r in occurrences(owner)} - paused_ids) >= 1,
            "a slot after resume",
        )
        new = [r for r in occurrences(owner) if r["id"] not in paused_ids]
        assert all(r["due"] > resumed_at for r in new), (resumed_at, new)
        dues = sorted(r["due"] for r in new)
        assert dues[0] == (resumed_at // 60 + 1) * 60  # the first slot after the resume
        assert len(dues) == len(set(dues))
        listed = owner.command({"action": "list"})["schedules"][0]
        assert listed["dropped"]["missed"] >= 2  # the paused span, counted
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        cluster.stop()
