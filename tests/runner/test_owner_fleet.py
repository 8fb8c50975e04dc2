"""The owner with a fleet of workers (issue 33): placement per attempt, labels, drain, failover
of attempts without a committed permit, Unknown for those with one, and the Unknown resolved once
the worker answers again. An in-process voter (tests/runner/harness.py) with one scripted worker
per fleet member at the network boundary."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from appliance.config.runner import parse_runner_config
from appliance.owner.fleet import UNREACHABLE_AFTER_S
from appliance.runner.worker_client import ExecResult, ObserveResult
from tests.runner.harness import T0, ScriptedWorker, Voter, definition, wait_until


def fleet_config(*labels: dict[str, str], timeout_seconds: int = 60) -> Any:
    return parse_runner_config(
        {
            "node_id": "v1",
            "advertise_addr": "127.0.0.1",
            "cluster_port": 9,
            "peers": [],
            "data_dir": "/nonexistent/v1",
            "admission_addr": "127.0.0.1:9",
            "admission_bearer_env": "A",
            "cluster_bearer_env": "C",
            "limits": {"running": 32, "outstanding": 64},
            "remote": {
                "bearer_env": "W",
                "expires_at": "2099-01-01T00:00:00Z",
                "session": "tests",
                "timeout_seconds": timeout_seconds,
                "heap_mb": 64,
                "namespace": "ns",
                "workers": [
                    {"worker_id": f"w{i + 1}", "url": f"http://127.0.0.1:{4701 + i}", "labels": lab}
                    for i, lab in enumerate(labels)
                ],
            },
        }
    )


class ScriptedFleet:
    """One scripted worker per fleet member; the loop asks ``for_worker`` (the driver's seam)."""

    def __init__(self, ids: list[str]) -> None:
        self.members = {worker_id: ScriptedWorker() for worker_id in ids}
        self.runner: Any = None

    def for_worker(self, worker_id: str | None) -> ScriptedWorker:
        return self.members[worker_id or next(iter(self.members))]

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "runner":
            for member in getattr(self, "members", {}).values():
                member.runner = value

    def close(self) -> None:
        pass

    def execs(self, worker_id: str) -> list[dict[str, Any]]:
        return [b for kind, b in self.members[worker_id].calls if kind == "exec"]


class FleetVoter(Voter):
    def __init__(self, cfg: Any, **kwargs: Any) -> None:
        self.fleet = ScriptedFleet([w.worker_id for w in cfg.remote.fleet])
        super().__init__(cfg, **kwargs)

    def _build(self) -> None:
        self.worker = self.fleet  # type: ignore[assignment]
        super()._build()


def _command(v: Voter, **doc: Any) -> dict[str, Any]:
    return v.command(json.dumps(doc))


def _create(v: Voter, count: int = 1, **extra: Any) -> None:
    for i in range(count):
        assert _command(v, action="create", definition={**definition(f"job-{i}"), **extra})["ok"]


def _execs_by_worker(v: FleetVoter) -> Counter[str]:
    return Counter({w: len(v.fleet.execs(w)) for w in v.fleet.members})


def test_eight_schedules_spread_over_two_workers_and_each_runs_once() -> None:
    with FleetVoter(fleet_config({}, {})) as v:
        _create(v, 8)
        v.advance_to(T0 + 60)
        for oid in range(1, 9):
            v.wait_state(oid, "Succeeded")
        counts = _execs_by_worker(v)
        assert sum(counts.values()) == 8 and min(counts.values()) >= 2, counts
        invocations = [
            (b["occurrence_id"], b["attempt"]) for w in v.fleet.members for b in v.fleet.execs(w)
        ]
        assert len(set(invocations)) == 8
        claims = v.events("claim")
        assert {c["worker"] for c in claims} == {"w1", "w2"}
        status = _command(v, action="status")
        assert [w["worker_id"] for w in status["fleet"]] == ["w1", "w2"]
        assert set(status["dispatch"]["workers"]) == {"w1", "w2"}


def test_a_schedule_with_labels_runs_only_on_a_matching_worker() -> None:
    with FleetVoter(fleet_config({"zone": "a"}, {"zone": "b"})) as v:
        _create(v, 4, placement={"labels": {"zone": "b"}})
        v.advance_to(T0 + 60)
        for oid in range(1, 5):
            v.wait_state(oid, "Succeeded")
        assert _execs_by_worker(v) == Counter({"w2": 4, "w1": 0})


def test_no_matching_worker_waits_pending_with_its_reason_and_runs_once_one_joins() -> None:
    with FleetVoter(fleet_config({"zone": "a"}, {"zone": "b"})) as v:
        _create(v, placement={"labels": {"zone": "c"}})
        v.advance_to(T0 + 60)
        wait_until(lambda: v.events("placement_wait"), "placement_wait")
        assert v.state_of(1) == "Pending"
        status = _command(v, action="status")
        (waiting,) = status["placement_waits"]
        assert waiting["occurrence_id"] == 1
        assert waiting["reason"].startswith('no worker matches labels {"zone":"c"}')
        assert sum(_execs_by_worker(v).values()) == 0
        v.fleet.members["w3"] = ScriptedWorker()
        v.fleet.members["w3"].runner = v.runner
        added = _command(
            v,
            action="add_worker",
            worker_id="w3",
            url="http://127.0.0.1:4703",
            labels={"zone": "c"},
        )
        assert added["ok"], added
        v.advance_to(T0 + 61)
        v.wait_state(1, "Succeeded")
        assert len(v.fleet.execs("w3")) == 1 and v.state_of(1) == "Succeeded"
        assert v.record(1).attempt == 1  # waiting spent no attempt


def test_a_draining_worker_takes_no_new_placements() -> None:
    with FleetVoter(fleet_config({}, {})) as v:
        assert _command(v, action="drain_worker", worker_id="w1")["ok"]
        _create(v, 4)
        v.advance_to(T0 + 60)
        for oid in range(1, 5):
            v.wait_state(oid, "Succeeded")
        assert _execs_by_worker(v) == Counter({"w2": 4, "w1": 0})
        status = _command(v, action="status")
        assert [(w["worker_id"], w["state"]) for w in status["fleet"]] == [
            ("w1", "draining"),
            ("w2", "active"),
        ]


def _tick(v: Voter) -> bool:
    """One wall second on, then a little real time for the loop's timers."""
    v.advance_to(v.clock.now_s() + 1)
    time.sleep(0.1)
    return True


def _dead(worker: ScriptedWorker) -> None:
    """The worker is gone: every call fails to connect (no protocol answer)."""
    worker.on_exec = lambda binding: ExecResult("uncertain", detail="worker unreachable: refused")
    worker.on_observe = lambda eid: ObserveResult(None, detail="connection refused")


def test_a_dead_worker_fails_over_without_a_second_run_and_without_unknown() -> None:
    with FleetVoter(fleet_config({}, {})) as v:
        _dead(v.fleet.members["w2"])
        _create(v, 8)
        v.advance_to(T0 + 60)
        for oid in range(1, 9):
            v.wait_state(oid, "Succeeded")
        # Every occurrence ran on w1; w2 got sends but never granted a permit.
        assert len(v.fleet.execs("w1")) == 8
        assert all(status == 200 for status, _ in v.fleet.members["w1"].admissions)
        assert v.fleet.members["w2"].admissions == []
        assert not [r for r in v.events("outcome") if r.get("state") == "Unknown"]
        # Past the threshold (and a probe or two) the status says unreachable.
        wait_until(lambda: _tick(v) and v.events("worker_unreachable"), "unreachable", timeout_s=20)
        assert v.clock.now_s() - (T0 + 60) >= UNREACHABLE_AFTER_S
        status = _command(v, action="status")
        reach = {w["worker_id"]: w["reachability"] for w in status["fleet"]}
        assert reach == {"w1": "reachable", "w2": "unreachable"}


def test_killed_while_running_only_permitted_attempts_are_unknown_and_they_resolve() -> None:
    cfg = fleet_config({}, {}, timeout_seconds=5)
    with FleetVoter(cfg, unknown_poll_s=0.2) as v:
        w2 = v.fleet.members["w2"]
        # w2 admits and accepts, then stops answering observations: its attempts hold permits.
        w2.on_observe = lambda eid: ObserveResult(None, detail="connection refused")
        _create(v, 4)
        v.advance_to(T0 + 60)
        wait_until(lambda: len(w2.admissions) >= 1, "w2 admitted something")
        wait_until(
            lambda: (
                sum(v.state_of(o) == "Succeeded" for o in range(1, 5)) + len(w2.admissions) == 4
            ),
            "every occurrence either ran on w1 or was admitted on w2",
        )
        on_w2 = {b["occurrence_id"] for b in v.fleet.execs("w2")}
        # Past timeout_seconds + 30 s grace the permitted ones are Unknown, never re-run.
        v.advance_to(T0 + 60 + 5 + 31)
        for oid in on_w2:
            v.wait_state(oid, "Unknown")
        assert all(v.record(o).attempt == 1 for o in on_w2)
        assert not any(b["occurrence_id"] in on_w2 for b in v.fleet.execs("w1"))
        # w2 answers again: the real outcome wins over Unknown.
        w2.on_observe = lambda eid: ObserveResult("completed")
        v.advance_to(T0 + 60 + 5 + 45)
        for oid in on_w2:
            v.wait_state(oid, "Succeeded")


def test_remove_is_refused_while_an_attempt_bound_to_the_worker_is_live() -> None:
    with FleetVoter(fleet_config({}, {"zone": "b"})) as v:
        w2 = v.fleet.members["w2"]
        w2.on_observe = lambda eid: ObserveResult("running")
        _create(v, placement={"labels": {"zone": "b"}})
        v.advance_to(T0 + 60)
        v.wait_state(1, "Running")
        wait_until(lambda: w2.admissions, "admitted on w2")
        refused = _command(v, action="remove_worker", worker_id="w2")
        assert refused["ok"] is False and "bound to w2" in refused["error"]["message"]
        w2.on_observe = lambda eid: ObserveResult("completed")
        v.wait_state(1, "Succeeded")
        assert _command(v, action="remove_worker", worker_id="w2")["ok"]
        reused = _command(v, action="add_worker", worker_id="w2", url="http://127.0.0.1:4799")
        assert reused["ok"] is False and "never reused" in reused["error"]["message"]


def test_a_per_worker_admission_credential_serves_only_that_worker() -> None:
    with FleetVoter(fleet_config({}, {})) as v:
        v.fleet.members["w1"].on_observe = lambda eid: ObserveResult("running")
        v.fleet.members["w2"].on_observe = lambda eid: ObserveResult("running")
        _create(v, 2)
        v.advance_to(T0 + 60)
        wait_until(lambda: all(v.fleet.execs(w) for w in ("w1", "w2")), "both dispatched")
        binding = v.fleet.execs("w2")[0]
        status, body = v.runner.admit(binding, "inc-x", caller="w1")
        assert status == 403 and body["error"]["code"] == "binding_mismatch"
        assert "worker w1's" in body["error"]["message"]
        status, _ = v.runner.admit(binding, v.fleet.members["w2"].incarnation, caller="w2")
        assert status == 200  # the same permit again, for its own worker


def test_attempts_waiting_for_an_unreachable_workers_capacity_are_fenced_and_run_elsewhere() -> (
    None
):
    from appliance.owner.worker_answers import Capacity

    full = Capacity(max_concurrent=1, max_queued=0, free_slots=0, queue_room=0)
    with FleetVoter(fleet_config({}, {}, timeout_seconds=5), unknown_poll_s=0.2) as v:
        for member in v.fleet.members.values():

            def accept(binding: dict[str, Any], m: ScriptedWorker = member) -> ExecResult:
                result = m.admit_and_accept(binding)
                return ExecResult(
                    result.kind, result.execution_id, capacity=full, protocol_answer=True
                )

            member.on_exec = accept
            member.on_observe = lambda eid: ObserveResult("running", capacity=full)
        _create(v, 4, policy={"missed": "Skip", "overlap": "Concurrent"})
        v.advance_to(T0 + 60)
        wait_until(lambda: v.events("capacity_wait"), "an attempt waits for a worker's capacity")
        waiting_on_w2 = [e["occurrence"] for e in v.events("capacity_wait") if e["worker"] == "w2"]
        assert waiting_on_w2, v.events("capacity_wait")
        w1, w2 = v.fleet.members["w1"], v.fleet.members["w2"]
        _dead(w2)
        w1.on_observe = lambda eid: ObserveResult("completed")
        # The clock moves on, a second per turn: failed polls and probes, then the threshold.
        wait_until(lambda: _tick(v) and v.events("unreachable_fenced"), "the fence", timeout_s=20)
        fenced = {e["occurrence"] for e in v.events("unreachable_fenced")}
        assert set(waiting_on_w2) <= fenced
        for oid in waiting_on_w2:
            record = v.wait_state(oid, "Succeeded")
            assert record.attempt == 2 and record.retries_used == 0  # a fence spends no retry
            assert [b["attempt"] for b in v.fleet.execs("w1") if b["occurrence_id"] == oid] == [2]
        # w2 comes back and asks for the permit of the attempt fenced while it was away: refused,
        # so it never launches it (the fence, checked by the Admit apply).
        oid = waiting_on_w2[0]
        rerun = next(b for b in v.fleet.execs("w1") if b["occurrence_id"] == oid)
        stale = {**rerun, "attempt": 1, "worker_id": "w2"}
        status, body = v.runner.admit(stale, "w2-back")
        assert status == 403 and body["error"]["code"] == "fenced", body
