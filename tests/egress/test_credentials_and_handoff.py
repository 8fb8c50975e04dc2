"""Egress credentials at start-up (resolved, checked, never shown) and the handoff a child gets."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from appliance.config.egress import CredentialRule
from appliance.config.urls import parse_origin
from appliance.core.errors import InvalidConfig
from appliance.egress.credentials import (
    CREDENTIAL_VALUE_BYTES_MAX,
    EgressCredential,
    for_request,
    path_has_prefix,
    resolve_egress_credentials,
)
from appliance.egress.gate import EgressGate
from appliance.egress.handoff import EgressHandoff, prepare_egress
from appliance.egress.target import parse_target
from appliance.secret import Secret
from tests.egress.conftest import ALLOW_ALL, settings

OWN = (Secret("worker-bearer-123456"), Secret("admission-bearer-654321"))


def rule(
    name: str = "HOOK",
    origin: str = "https://api.example.com",
    prefix: str = "/",
    header: str = "authorization",
) -> CredentialRule:
    return CredentialRule(parse_origin(origin), header, name, prefix)


def resolve(value: str) -> tuple[EgressCredential, ...]:
    return resolve_egress_credentials([rule()], {"HOOK": value}, OWN)


def problem_of(value: str | None) -> str:
    environ = {} if value is None else {"HOOK": value}
    with pytest.raises(InvalidConfig) as caught:
        resolve_egress_credentials([rule()], environ, OWN)
    ((path, message),) = caught.value.problems
    assert path == "egress.credentials[0].value_env"
    if value:
        assert value not in message
    return message


def test_a_value_is_resolved_and_held_as_a_secret() -> None:
    (credential,) = resolve("Bearer abc 123")
    assert credential.value.reveal() == "Bearer abc 123"
    assert "abc" not in repr(credential) and "abc" not in str(credential)
    with pytest.raises(TypeError):
        pickle.dumps(credential.value)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (None, "is not set"),
        ("", "is empty"),
        ("Bearer a\r\nX-Injected: 1", "CR or LF"),
        ("Bearer a\nb", "CR or LF"),
        ("tok\rx", "CR or LF"),
        ("nul\x00byte", "visible ASCII"),
        ("snow☃man", "visible ASCII"),
        (" padded", "whitespace"),
        ("worker-bearer-123456", "the worker's own credentials"),
        ("Bearer worker-bearer-123456", "the worker's own credentials"),
        ("admission-bearer-654321", "the worker's own credentials"),
    ],
)
def test_refused_values(value: str | None, says: str) -> None:
    assert says in problem_of(value)


def test_value_length_at_the_boundary() -> None:
    assert resolve("k" * CREDENTIAL_VALUE_BYTES_MAX)
    assert "longer than 4096 bytes" in problem_of("k" * (CREDENTIAL_VALUE_BYTES_MAX + 1))


@pytest.mark.parametrize(
    ("prefix", "path", "matches"),
    [
        ("/", "/anything", True),
        ("/hooks", "/hooks", True),
        ("/hooks", "/hooks/", True),
        ("/hooks", "/hooks/a", True),
        ("/hooks", "/hooksx", False),
        ("/hooks/", "/hooks/a", True),
        ("/hooks/", "/hooks", False),
        ("/a/b", "/a/bc", False),
        ("/a/b", "/a", False),
    ],
)
def test_prefixes_match_at_segment_boundaries(prefix: str, path: str, matches: bool) -> None:
    assert path_has_prefix(path, prefix) is matches


def test_the_longest_prefix_wins_for_a_header() -> None:
    broad = EgressCredential(rule("BROAD", prefix="/"), Secret("b-value-1"))
    narrow = EgressCredential(rule("NARROW", prefix="/hooks"), Secret("n-value-1"))
    other = EgressCredential(rule("OTHER", header="x-key"), Secret("o-value-1"))
    chosen = for_request([broad, narrow, other], parse_target("https://api.example.com/hooks/1"))
    assert {h: c.name for h, c in chosen.items()} == {"authorization": "NARROW", "x-key": "OTHER"}
    chosen = for_request([broad, narrow], parse_target("https://api.example.com/else"))
    assert {h: c.name for h, c in chosen.items()} == {"authorization": "BROAD"}


@pytest.mark.parametrize(
    "url",
    [
        "http://api.example.com/",
        "https://api.example.com:8443/",
        "https://x.api.example.com/",
        "https://api.example.com.evil.test/",
    ],
)
def test_origins_match_exactly(url: str) -> None:
    credential = EgressCredential(rule(), Secret("v-123456"))
    assert not credential.applies_to(parse_target(url))


# -- prepare_egress and the handoff -------------------------------------------------------------


def write_policy(tmp_path: Path, text: str = ALLOW_ALL) -> Path:
    path = tmp_path / "egress.rego"
    path.write_text(text)
    return path


def test_a_missing_policy_file_is_refused_with_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.rego"
    with pytest.raises(InvalidConfig) as caught:
        prepare_egress(settings(policy_file=str(missing)), {}, OWN)
    ((path, message),) = caught.value.problems
    assert path == "egress.policy_file" and str(missing) in message and "cannot be read" in message


def test_an_invalid_policy_is_refused_with_file_and_line(tmp_path: Path) -> None:
    bad = write_policy(
        tmp_path, "package appliance.egress\nimport rego.v1\nallow if {\n  1 == == 1\n}\n"
    )
    with pytest.raises(InvalidConfig) as caught:
        prepare_egress(settings(policy_file=str(bad)), {}, OWN)
    ((path, message),) = caught.value.problems
    assert path == "egress.policy_file" and f"{bad}:4:" in message


def test_every_problem_is_reported_together(tmp_path: Path) -> None:
    rules = [{"origin": "https://a.example", "header": "X-K", "value_env": "UNSET_K"}]
    with pytest.raises(InvalidConfig) as caught:
        prepare_egress(
            settings(
                policy_file=str(tmp_path / "x.rego"),
                credentials=rules,
                ca_file=str(tmp_path / "ca.pem"),
            ),
            {},
            OWN,
        )
    assert [p for p, _ in caught.value.problems] == [
        "egress.policy_file",
        "egress.ca_file",
        "egress.credentials[0].value_env",
    ]


def test_a_ca_file_that_is_not_pem_is_refused(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate")
    with pytest.raises(InvalidConfig, match="not a PEM certificate bundle"):
        prepare_egress(settings(policy_file=str(write_policy(tmp_path)), ca_file=str(ca)), {}, OWN)


def test_the_handoff_round_trips_to_a_gate_and_never_prints_a_value(tmp_path: Path) -> None:
    rules = [
        {"origin": "https://a.example", "header": "X-K", "value_env": "K1", "path_prefix": "/h"}
    ]
    handoff = prepare_egress(
        settings(policy_file=str(write_policy(tmp_path)), credentials=rules, max_requests=7),
        {"K1": "very-secret-value"},
        OWN,
    )
    assert "very-secret-value" not in repr(handoff) and "K1" in repr(handoff)
    document = json.loads(json.dumps(handoff.to_child_json()))  # what crosses the pipe
    assert document["credential_values"] == ["very-secret-value"]
    again = EgressHandoff.from_child_json(document)
    assert again.settings == handoff.settings
    assert again.policy_source == ALLOW_ALL
    gate = EgressGate.from_child_json(document)
    assert gate.settings.max_requests == 7
    assert gate.credentials[0].value.reveal() == "very-secret-value"
    gate.close()


def test_a_handoff_of_another_version_is_refused() -> None:
    with pytest.raises(ValueError, match="version"):
        EgressHandoff.from_child_json({"v": 2})
