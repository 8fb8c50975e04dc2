"""Wire protocol v1 documents, parsed strictly (docs/protocol.md)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from appliance.core.binding import (
    AUTHORITY_FIELDS,
    BINDING_FIELDS,
    binding_from_json,
    binding_to_json,
)
from appliance.core.occurrence import INT_MAX
from appliance.protocol import v1
from appliance.store.worker_store import Invocation
from appliance.worker.wire import (
    AUTHORITY_RULE,
    BINDING_RULE,
    Authority,
    Binding,
    WireError,
    execution_id_of,
    invocation_of,
    parse_cancel,
    parse_exec,
)
from tests.worker.peers import binding, exec_body


def test_an_exec_document_keeps_the_binding_verbatim() -> None:
    body = exec_body("console.log(1)", occurrence_id=17)
    request = parse_exec(body)
    assert request.document is body["binding"]
    assert request.binding.invocation == Invocation("ns-test", 3, 17, 1)
    assert request.binding.execution_id == "s3-o17-a1"
    assert request.code == "console.log(1)"


def test_another_protocol_version_is_refused_before_anything_else() -> None:
    with pytest.raises(WireError) as refused:
        parse_exec({"protocol": 2, "whatever": True})
    assert refused.value.code == "protocol_version"
    with pytest.raises(WireError):
        parse_exec({"protocol": True, "binding": {}, "code": ""})


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("authority", "heap_mb"), 15),
        (("authority", "heap_mb"), 4097),
        (("authority", "timeout_seconds"), 0),
        (("authority", "timeout_seconds"), 86_401),
        (("authority", "expires_at"), "2027-01-01 00:00:00"),
        (("payload_sha256",), "AB" * 32),
        (("attempt",), -1),
        (("epoch",), True),
    ],
)
def test_binding_fields_out_of_bounds_are_refused(path: tuple[str, ...], value: object) -> None:
    body = exec_body("1", occurrence_id=1)
    target = body["binding"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(WireError) as refused:
        parse_exec(body)
    assert refused.value.code == "invalid_request"
    assert ".".join(path) in refused.value.message


@pytest.mark.parametrize(("heap_mb", "timeout_seconds"), [(16, 1), (4096, 86_400)])
def test_engine_limits_at_their_bounds_are_accepted(heap_mb: int, timeout_seconds: int) -> None:
    body = exec_body("1", occurrence_id=1, heap_mb=heap_mb, timeout_seconds=timeout_seconds)
    assert parse_exec(body).binding.authority.heap_mb == heap_mb


def test_code_is_limited_to_64_kib_of_utf8() -> None:
    assert parse_exec(exec_body("x" * 65_536, occurrence_id=1)).code
    with pytest.raises(WireError):
        parse_exec(exec_body("x" * 65_537, occurrence_id=1))


def test_a_cancel_carries_the_binding_only() -> None:
    cancel = parse_cancel({"protocol": 1, "binding": binding("1", occurrence_id=2)})
    assert cancel.binding.occurrence_id == 2
    with pytest.raises(WireError):
        parse_cancel({"protocol": 1, "binding": binding("1", occurrence_id=2), "code": "1"})


@pytest.mark.parametrize("text", ["s1-o2-a3", "s0-o0-a0", f"s{2**53 - 1}-o1-a{2**53 - 1}"])
def test_execution_ids_round_trip(text: str) -> None:
    invocation = invocation_of(text, "ns")
    assert invocation is not None
    assert execution_id_of(invocation) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "s1-o2",
        "s01-o2-a3",
        "s1-o2-a3-",
        "S1-o2-a3",
        f"s{2**53}-o1-a1",
        f"s{2**63 - 1}-o1-a1",
        "s1-o2-a3\n",
    ],
)
def test_anything_else_is_not_an_execution_id(text: str) -> None:
    assert invocation_of(text, "ns") is None


def test_the_worker_reads_exactly_the_fields_the_core_binds() -> None:
    # One binding type for both ends (appliance/protocol/v1.py); the worker parses every field.
    assert tuple(BINDING_RULE.fields) == BINDING_FIELDS
    assert tuple(AUTHORITY_RULE.fields) == AUTHORITY_FIELDS
    assert Binding is v1.Binding and Authority is v1.Authority and Invocation is v1.Invocation
    assert tuple(f.name for f in fields(Binding)) == BINDING_FIELDS


@pytest.mark.parametrize("name", ["schedule_id", "occurrence_id", "attempt", "epoch"])
def test_ids_stop_at_2_53_minus_1_on_the_wire(name: str) -> None:
    body = exec_body("1", occurrence_id=1)
    body["binding"][name] = v1.ID_MAX
    assert getattr(parse_exec(body).binding, name) == 2**53 - 1
    body["binding"][name] = v1.ID_MAX + 1
    with pytest.raises(WireError) as refused:
        parse_exec(body)
    assert name in refused.value.message


def test_the_core_and_the_wire_share_one_id_limit() -> None:
    assert v1.ID_MAX == INT_MAX == 2**53 - 1


def test_a_binding_the_core_writes_is_parsed_by_the_worker_and_kept_verbatim() -> None:
    committed = binding_from_json(binding("console.log(1)", occurrence_id=9))
    body = {"protocol": 1, "binding": binding_to_json(committed), "code": "console.log(1)"}
    received = parse_exec(body)
    assert received.binding.invocation == Invocation("ns-test", 3, 9, 1)
    assert binding_from_json(received.document) == committed
    assert received.binding == committed  # one type: what the worker parsed is the claim
