"""The runner config's ``replication`` object (appliance/config/replication.py) and the etcd
factory (appliance/replication/etcd_config.py)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from appliance.config.contract import contract_digest
from appliance.config.replication import (
    ENDPOINTS_MAX,
    LEASE_TTL_SECONDS_MAX,
    LEASE_TTL_SECONDS_MIN,
    PREFIX_BYTES_MAX,
    RAFT,
    REPLICATION,
    EtcdBackend,
    check_peers,
    contract_entry,
)
from appliance.config.runner import RaftTimings
from appliance.core.schema import CrossCheck, Field, ListOf, Obj, Text, validate
from appliance.replication.etcd import EtcdReplication
from appliance.replication.etcd_config import build_etcd_replication, etcd_auth
from appliance.replication.etcd_member import EtcdMember, shared_contract_digest
from tests.runner.harness import config as harness_config

ETCD = {"kind": "etcd", "endpoints": ["http://127.0.0.1:2379"], "prefix": "/appliance/prod"}


def parse(value: object) -> tuple[object, list[tuple[str, str]]]:
    return validate(REPLICATION, value, "replication")


def test_raft_is_spelled_kind_raft_and_nothing_else() -> None:
    assert parse({"kind": "raft"}) == (RAFT, [])
    assert parse({"kind": "raft", "endpoints": []})[1] == [
        ("replication.endpoints", "unknown field")
    ]


def test_an_etcd_backend_parses_with_its_defaults() -> None:
    parsed, problems = parse(ETCD)
    assert problems == []
    assert parsed == EtcdBackend(("http://127.0.0.1:2379",), "/appliance/prod", None, 5)


def test_unknown_kinds_and_unknown_fields_are_refused() -> None:
    assert parse({"kind": "zookeeper"})[1] == [
        ("replication.kind", 'must be "raft" or "etcd", got "zookeeper"')
    ]
    assert parse({**ETCD, "ttl": 3})[1] == [("replication.ttl", "unknown field")]
    assert parse("etcd")[1][0][0] == "replication"


@pytest.mark.parametrize(
    ("ttl", "ok"),
    [
        (LEASE_TTL_SECONDS_MIN, True),
        (LEASE_TTL_SECONDS_MIN - 1, False),
        (LEASE_TTL_SECONDS_MAX, True),
        (LEASE_TTL_SECONDS_MAX + 1, False),
        (True, False),
    ],
)
def test_the_lease_ttl_is_bounded(ttl: object, ok: bool) -> None:
    assert (parse({**ETCD, "lease_ttl_seconds": ttl})[1] == []) is ok


def test_endpoints_count_is_bounded_and_each_is_an_origin_only() -> None:
    many = [f"http://127.0.0.1:{2000 + i}" for i in range(ENDPOINTS_MAX)]
    assert parse({**ETCD, "endpoints": many})[1] == []
    over = [*many, "http://127.0.0.1:3999"]
    assert parse({**ETCD, "endpoints": over})[1] != []
    assert parse({**ETCD, "endpoints": []})[1] != []
    for bad in ("ftp://h:1", "http://h:1/v3", "http://u:p@h:1", "http://h:1/", "h:1"):
        assert parse({**ETCD, "endpoints": [bad]})[1] != [], bad
    dup = ["http://127.0.0.1:2379", "http://127.0.0.1:2379"]
    assert parse({**ETCD, "endpoints": dup})[1] == [
        ("replication.endpoints[1]", "is a repeat of item 0")
    ]


def test_the_prefix_is_an_absolute_key_path_of_bounded_length() -> None:
    at_limit = "/" + "p" * (PREFIX_BYTES_MAX - 1)
    assert parse({**ETCD, "prefix": at_limit})[1] == []
    assert parse({**ETCD, "prefix": at_limit + "p"})[1] != []
    for bad in ("appliance", "/", "/a/", "/a//b", "/a b"):
        assert parse({**ETCD, "prefix": bad})[1] != [], bad


def test_etcd_requires_empty_peers_when_plugged_into_a_config() -> None:
    rule = Obj(
        {"peers": Field(ListOf(Text(100))), "replication": Field(REPLICATION, False, RAFT)},
        checks=(CrossCheck(("replication", "peers"), check_peers),),
    )
    assert validate(rule, {"peers": [], "replication": ETCD})[1] == []
    assert validate(rule, {"peers": ["b@h:1"], "replication": ETCD})[1] == [
        ("peers", 'must be empty when replication.kind is "etcd"')
    ]
    assert validate(rule, {"peers": ["b@h:1"]})[1] == []  # raft by default


def test_the_sealed_contract_tells_the_backends_apart() -> None:
    etcd = parse(ETCD)[0]
    assert contract_entry(RAFT) == {"kind": "raft"}
    assert contract_entry(etcd) == {  # type: ignore[arg-type]
        "kind": "etcd",
        "endpoints": ["http://127.0.0.1:2379"],
        "prefix": "/appliance/prod",
    }


def test_auth_comes_from_the_named_environment_variable() -> None:
    backend = EtcdBackend(("http://127.0.0.1:2379",), "/a", auth_env="ETCD_AUTH")
    assert etcd_auth(backend, {"ETCD_AUTH": "root:s3cret"}) == ("root", "s3cret")
    with pytest.raises(ValueError, match="ETCD_AUTH is unset"):
        etcd_auth(backend, {})
    with pytest.raises(ValueError, match="user:password"):
        etcd_auth(backend, {"ETCD_AUTH": "no-colon"})


def test_the_factory_builds_an_etcd_replication_from_a_runner_config() -> None:
    raft = RaftTimings(snapshot_entries=123, trailing_entries=45)
    cfg = SimpleNamespace(node_id="n1", replication=parse(ETCD)[0], raft=raft)
    built = build_etcd_replication(cfg, None, None, lambda i, c: None, 7, environ={})
    assert isinstance(built, EtcdReplication)
    assert built.status()["applied_index"] == 7
    # The raft object's compaction triggers drive the etcd compaction too (docs/etcd.md).
    assert (built.settings.snapshot_entries, built.settings.trailing_entries) == (123, 45)
    built.gateway.close()
    with pytest.raises(ValueError):
        build_etcd_replication(
            SimpleNamespace(node_id="n1", replication=RAFT), None, None, lambda i, c: None, 0
        )


def test_the_member_is_a_drop_in_for_the_raft_member() -> None:
    base = dataclasses.replace(harness_config(), replication=parse(ETCD)[0])
    member = EtcdMember(base, None, None, lambda i, c: None, contract_digest="d", applied_index=3)
    assert member.replication.status()["applied_index"] == 3
    member.replication.gateway.close()
    # Each instance seals only itself as the voter; the digest stamped on every snapshot must
    # still be the same for all instances of one appliance, and differ for another contract.
    digests, sealed = set(), set()
    for node_id, port in (("n1", 7001), ("n2", 7002)):
        cfg = dataclasses.replace(base, node_id=node_id, cluster_port=port)
        assert cfg.voters == {node_id: cfg.own_addr}  # no peers on etcd: only itself
        digests.add(shared_contract_digest(cfg))
        sealed.add(contract_digest(cfg))
    assert len(sealed) == 2  # the sealed digests differ per instance...
    assert len(digests) == 1  # ...the shared one does not
    other = dataclasses.replace(base, replication=parse({**ETCD, "prefix": "/other"})[0])
    assert shared_contract_digest(other) not in digests
