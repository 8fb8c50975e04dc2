"""The fleet's smaller parts (issue 33): the unreachable threshold and the probes at their
boundaries, the owner's argument checks of the fleet commands, the admission route's per-worker
credential, the driver's per-worker clients, health per worker and the admin verbs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from falcon import testing

from appliance.cli.admin_contract import command_fields
from appliance.cli.main import build_parser
from appliance.commands.operator import OperatorError
from appliance.config.credentials import resolve_runner_credentials
from appliance.config.runner import parse_runner_config
from appliance.core.limits import Limits
from appliance.core.placement import Candidate, PlacementRules, place
from appliance.core.state import AddWorker, RemoveWorker, SchedulerState, apply
from appliance.metrics.health import HealthInputs, WorkerView, warnings_for
from appliance.owner.contract import amendment_args
from appliance.owner.fleet import (
    IDLE_PROBE_S,
    PROBE_EVERY_S,
    UNREACHABLE_AFTER_S,
    UNREACHABLE_FAILURES,
    Fleet,
)
from appliance.runner.admission import ADMIT_PATH, create_admission_app
from appliance.runner.worker_pool import UnknownWorker, WorkerPool
from appliance.secret import Secret
from tests.config.test_fleet_config import ENV, fleet_doc, worker

T = 1_000.0


# ---- the threshold ------------------------------------------------------------------------------


def test_one_lost_reply_is_not_unreachable_the_threshold_is_both_count_and_time() -> None:
    fleet = Fleet(time_scale=1.0)
    fleet.failed("w", T)
    assert not fleet.turns_unreachable("w", T + 60)  # one failure, however long ago
    for i in range(1, UNREACHABLE_FAILURES):
        fleet.failed("w", T + i)
    just_before = T + UNREACHABLE_AFTER_S - 0.001
    assert not fleet.turns_unreachable("w", just_before)
    assert fleet.state_of("w") == "failing"
    assert fleet.turns_unreachable("w", T + UNREACHABLE_AFTER_S)  # exactly at it: unreachable
    assert not fleet.turns_unreachable("w", T + 99)  # once
    assert fleet.state_of("w") == "unreachable"
    assert fleet.answered("w", T + 100) is True  # one answer makes it reachable again
    assert fleet.state_of("w") == "reachable" and not fleet.turns_unreachable("w", T + 200)


def test_the_threshold_counts_real_seconds_under_a_time_scale() -> None:
    fleet = Fleet(time_scale=20.0)
    fleet.failed("w", T)
    fleet.failed("w", T + 1)
    assert not fleet.turns_unreachable("w", T + 20 * UNREACHABLE_AFTER_S - 1)
    assert fleet.turns_unreachable("w", T + 20 * UNREACHABLE_AFTER_S)


def test_probes_go_to_failing_workers_every_second_and_to_idle_ones_in_a_fleet() -> None:
    fleet = Fleet()
    assert not fleet.probe_due("w", T, idle=True, fleet_size=1)  # a fleet of one: never idle-probed
    assert fleet.probe_due("w", T, idle=True, fleet_size=2)
    fleet.health_of("w").last_probe_s = T
    assert not fleet.probe_due("w", T + IDLE_PROBE_S - 0.01, idle=True, fleet_size=2)
    assert fleet.probe_due("w", T + IDLE_PROBE_S, idle=True, fleet_size=2)
    assert not fleet.probe_due("w", T + 100, idle=False, fleet_size=2)  # busy and answering
    fleet.failed("w", T)
    assert not fleet.probe_due("w", T + PROBE_EVERY_S - 0.01, idle=False, fleet_size=1)
    assert fleet.probe_due("w", T + PROBE_EVERY_S, idle=False, fleet_size=1)
    fleet.health_of("w").probe_out = True
    assert not fleet.probe_due("w", T + 50, idle=False, fleet_size=1)  # one at a time


def test_a_worker_whose_last_call_failed_is_placed_after_every_answering_one() -> None:
    decision = place(
        PlacementRules(),
        [Candidate("w1", places=8, failing=True), Candidate("w2", places=8, in_flight=7)],
    )
    assert decision.selected == "w2"
    only = place(PlacementRules(), [Candidate("w1", failing=True)])
    assert only.selected == "w1"  # still placed when it is the only one (never rejected for it)


# ---- the owner's argument checks ----------------------------------------------------------------


def _genesis() -> Any:
    return parse_runner_config(fleet_doc([worker(1), worker(2)])).remote


def _refusal(action: str, args: dict[str, Any], state: SchedulerState | None = None, **kw) -> str:
    with pytest.raises(OperatorError) as refused:
        amendment_args(action, args, state or SchedulerState(Limits()), _genesis(), **kw)
    assert refused.value.status == 400
    return refused.value.message


def test_add_worker_arguments_are_checked_against_the_fleet_in_force() -> None:
    out = amendment_args(
        "add_worker",
        {"worker_id": "worker-3", "url": "HTTPS://W3.example.org:443", "labels": {"zone": "c"}},
        SchedulerState(Limits()),
        _genesis(),
    )
    assert out["worker"] == {
        "worker_id": "worker-3",
        "url": "https://w3.example.org",
        "labels": {"zone": "c"},
        "bearer_env": None,
        "admission_bearer_env": None,
    }
    assert [w["worker_id"] for w in out["workers"]] == ["worker-1", "worker-2", "worker-3"]
    assert "already a worker" in _refusal(
        "add_worker", {"worker_id": "worker-2", "url": "https://x.example.org"}
    )
    assert "origin" in _refusal("add_worker", {"worker_id": "w9", "url": "https://w1.example.org"})
    assert "loopback" in _refusal("add_worker", {"worker_id": "w9", "url": "http://10.1.1.1"})
    assert "labels" in _refusal(
        "add_worker", {"worker_id": "w9", "url": "https://w9.example.org", "labels": {"a b": "c"}}
    )
    unset = _refusal(
        "add_worker",
        {"worker_id": "w9", "url": "https://w9.example.org", "bearer_env": "W9_TOKEN"},
        check_env=lambda name: f"environment variable {name} is not set on this voter",
    )
    assert unset == "bearer_env: environment variable W9_TOKEN is not set on this voter"


def test_drain_and_remove_name_a_worker_of_the_fleet_and_never_the_last() -> None:
    assert "not a worker of the fleet" in _refusal("drain_worker", {"worker_id": "worker-9"})
    state = SchedulerState(Limits())
    genesis = _genesis()
    w1, _w2 = (
        {
            "worker_id": w.worker_id,
            "url": w.url.url,
            "labels": {},
            "bearer_env": None,
            "admission_bearer_env": None,
        }
        for w in genesis.fleet
    )
    apply(state, RemoveWorker(0, 1, "worker-2", (w1,)))
    assert "removed" in _refusal("drain_worker", {"worker_id": "worker-2"}, state)
    assert "last worker" in _refusal("remove_worker", {"worker_id": "worker-1"}, state)
    assert "never reused" in _refusal(
        "add_worker", {"worker_id": "worker-2", "url": "https://new.example.org"}, state
    )


def test_amend_remote_is_refused_for_a_fleet() -> None:
    assert "fleet" in _refusal("amend_remote", {"url": "https://x.example.org"})


# ---- the admission route ------------------------------------------------------------------------


def test_the_admission_route_passes_a_fleet_workers_own_credential_as_the_caller() -> None:
    seen: list[tuple[Any, ...]] = []

    def submit(binding: dict[str, Any], incarnation: str, caller: str | None = None) -> Any:
        seen.append((binding["worker_id"], caller))
        return 200, {"permit": {}}

    app = create_admission_app(
        submit,
        {
            "admission": Secret("shared-admission"),
            "admission:w1": Secret("w1-admission"),
            "cluster": Secret("cluster-token"),
        },
    )
    client = testing.TestClient(app)
    body = json.dumps({"protocol": 1, "binding": {"worker_id": "w2"}, "incarnation": "i"})
    for token in ("shared-admission", "w1-admission", "cluster-token"):
        client.simulate_post(
            ADMIT_PATH,
            body=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
    assert seen == [("w2", None), ("w2", "w1")]  # the cluster credential is refused (401)


# ---- the driver's clients -----------------------------------------------------------------------


def test_the_pool_presents_each_worker_its_own_credential_and_refuses_unknown_workers() -> None:
    doc = fleet_doc([worker(1, bearer_env="W1_TOKEN"), worker(2)])
    cfg = parse_runner_config(doc)
    creds = resolve_runner_credentials(cfg, {**ENV, "W1_TOKEN": "w1-bearer"})
    pool = WorkerPool(lambda: cfg.remote, creds, {"W1_TOKEN": "w1-bearer"})
    try:
        assert pool.bearer("worker-1", cfg.remote).reveal() == "w1-bearer"
        assert pool.bearer("worker-2", cfg.remote).reveal() == "worker-token-1"
        assert pool.for_worker("worker-2") is pool.for_worker("worker-2")
        with pytest.raises(UnknownWorker):
            pool.for_worker("worker-9")
    finally:
        pool.close()


# ---- health -------------------------------------------------------------------------------------


def _health(*workers: WorkerView) -> list[dict[str, str]]:
    from appliance.metrics.runner import StateFigures

    figures = StateFigures({}, 0, 0, 0, {}, None, 0, 0, 0)
    inputs = HealthInputs(
        node_id="v1",
        raft={"role": "leader", "leader_id": "v1"},
        peers=[],
        figures=figures,
        unknown_ids=[],
        acquired_epoch=1,
        grant_expires_at="2099-01-01T00:00:00Z",
        grant_seconds_left=1e9,
        worker=workers[0],
        voters_total=1,
        workers=list(workers),
    )
    return [w for w in warnings_for(inputs) if w["code"].startswith("worker")]


def test_health_warns_per_worker_and_is_critical_only_when_none_answers() -> None:
    up = WorkerView("http://a", True, True, worker_id="w1")
    down = WorkerView("http://b", False, False, worker_id="w2")
    (one,) = _health(up, down)
    assert one["severity"] == "warning" and "worker w2 at http://b" in one["message"]
    both = _health(WorkerView("http://a", False, False, worker_id="w1"), down)
    assert [w["severity"] for w in both] == ["critical", "critical"]


# ---- the admin verbs ----------------------------------------------------------------------------


def test_the_admin_verbs_build_the_table_commands() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["admin", "add-worker", "w3", "--url", "http://127.0.0.1:4703", "--label", "zone=c",
         "--label", "disk=ssd", "--bearer-env", "W3_TOKEN"]
    )  # fmt: skip
    assert args.ops_action == "add_worker"
    assert command_fields(args) == {
        "worker_id": "w3",
        "url": "http://127.0.0.1:4703",
        "labels": {"zone": "c", "disk": "ssd"},
        "bearer_env": "W3_TOKEN",
    }
    for verb, action in (
        ("drain-worker", "drain_worker"),
        ("undrain-worker", "undrain_worker"),
        ("remove-worker", "remove_worker"),
    ):
        parsed = parser.parse_args(["admin", verb, "w3"])
        assert (parsed.ops_action, command_fields(parsed)) == (action, {"worker_id": "w3"})
    flagged = parser.parse_args(["admin", "remove-worker", "--worker-id", "w3"])
    assert command_fields(flagged) == {"worker_id": "w3"}
    with pytest.raises(SystemExit):
        parser.parse_args(["admin", "add-worker", "w3", "--url", "x", "--label", "nolabel"])


def test_add_worker_apply_rejects_an_unknown_field_in_the_worker() -> None:
    bad = {**json.loads('{"worker_id":"w2","url":"http://h","labels":{},"bearer_env":null,'
                        '"admission_bearer_env":null}'), "extra": 1}  # fmt: skip
    from appliance.core.errors import CoreError

    with pytest.raises(CoreError, match="exactly"):
        apply(SchedulerState(Limits()), AddWorker(0, 1, bad, (bad,)))
