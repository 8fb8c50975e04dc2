"""The sealed contract: one digest for every voter of a cluster; per-node fields stay out of it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.runner import parse_runner_config
from appliance.core.canonical import canonical_digest
from tests.config.conftest import runner_dict


def digest_of(doc: dict[str, Any]) -> str:
    return contract_digest(parse_runner_config(doc))


def test_every_voter_of_a_three_voter_cluster_computes_the_same_digest() -> None:
    digests = {node: digest_of(runner_dict(node)) for node in ("n1", "n2", "n3")}
    assert len(set(digests.values())) == 1, digests


def test_the_contract_holds_voters_limits_schedules_remote_and_replication() -> None:
    contract = sealed_contract(parse_runner_config(runner_dict("n2")))
    assert contract == {
        "voters": {"n1": "10.0.0.1:7001", "n2": "10.0.0.2:7002", "n3": "10.0.0.3:7003"},
        "limits": {
            "schedules": 64,
            "records": 4096,
            "outstanding": 128,
            "running": 16,
            "grace_seconds": 5,
        },
        "schedules": [runner_dict()["schedules"][0]],
        "remote": {
            "url": "https://worker.example.org",
            "bearer_env": "WORKER_TOKEN",
            "expires_at": "2027-01-31T12:00:00Z",
            "session": "ops-2027-01",
            "timeout_seconds": 60,
            "heap_mb": 128,
            "namespace": "operator-scheduler-1",
            "worker_id": "worker-1",
        },
        "replication": {"kind": "raft"},
    }
    assert contract_digest(parse_runner_config(runner_dict("n2"))) == canonical_digest(contract)


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = doc
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        target[last] = value

    return apply


PER_NODE_CHANGES = {
    "data_dir": _set("data_dir", "/elsewhere"),
    "admission_addr": _set("admission_addr", "0.0.0.0:9999"),
    "admission_bearer_env": _set("admission_bearer_env", "OTHER_ADMISSION"),
    "cluster_bearer_env": _set("cluster_bearer_env", "OTHER_CLUSTER"),
    "management": _set("management", {"addr": "[::1]:1", "bearer_env": "OP2"}),
    "raft": _set("raft", {"heartbeat_ms": 50, "election_timeout_min_ms": 500}),
    "peers order": _set("peers", ["n3@10.0.0.3:7003", "n2@10.0.0.2:7002"]),
    "limits written with defaults omitted": _set("limits", {}),
    "expiry written with another offset": _set("remote.expires_at", "2027-01-31T13:00:00+01:00"),
    "origin written with default port": _set("remote.url", "HTTPS://Worker.Example.org:443/"),
}


@pytest.mark.parametrize("change", PER_NODE_CHANGES.values(), ids=PER_NODE_CHANGES.keys())
def test_per_node_settings_and_equivalent_spellings_do_not_change_the_digest(
    change: Callable[[dict[str, Any]], None],
) -> None:
    doc = runner_dict()
    change(doc)
    assert digest_of(doc) == digest_of(runner_dict())


SEALED_CHANGES = {
    "a peer's port": _set("peers", ["n2@10.0.0.2:7009", "n3@10.0.0.3:7003"]),
    "a peer's id": _set("peers", ["n4@10.0.0.2:7002", "n3@10.0.0.3:7003"]),
    "own cluster port": _set("cluster_port", 7101),
    "own advertise addr": _set("advertise_addr", "10.0.0.11"),
    "limits": _set("limits.grace_seconds", 6),
    "schedule code": _set("schedules.0.code", "console.log('other')"),
    "schedules": _set("schedules", []),
    "remote expiry": _set("remote.expires_at", "2027-01-31T12:00:01Z"),
    "remote heap": _set("remote.heap_mb", 256),
    "remote url": _set("remote.url", "https://worker2.example.org"),
    "remote session": _set("remote.session", "ops-2"),
    "remote worker": _set("remote.worker_id", "worker-2"),
    "remote bearer variable": _set("remote.bearer_env", "OTHER_WORKER"),
}


@pytest.mark.parametrize("change", SEALED_CHANGES.values(), ids=SEALED_CHANGES.keys())
def test_any_sealed_difference_changes_the_digest(change: Callable[[dict[str, Any]], None]) -> None:
    doc = runner_dict()
    change(doc)
    assert digest_of(doc) != digest_of(runner_dict())


def test_a_voter_that_disagrees_about_the_mapping_gets_a_different_digest() -> None:
    n3 = runner_dict("n3")
    n3["peers"] = ["n1@10.0.0.1:7001", "n2@10.0.0.2:7999"]  # wrong port for n2
    assert digest_of(n3) != digest_of(runner_dict("n1"))


def test_the_digest_is_a_sha256_hex_string_and_stable() -> None:
    digest = digest_of(copy.deepcopy(runner_dict()))
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert digest == digest_of(runner_dict())


# The digest of ``runner_dict()`` (its seed schedule written with the full policy), computed before
# ``policy`` became optional (issue 21). A store sealed then must keep accepting its config.
DIGEST_BEFORE_POLICY_DEFAULTS = "d3189597f0162bab8dc33278f20f92c1f2817221a6ac41458c79921fd75e64a6"


def test_an_existing_digest_is_unchanged_by_policy_defaults() -> None:
    assert digest_of(runner_dict()) == DIGEST_BEFORE_POLICY_DEFAULTS


def test_a_schedule_without_policy_has_the_digest_of_the_written_out_defaults() -> None:
    doc = runner_dict()
    del doc["schedules"][0]["policy"]
    assert digest_of(doc) == DIGEST_BEFORE_POLICY_DEFAULTS
    partial = runner_dict()
    partial["schedules"][0]["policy"] = {"retry": {}}
    assert digest_of(partial) == DIGEST_BEFORE_POLICY_DEFAULTS
    other = runner_dict()
    other["schedules"][0]["policy"] = {"overlap": "Queue"}
    assert digest_of(other) != DIGEST_BEFORE_POLICY_DEFAULTS
