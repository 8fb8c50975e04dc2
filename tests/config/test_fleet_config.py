"""``remote.workers`` (issue 33): the fleet's config rules, its credentials and its contract."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from appliance.config.contract import (
    contract_digest,
    remote_from_json,
    remote_to_json,
    sealed_contract,
)
from appliance.config.credentials import credential_problem, resolve_runner_credentials
from appliance.config.runner import WORKERS_MAX, parse_runner_config
from appliance.core.errors import InvalidConfig
from appliance.core.placement import LABELS_MAX
from tests.config.conftest import runner_dict

ENV = {
    "ADMISSION_TOKEN": "admission-token-1",
    "CLUSTER_TOKEN": "cluster-token-1",
    "WORKER_TOKEN": "worker-token-1",
    "OPERATOR_TOKEN": "operator-token-1",
    "RECOVERY_TOKEN": "recovery-token-1",
}


def fleet_doc(workers: list[dict[str, Any]]) -> dict[str, Any]:
    doc = runner_dict()
    del doc["remote"]["url"], doc["remote"]["worker_id"]
    doc["remote"]["workers"] = workers
    return doc


def worker(i: int, **extra: Any) -> dict[str, Any]:
    return {"worker_id": f"worker-{i}", "url": f"https://w{i}.example.org", **extra}


def problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(InvalidConfig) as info:
        parse_runner_config(doc)
    return info.value.problems


def test_a_fleet_parses_with_labels_and_default_credentials() -> None:
    cfg = parse_runner_config(fleet_doc([worker(1, labels={"zone": "a"}), worker(2)]))
    assert cfg.remote.url is None and cfg.remote.worker_id is None
    (w1, w2) = cfg.remote.fleet
    assert (w1.worker_id, w1.url.url, w1.labels) == (
        "worker-1",
        "https://w1.example.org",
        (("zone", "a"),),
    )
    assert (w2.bearer_env, w2.admission_bearer_env) == (None, None)  # remote's and the runner's
    assert cfg.remote.worker("worker-2") == w2 and cfg.remote.worker("worker-3") is None


def test_the_one_worker_form_is_a_fleet_of_one() -> None:
    cfg = parse_runner_config(runner_dict())
    (only,) = cfg.remote.fleet
    assert (only.worker_id, only.url.url, only.labels) == (
        "worker-1",
        "https://worker.example.org",
        (),
    )


def test_exactly_one_form_is_given() -> None:
    both = fleet_doc([worker(1)])
    both["remote"]["url"] = "https://x.example.org"
    assert problems(both)[0] == (
        "remote.url",
        "give either url and worker_id (one worker) or workers (a fleet), not both",
    )
    neither = fleet_doc([worker(1)])
    del neither["remote"]["workers"]
    assert problems(neither) == [
        ("remote.url", "is required"),
        ("remote.worker_id", "is required"),
    ]


def test_the_fleet_size_limit_is_exact() -> None:
    at_limit = [worker(i) for i in range(WORKERS_MAX)]
    assert len(parse_runner_config(fleet_doc(at_limit)).remote.fleet) == WORKERS_MAX
    over = problems(fleet_doc([*at_limit, worker(WORKERS_MAX)]))
    assert over == [("remote.workers", f"must hold from 1 to 64 items, got {WORKERS_MAX + 1}")]
    assert problems(fleet_doc([]))[0] == ("remote.workers", "must hold from 1 to 64 items, got 0")


def test_ids_and_urls_are_unique_after_normalization() -> None:
    same_id = problems(fleet_doc([worker(1), {**worker(2), "worker_id": "worker-1"}]))
    assert same_id == [("remote.workers[1]", "is a repeat of the worker_id of item 0")]
    same_url = problems(fleet_doc([worker(1), {**worker(2), "url": "HTTPS://W1.example.org:443/"}]))
    assert same_url == [
        ("remote.workers[1].url", "repeats the url https://w1.example.org of item 0")
    ]


def test_a_worker_url_follows_the_origin_rules() -> None:
    ((path, message),) = problems(fleet_doc([{**worker(1), "url": "http://10.0.0.5:4701"}]))
    assert path == "remote.workers[0].url" and "loopback" in message
    ((path, _),) = problems(fleet_doc([{**worker(1), "url": "https://w1.example.org/path"}]))
    assert path == "remote.workers[0].url"


def test_worker_labels_are_bounded() -> None:
    labels = {f"k{i}": "v" for i in range(LABELS_MAX)}
    parse_runner_config(fleet_doc([worker(1, labels=labels)]))
    ((path, message),) = problems(fleet_doc([worker(1, labels={**labels, "k-extra": "v"})]))
    assert (path, message) == ("remote.workers[0].labels", "must hold at most 16 labels, got 17")
    assert problems(fleet_doc([worker(1, unknown=1)])) == [
        ("remote.workers[0].unknown", "unknown field")
    ]


def test_per_worker_credentials_resolve_and_must_differ() -> None:
    doc = fleet_doc([worker(1, bearer_env="W1_TOKEN", admission_bearer_env="A1_TOKEN"), worker(2)])
    cfg = parse_runner_config(doc)
    env = {**ENV, "W1_TOKEN": "w1-bearer", "A1_TOKEN": "w1-admission"}
    creds = resolve_runner_credentials(cfg, env)
    assert creds.worker_bearer("worker-1").reveal() == "w1-bearer"
    assert creds.worker_bearer("worker-2").reveal() == "worker-token-1"  # the default
    assert creds.admissions["worker-1"].reveal() == "w1-admission"
    roles = creds.known_roles()
    assert {"worker:worker-1", "admission:worker-1"} <= set(roles)
    with pytest.raises(InvalidConfig) as reused:
        resolve_runner_credentials(cfg, {**env, "A1_TOKEN": "admission-token-1"})
    assert reused.value.problems[0][0] == "remote.workers[0].admission_bearer_env"
    with pytest.raises(InvalidConfig) as missing:
        resolve_runner_credentials(cfg, {**ENV, "W1_TOKEN": "x-1"})
    assert missing.value.problems == [
        ("remote.workers[0].admission_bearer_env", "environment variable A1_TOKEN is not set")
    ]


def test_a_credential_an_add_worker_names_must_be_usable_here() -> None:
    creds = resolve_runner_credentials(parse_runner_config(runner_dict()), ENV)
    known = creds.known_roles()
    assert credential_problem("W9", {}, known) == "environment variable W9 is not set on this voter"
    reused = credential_problem("W9", {"W9": "cluster-token-1"}, known)
    assert reused is not None and "cluster credential" in reused and "cluster-token" not in reused
    assert credential_problem("W9", {"W9": "has space"}, known) is not None
    assert credential_problem("W9", {"W9": "fresh-one"}, known) is None


def test_the_one_worker_digest_is_unchanged_and_the_fleet_is_sealed() -> None:
    single = parse_runner_config(runner_dict())
    assert "workers" not in sealed_contract(single)["remote"]
    assert set(remote_to_json(single.remote)) >= {"url", "worker_id"}
    fleet = parse_runner_config(fleet_doc([worker(1, labels={"zone": "a"}), worker(2)]))
    sealed = sealed_contract(fleet)["remote"]
    assert "url" not in sealed and "worker_id" not in sealed
    assert sealed["workers"][0] == {
        "worker_id": "worker-1",
        "url": "https://w1.example.org",
        "labels": {"zone": "a"},
        "bearer_env": None,
        "admission_bearer_env": None,
    }
    relabelled = copy.deepcopy(fleet_doc([worker(1, labels={"zone": "b"}), worker(2)]))
    assert contract_digest(parse_runner_config(relabelled)) != contract_digest(fleet)
    for cfg in (single, fleet):
        assert remote_from_json(remote_to_json(cfg.remote)) == cfg.remote
