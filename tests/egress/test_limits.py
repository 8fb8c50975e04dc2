"""The egress limits not covered elsewhere, each at its boundary."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from appliance.core.errors import InvalidConfig
from appliance.egress.connection import ADDRESSES_MAX, system_resolver
from appliance.egress.handoff import CA_FILE_BYTES_MAX, prepare_egress
from appliance.egress.policy import OPA_RESPONSE_BYTES_MAX, POLICY_BYTES_MAX, SAMPLE_INPUT
from tests.egress.conftest import ALLOW_ALL, settings
from tests.egress.fake_opa import FakeOpa


def padded_policy(size: int) -> str:
    body = ALLOW_ALL + "# "
    return body + "x" * (size - len(body.encode()) - 1) + "\n"


def test_a_policy_file_at_the_size_limit_loads_and_one_byte_more_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "egress.rego"
    path.write_text(padded_policy(POLICY_BYTES_MAX))
    assert len(path.read_bytes()) == POLICY_BYTES_MAX
    assert prepare_egress(settings(policy_file=str(path)), {}, ()).policy_source is not None
    path.write_text(padded_policy(POLICY_BYTES_MAX + 1))
    with pytest.raises(InvalidConfig, match=f"larger than {POLICY_BYTES_MAX} bytes"):
        prepare_egress(settings(policy_file=str(path)), {}, ())


def test_a_ca_file_over_its_size_limit_is_refused(tmp_path: Path) -> None:
    policy = tmp_path / "egress.rego"
    policy.write_text(ALLOW_ALL)
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"#" * (CA_FILE_BYTES_MAX + 1))
    with pytest.raises(InvalidConfig, match=f"larger than {CA_FILE_BYTES_MAX} bytes"):
        prepare_egress(settings(policy_file=str(policy), ca_file=str(ca)), {}, ())
    ca.write_bytes(b"#" * CA_FILE_BYTES_MAX)  # at the limit it is read (and then is no PEM)
    with pytest.raises(InvalidConfig, match="not a PEM certificate bundle"):
        prepare_egress(settings(policy_file=str(policy), ca_file=str(ca)), {}, ())


def test_at_most_addresses_max_addresses_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    many = [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", (f"10.0.0.{i}", 443))
        for i in range(1, ADDRESSES_MAX + 5)
    ]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: many + many)
    found = system_resolver("many.test", 443)
    assert found == [f"10.0.0.{i}" for i in range(1, ADDRESSES_MAX + 1)]


def opa_answer_of_size(size: int) -> dict[str, Any]:
    document = {"result": {"allow": True, "pad": ""}}
    document["result"]["pad"] = "p" * (size - len(json.dumps(document).encode()))
    assert len(json.dumps(document).encode()) == size
    return document


def test_an_opa_answer_at_the_size_limit_is_read_and_one_byte_more_denies() -> None:
    exact = FakeOpa((200, opa_answer_of_size(OPA_RESPONSE_BYTES_MAX)))
    over = FakeOpa((200, opa_answer_of_size(OPA_RESPONSE_BYTES_MAX + 1)))
    try:
        assert exact.policy().evaluate(SAMPLE_INPUT, 5.0).allowed
        decision = over.policy().evaluate(SAMPLE_INPUT, 5.0)
        assert not decision.allowed and f"exceeds {OPA_RESPONSE_BYTES_MAX} bytes" in decision.reason
    finally:
        exact.close()
        over.close()
