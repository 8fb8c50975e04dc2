"""Three ``appliance runner`` voters and one ``appliance worker`` on loopback, real JavaScript.

The rules proven here (SPEC §1, §6; issue 5 "Must show"):
- a ``* * * * *`` schedule runs every slot at most once across a SIGKILL of the owner and, with
  the worker healthy, loses none;
- cancelling a long-running script ends ``Cancelled`` only after the engine confirmed the stop;
- killing the worker mid-run makes the attempt ``Unknown`` (never retried), and
  ``acknowledge_stopped`` then makes it ``Abandoned``.

Each test runs on both replication backends with the same code (issue 11): the built-in Raft,
and etcd, where the three voters are runner instances sharing one etcd prefix (tests/runner/
conftest.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from tests.runner.cluster import DEMO, Cluster, Voter, wait_for
from tests.runner.conftest import Backend

SLOT_S = 60
LONG_RUNNING = {
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


def _occurrences(voter: Voter) -> list[dict[str, Any]]:
    return voter.command({"action": "list"})["occurrences"]


def _succeeded(voter: Voter, at_least: int) -> list[dict[str, Any]] | None:
    done = [o for o in _occurrences(voter) if o["state"] == "Succeeded"]
    return done if len(done) >= at_least else None


def _claims(cluster: Cluster) -> Counter[tuple[int, int]]:
    claims: Counter[tuple[int, int]] = Counter()
    for voter in cluster.voters.values():
        for event in voter.events():
            if event.get("event") == "claim":
                claims[(event["occurrence"], event["attempt"])] += 1
    return claims


def _assert_the_log_went_through(
    backend: Backend, cluster: Cluster, status: dict[str, Any]
) -> None:
    """On etcd the committed commands are etcd keys under the cluster's prefix (so the test did
    not silently run on the built-in Raft)."""
    assert status["applied_index"] > 0, status
    if backend.etcd is not None:
        assert cluster.replication is not None
        assert backend.etcd_log_entries(cluster.replication) >= status["applied_index"]


def test_every_slot_runs_at_most_once_and_none_is_lost_across_an_owner_kill(
    tmp_path: Path, backend: Backend
) -> None:
    cluster = Cluster(
        tmp_path,
        3,
        time_scale=30.0,
        schedules=[DEMO],
        worker=True,
        replication=backend.replication(),
    )
    try:
        cluster.start()
        first = cluster.owner()
        before = wait_for(lambda: _succeeded(first, 3), "three slots to succeed")
        first.kill()
        second = cluster.owner(exclude=(first.node_id,))
        wait_for(lambda: _succeeded(second, len(before) + 4), "four more slots after failover")

        records = _occurrences(second)
        due = sorted(o["due"] for o in records)
        assert len(due) == len(set(due)), "a slot became two occurrences"
        assert due == list(range(due[0], due[-1] + SLOT_S, SLOT_S)), "a slot was lost"
        assert all(o["state"] in ("Succeeded", "Running", "Pending") for o in records), records
        schedule = second.command({"action": "list"})["schedules"][0]
        assert schedule["dropped"] == {"missed": 0, "overlap": 0, "capacity": 0}
        # At most once: no invocation (occurrence, attempt) was ever claimed twice, by any owner.
        claims = _claims(cluster)
        assert claims and max(claims.values()) == 1, claims
        # Ownership may have moved again since (an election on a loaded host): ask whoever holds it.
        owner = cluster.owner(exclude=(first.node_id,))
        status = owner.command({"action": "status"})
        assert status["time_scale"] == 30.0
        assert status["ownership"] == {
            "node": owner.node_id,
            "epoch": status["ownership"]["epoch"],
        }
        assert status["ownership"]["epoch"] >= 2
        _assert_the_log_went_through(backend, cluster, status)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        cluster.stop()


def _state_of(voter: Voter, occurrence_id: int) -> str | None:
    for record in _occurrences(voter):
        if record["id"] == occurrence_id:
            return record["state"]
    return None


def _running_long(voter: Voter, after_id: int = 0) -> int | None:
    for record in _occurrences(voter):
        if record["id"] > after_id and record["state"] == "Running":
            return record["id"]
    return None


def _accepted(voter: Voter, occurrence_id: int) -> bool:
    return any(
        e.get("event") == "dispatch_accepted" and e.get("occurrence") == occurrence_id
        for e in voter.events()
    )


def test_cancel_confirms_stop_and_a_killed_worker_leaves_unknown_until_acknowledged(
    tmp_path: Path, backend: Backend
) -> None:
    cluster = Cluster(
        tmp_path,
        3,
        time_scale=30.0,
        schedules=[LONG_RUNNING],
        timeout_seconds=600,
        worker=True,
        replication=backend.replication(),
    )
    try:
        cluster.start()
        owner = cluster.owner()
        first = wait_for(lambda: _running_long(owner), "a running long script")
        wait_for(lambda: _accepted(owner, first), "the engine to accept it")

        reply = owner.command({"action": "cancel", "occurrence_id": first})
        assert reply == {
            "ok": True,
            "action": "cancel",
            "occurrence_id": first,
            "state": "Cancelling",
        }
        wait_for(lambda: _state_of(owner, first) == "Cancelled", "the cancel to be confirmed")
        record = next(o for o in _occurrences(owner) if o["id"] == first)
        assert [step[3] for step in record["timeline"]][-2:] == ["cancel", "cancel_confirmed"]

        second = wait_for(lambda: _running_long(owner, first), "the next slot to run")
        wait_for(lambda: _accepted(owner, second), "the engine to accept it")
        cluster.worker.kill()
        cluster.worker.start()  # the new incarnation reports the old execution as lost
        wait_for(lambda: _state_of(owner, second) == "Unknown", "the killed run to be Unknown")
        # Unknown holds its reservation and is never retried: no new attempt, no new slot runs.
        record = next(o for o in _occurrences(owner) if o["id"] == second)
        assert record["attempt"] == 1

        refused = owner.command(
            {
                "action": "acknowledge_stopped",
                "occurrence_id": second,
                "dispatcher_and_work_quiesced": False,
            }
        )
        assert refused["ok"] is False and refused["status"] == 400
        assert _state_of(owner, second) == "Unknown"
        done = owner.command(
            {
                "action": "acknowledge_stopped",
                "occurrence_id": second,
                "dispatcher_and_work_quiesced": True,
            }
        )
        assert done["state"] == "Abandoned", done
        _assert_the_log_went_through(backend, cluster, owner.command({"action": "status"}))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        cluster.stop()
