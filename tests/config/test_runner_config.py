"""Runner config (SPEC §6): every field and range, peers, loopback management, raft timings."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from appliance.config.addresses import HostPort
from appliance.config.runner import (
    ManagementConfig,
    Peer,
    RaftTimings,
    load_runner_config,
    parse_runner_config,
)
from appliance.config.urls import Origin
from appliance.core.errors import InvalidConfig
from appliance.core.limits import Limits
from tests.config.conftest import SEED_DEFINITION, runner_dict


def problems_of(obj: object) -> list[tuple[str, str]]:
    with pytest.raises(InvalidConfig) as err:
        parse_runner_config(obj)
    return err.value.problems


def paths_of(obj: object) -> list[str]:
    return [path for path, _ in problems_of(obj)]


def with_(path: str, value: object) -> dict[str, Any]:
    doc = runner_dict()
    *parents, last = path.split(".")
    target = doc
    for key in parents:
        target = target[key]
    target[last] = value
    return doc


def without(path: str) -> dict[str, Any]:
    doc = runner_dict()
    *parents, last = path.split(".")
    target = doc
    for key in parents:
        target = target[key]
    del target[last]
    return doc


def test_a_complete_config_parses_into_typed_values() -> None:
    cfg = parse_runner_config(runner_dict())
    assert cfg.node_id == "n1"
    assert cfg.advertise_addr == "10.0.0.1"
    assert cfg.cluster_port == 7001
    assert cfg.peers == (
        Peer("n2", HostPort("10.0.0.2", 7002)),
        Peer("n3", HostPort("10.0.0.3", 7003)),
    )
    assert cfg.admission_addr == HostPort("10.0.0.1", 4501)
    assert cfg.remote.url == Origin("https", "worker.example.org", 443)
    assert cfg.remote.expires_at == datetime(2027, 1, 31, 12, tzinfo=UTC)
    assert cfg.management == ManagementConfig(
        HostPort("127.0.0.1", 4601), "OPERATOR_TOKEN", "RECOVERY_TOKEN"
    )
    assert cfg.limits == Limits()
    assert len(cfg.schedules) == 1
    assert cfg.raft == RaftTimings(100, 1000, 2000)
    assert cfg.voters == {
        "n1": HostPort("10.0.0.1", 7001),
        "n2": HostPort("10.0.0.2", 7002),
        "n3": HostPort("10.0.0.3", 7003),
    }


def test_optional_sections_default_when_omitted() -> None:
    doc = runner_dict()
    for key in ("limits", "schedules", "management"):
        del doc[key]
    cfg = parse_runner_config(doc)
    assert (cfg.limits, cfg.schedules, cfg.management) == (Limits(), (), None)


@pytest.mark.parametrize(
    "field",
    [
        "node_id",
        "advertise_addr",
        "cluster_port",
        "peers",
        "data_dir",
        "admission_addr",
        "admission_bearer_env",
        "cluster_bearer_env",
        "remote",
        "remote.url",
        "remote.bearer_env",
        "remote.expires_at",
        "remote.session",
        "remote.timeout_seconds",
        "remote.heap_mb",
        "remote.namespace",
        "remote.worker_id",
        "management.addr",
        "management.bearer_env",
    ],
)
def test_required_fields_are_reported_missing_by_path(field: str) -> None:
    assert problems_of(without(field)) == [(field, "is required")]


def test_peers_is_required_even_for_one_voter_so_a_forgotten_list_cannot_split_the_cluster() -> (
    None
):
    doc = without("peers")
    assert problems_of(doc) == [("peers", "is required")]
    doc["peers"] = []
    assert parse_runner_config(doc).voters == {"n1": HostPort("10.0.0.1", 7001)}


@pytest.mark.parametrize(
    "where", ["", "limits", "remote", "management", "raft", "schedules.0", "schedules.0.policy"]
)
def test_unknown_fields_are_rejected_at_every_level(where: str) -> None:
    doc = runner_dict()
    doc["raft"] = {}
    target: Any = doc
    path = ""
    for key in filter(None, where.split(".")):
        target = target[int(key)] if key.isdigit() else target[key]
        path = f"{path}[{key}]" if key.isdigit() else (f"{path}.{key}" if path else key)
    target["surprise"] = True
    assert problems_of(doc) == [(f"{path}.surprise" if path else "surprise", "unknown field")]


@pytest.mark.parametrize(
    ("node_id", "ok"),
    [
        ("a", True),
        ("A-z_0-9", True),
        ("x" * 64, True),
        ("x" * 65, False),
        ("", False),
        ("n 1", False),
        ("n.1", False),
        ("n1@", False),
        ("né", False),
        ("n1\n", False),
    ],
)
def test_node_id_is_1_to_64_of_letters_digits_underscore_hyphen(node_id: str, ok: bool) -> None:
    doc = with_("node_id", node_id)
    if ok:
        assert parse_runner_config(doc).node_id == node_id
    else:
        assert paths_of(doc) == ["node_id"]


@pytest.mark.parametrize(
    ("field", "low", "high"),
    [
        ("cluster_port", 1, 65535),
        ("remote.timeout_seconds", 1, 86400),
        ("remote.heap_mb", 16, 4096),
        ("raft.heartbeat_ms", 10, 999),  # upper end bounded by election_timeout_min_ms (1000)
    ],
)
def test_integer_fields_pass_at_both_ends_and_fail_one_beyond(
    field: str, low: int, high: int
) -> None:
    for ok in (low, high):
        doc = with_(field, ok) if not field.startswith("raft") else _raft({"heartbeat_ms": ok})
        parse_runner_config(doc)
    for bad in (low - 1, high + 1):
        doc = with_(field, bad) if not field.startswith("raft") else _raft({"heartbeat_ms": bad})
        assert paths_of(doc) == [field]


def test_integer_fields_refuse_booleans_and_floats() -> None:
    doc = with_("cluster_port", True)
    doc["remote"]["heap_mb"] = 128.0
    assert problems_of(doc) == [
        ("cluster_port", "must be an integer from 1 to 65535, got true"),
        ("remote.heap_mb", "must be an integer from 16 to 4096, got 128.0"),
    ]


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("10.0.0.1", True),
        ("voter-1.example.org", True),
        ("::1", True),
        ("[2001:db8::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1:7001", False),
        ("", False),
        ("a_b", False),
    ],
)
def test_advertise_addr_is_a_host_others_can_dial(value: str, ok: bool) -> None:
    doc = with_("advertise_addr", value)
    if ok:
        parse_runner_config(doc)
    else:
        assert paths_of(doc) == ["advertise_addr"]


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("0.0.0.0:4501", True),
        ("[::]:4501", True),
        ("h.example:1", True),
        ("127.0.0.1:65535", True),
        ("127.0.0.1:0", False),
        ("127.0.0.1:65536", False),
        ("127.0.0.1", False),
        (4501, False),
    ],
)
def test_admission_addr_is_a_host_port_to_listen_on(value: object, ok: bool) -> None:
    doc = with_("admission_addr", value)
    if ok:
        parse_runner_config(doc)
    else:
        assert paths_of(doc) == ["admission_addr"]


@pytest.mark.parametrize(
    ("peers", "problems"),
    [
        (["n2@10.0.0.2:7002", "n2@10.0.0.9:7009"], [("peers[1]", "repeats the id n2 of item 0")]),
        (
            ["n1@10.0.0.9:7009"],
            [("peers[0]", "must not name this node (n1); list only the others")],
        ),
        (
            ["n2@10.0.0.2:7002", "n3@10.0.0.2:7002"],
            [("peers[1]", "repeats the address 10.0.0.2:7002 of item 0")],
        ),
        (
            ["n2@10.0.0.1:7001"],
            [
                (
                    "peers[0]",
                    "has this node's own address 10.0.0.1:7001 (advertise_addr:cluster_port)",
                )
            ],
        ),
    ],
)
def test_peer_ids_and_addresses_are_distinct_and_never_this_node(
    peers: list[str], problems: list[tuple[str, str]]
) -> None:
    assert problems_of(with_("peers", peers)) == problems


def test_peer_addresses_compare_after_normalization() -> None:
    doc = with_("peers", ["n2@Voter.Example:7002", "n3@voter.example:7002"])
    assert problems_of(doc) == [("peers[1]", "repeats the address voter.example:7002 of item 0")]


@pytest.mark.parametrize(
    "peer",
    [
        "n2",
        "n2@",
        "@10.0.0.2:7002",
        "n 2@10.0.0.2:7002",
        "n2@10.0.0.2",
        "n2@10.0.0.2:0",
        "n2@0.0.0.0:7002",
        "n2@[::1]7002",
        7,
        "n2@10.0.0.2:7002@x",
    ],
)
def test_malformed_peers_are_reported_by_index(peer: object) -> None:
    assert paths_of(with_("peers", ["n3@10.0.0.3:7003", peer])) == ["peers[1]"]


def test_up_to_eight_peers_are_accepted_and_nine_are_not() -> None:
    peers = [f"p{i}@10.1.0.{i}:7000" for i in range(1, 10)]
    assert len(parse_runner_config(with_("peers", peers[:8])).voters) == 9
    assert problems_of(with_("peers", peers)) == [
        ("peers", "must hold from 0 to 8 items (a joining node may list 9), got 9")
    ]


# ---- a node that joins a running cluster (issue 20) -------------------------------------------


def joiner_dict(node_id: str = "n4", port: int = 4504) -> dict[str, Any]:
    """A node that joins the cluster of runner_dict(): every genesis voter is its peer."""
    doc = runner_dict()
    genesis = parse_runner_config(runner_dict()).voters
    doc.update(
        node_id=node_id,
        cluster_port=port,
        join=True,
        peers=[f"{n}@{addr}" for n, addr in genesis.items()],
        data_dir=f"/var/lib/appliance/{node_id}",
    )
    return doc


def test_a_joining_node_seals_the_genesis_voters_and_so_the_same_digest() -> None:
    from appliance.config.contract import contract_digest

    genesis = parse_runner_config(runner_dict())
    joiner = parse_runner_config(joiner_dict())
    assert joiner.join is True and genesis.join is False
    assert joiner.node_id not in joiner.voters
    assert joiner.voters == genesis.voters
    assert contract_digest(joiner) == contract_digest(genesis)
    assert joiner.own_addr == HostPort(genesis.advertise_addr, 4504)


def test_a_joining_node_may_list_nine_genesis_voters_and_not_ten() -> None:
    peers = [f"p{i}@10.1.0.{i}:7000" for i in range(1, 11)]
    doc = joiner_dict()
    doc["peers"] = peers[:9]
    assert len(parse_runner_config(doc).voters) == 9
    doc["peers"] = peers
    assert problems_of(doc) == [("peers", "must hold from 0 to 9 items, got 10")]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"peers": []}, ("peers", "must list every genesis voter of the cluster this node joins")),
        ({"join": "yes"}, ("join", 'must be true or false, got "yes"')),
        (
            {"peers": ["n4@10.0.0.9:4504"]},
            ("peers[0]", "must not name this node (n4); list only the others"),
        ),
    ],
)
def test_a_joining_config_is_refused_naming_the_field(
    change: dict[str, Any], problem: tuple[str, str]
) -> None:
    doc = joiner_dict()
    doc.update(change)
    assert problem in problems_of(doc)


def test_join_is_refused_on_the_etcd_backend() -> None:
    doc = joiner_dict()
    doc["peers"] = []
    etcd = {"kind": "etcd", "endpoints": ["http://127.0.0.1:2379"], "prefix": "/appliance/a"}
    doc["replication"] = etcd
    found = problems_of(doc)
    assert any(path == "join" and "etcd's business" in message for path, message in found), found


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("A", True),
        ("_", True),
        ("MCP_SCHEDULER_TOKEN_2", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("2TOKEN", False),
        ("TOKEN-X", False),
        ("", False),
        ("$TOKEN", False),
    ],
)
def test_credential_fields_hold_environment_variable_names(name: str, ok: bool) -> None:
    for field in (
        "admission_bearer_env",
        "cluster_bearer_env",
        "remote.bearer_env",
        "management.bearer_env",
        "management.recovery_bearer_env",
    ):
        doc = with_(field, name)
        if ok:
            parse_runner_config(doc)
        else:
            assert paths_of(doc) == [field]


def test_data_dir_is_a_non_empty_path_without_nul() -> None:
    assert parse_runner_config(with_("data_dir", "relative/dir")).data_dir == "relative/dir"
    assert paths_of(with_("data_dir", "")) == ["data_dir"]
    assert paths_of(with_("data_dir", "/a\x00b")) == ["data_dir"]
    assert paths_of(with_("data_dir", "/" + "d" * 4096)) == ["data_dir"]
    assert parse_runner_config(with_("data_dir", "/" + "d" * 4095)).data_dir.startswith("/d")


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://w.example", True),
        ("http://127.0.0.1:8080", True),
        ("http://w.example", False),
        ("https://u:p@w.example", False),
        ("https://w.example/api", False),
    ],
)
def test_remote_url_follows_the_origin_rules(url: str, ok: bool) -> None:
    doc = with_("remote.url", url)
    if ok:
        parse_runner_config(doc)
    else:
        assert paths_of(doc) == ["remote.url"]


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        ("2027-01-31T12:00:00Z", datetime(2027, 1, 31, 12, tzinfo=UTC)),
        ("2027-01-31T13:30:00+01:30", datetime(2027, 1, 31, 12, tzinfo=UTC)),
        ("2027-01-31t06:00:00.5-06:00", datetime(2027, 1, 31, 12, 0, 0, 500000, tzinfo=UTC)),
        ("2027-01-31T12:00:00.1234567Z", datetime(2027, 1, 31, 12, 0, 0, 123456, tzinfo=UTC)),
    ],
)
def test_expires_at_is_rfc3339_with_an_offset(text: str, instant: datetime) -> None:
    assert parse_runner_config(with_("remote.expires_at", text)).remote.expires_at == instant


@pytest.mark.parametrize(
    "text",
    [
        "2027-01-31T12:00:00",
        "2027-01-31 12:00:00Z",
        "2027-01-31T12:00Z",
        "2027-01-31",
        "2027-02-30T12:00:00Z",
        "2027-01-31T24:00:00Z",
        "2027-01-31T12:00:60Z",
        "2027-01-31T12:00:00-00:00",
        "2027-01-31T12:00:00+24:00",
        "2027-01-31T12:00:00+0100",
        "1700000000",
        1700000000,
        "0001-01-01T00:00:00+01:00",
    ],
)
def test_expires_at_without_offset_or_malformed_is_refused(text: object) -> None:
    assert paths_of(with_("remote.expires_at", text)) == ["remote.expires_at"]


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("ops-2027", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("has space", False),
        ("tab\t", False),
        ("é", False),
    ],
)
def test_remote_session_is_a_printable_log_tag(value: str, ok: bool) -> None:
    doc = with_("remote.session", value)
    if ok:
        parse_runner_config(doc)
    else:
        assert paths_of(doc) == ["remote.session"]


@pytest.mark.parametrize("field", ["remote.namespace", "remote.worker_id"])
@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("a", True),
        ("operator-scheduler_1.x", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("a/b", False),
        ("a b", False),
        (".hidden", False),
        ("-a", False),
    ],
)
def test_namespace_and_worker_id_are_identifiers(field: str, value: str, ok: bool) -> None:
    doc = with_(field, value)
    if ok:
        parse_runner_config(doc)
    else:
        assert paths_of(doc) == [field]


@pytest.mark.parametrize(
    ("addr", "ok"),
    [
        ("127.0.0.1:4601", True),
        ("127.9.9.9:1", True),
        ("[::1]:4601", True),
        ("localhost:4601", False),
        ("0.0.0.0:4601", False),
        ("10.0.0.1:4601", False),
        ("[::ffff:127.0.0.1]:4601", False),
        ("127.0.0.1", False),
        ("127.0.0.1:0", False),
    ],
)
def test_management_addr_must_be_a_loopback_literal(addr: str, ok: bool) -> None:
    doc = with_("management.addr", addr)
    if ok:
        assert parse_runner_config(doc).management is not None
    else:
        assert paths_of(doc) == ["management.addr"]


def test_recovery_bearer_env_is_optional() -> None:
    cfg = parse_runner_config(without("management.recovery_bearer_env"))
    assert cfg.management is not None and cfg.management.recovery_bearer_env is None


def _raft(raft: dict[str, Any]) -> dict[str, Any]:
    doc = runner_dict()
    doc["raft"] = raft
    return doc


def test_raft_timings_default_and_accept_the_tightest_consistent_values() -> None:
    assert parse_runner_config(_raft({})).raft == RaftTimings(100, 1000, 2000)
    tight = {"heartbeat_ms": 49, "election_timeout_min_ms": 50, "election_timeout_max_ms": 50}
    assert parse_runner_config(_raft(tight)).raft == RaftTimings(49, 50, 50)
    wide = {
        "heartbeat_ms": 5000,
        "election_timeout_min_ms": 60000,
        "election_timeout_max_ms": 60000,
    }
    assert parse_runner_config(_raft(wide)).raft == RaftTimings(5000, 60000, 60000)


@pytest.mark.parametrize(
    ("raft", "problems"),
    [
        (
            {"heartbeat_ms": 1000},
            [("raft.heartbeat_ms", "must be less than election_timeout_min_ms (1000), got 1000")],
        ),
        (
            {"election_timeout_min_ms": 2001},
            [
                (
                    "raft.election_timeout_min_ms",
                    "must not exceed election_timeout_max_ms (2000), got 2001",
                )
            ],
        ),
        ({"heartbeat_ms": 9}, [("raft.heartbeat_ms", "must be an integer from 10 to 5000, got 9")]),
        (
            {"election_timeout_max_ms": 60001},
            [("raft.election_timeout_max_ms", "must be an integer from 50 to 60000, got 60001")],
        ),
        (
            {"election_timeout_min_ms": 49},
            [("raft.election_timeout_min_ms", "must be an integer from 50 to 60000, got 49")],
        ),
    ],
)
def test_raft_timings_keep_heartbeat_below_election_min_at_most_max(
    raft: dict[str, Any], problems: list[tuple[str, str]]
) -> None:
    assert problems_of(_raft(raft)) == problems


def test_schedules_count_may_reach_limits_schedules_but_not_exceed_it() -> None:
    doc = with_("limits", {"schedules": 2})
    doc["schedules"] = [copy.deepcopy(SEED_DEFINITION) for _ in range(2)]
    assert len(parse_runner_config(doc).schedules) == 2
    doc["schedules"].append(copy.deepcopy(SEED_DEFINITION))
    assert problems_of(doc) == [
        ("schedules", "must hold from 0 to 2 items (limits.schedules), got 3")
    ]


def test_schedules_are_checked_against_the_configured_outstanding_limit() -> None:
    doc = with_("limits", {"outstanding": 10, "running": 2})
    definition = copy.deepcopy(SEED_DEFINITION)
    definition["policy"]["missed"] = {"CatchUp": {"cap": 11}}
    doc["schedules"] = [copy.deepcopy(SEED_DEFINITION), definition]
    assert problems_of(doc) == [
        (
            "schedules[1].policy.missed.CatchUp.cap",
            "must be an integer from 1 to 10 (limits.outstanding), got 11",
        )
    ]


def test_invalid_limits_do_not_hide_the_schedules_own_problems() -> None:
    doc = with_("limits", {"records": 0})
    doc["schedules"][0]["cron"] = "61 * * * *"
    assert paths_of(doc) == ["limits.records", "schedules[0].cron"]


def test_every_problem_in_a_broken_config_is_reported_at_once() -> None:
    doc = runner_dict()
    doc["node_id"] = ""
    doc["cluster_port"] = 0
    doc["peers"] = ["bad"]
    doc["limits"] = {"running": 500}
    doc["remote"]["url"] = "http://w.example"
    doc["remote"]["heap_mb"] = 8
    doc["management"]["addr"] = "0.0.0.0:4601"
    doc["extra"] = 1
    assert paths_of(doc) == [
        "extra",
        "node_id",
        "cluster_port",
        "peers[0]",
        "limits.running",
        "remote.url",
        "remote.heap_mb",
        "management.addr",
    ]


def test_the_config_must_be_an_object() -> None:
    assert problems_of(None) == [("$", "must be an object, got null")]


def test_load_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "runner.json"
    path.write_text(json.dumps(runner_dict()), encoding="utf-8")
    assert load_runner_config(path).node_id == "n1"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"node_id": "a", "node_id": "b"}', "duplicate key"),
        (b'{"cluster_port": NaN}', "NaN"),
        (b"{", "not valid JSON"),
        (b'{"data_dir": "\xff"}', "not UTF-8"),
    ],
)
def test_load_refuses_ambiguous_or_broken_json(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "runner.json"
    path.write_bytes(content)
    with pytest.raises(InvalidConfig) as err:
        load_runner_config(path)
    assert err.value.problems[0][0] == "$"
    assert says in err.value.problems[0][1]


def test_load_reports_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig, match="cannot read"):
        load_runner_config(tmp_path / "missing.json")


def test_load_refuses_a_path_that_is_not_a_regular_file_without_blocking(tmp_path: Path) -> None:
    """A FIFO with no writer would hold ``open()`` for ever (issue 36): refused at once, naming
    what the path is; a symlink to a regular file is still read."""
    import os

    fifo = tmp_path / "runner.json"
    os.mkfifo(fifo)
    with pytest.raises(InvalidConfig, match=r"is not a regular file \(a FIFO\)"):
        load_runner_config(fifo)
    with pytest.raises(InvalidConfig, match=r"is not a regular file \(a directory\)"):
        load_runner_config(tmp_path)
    with pytest.raises(InvalidConfig, match=r"is not a regular file \(a character device\)"):
        load_runner_config("/dev/null")
    real = tmp_path / "real.json"
    real.write_text(json.dumps(runner_dict()), encoding="utf-8")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert load_runner_config(link).node_id == "n1"
