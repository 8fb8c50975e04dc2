"""Helpers shared by the egress tests: gates over real policies, and loopback targets."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.config.egress import EGRESS_RULE, EgressSettings
from appliance.core.schema import INVALID, validate
from appliance.egress.credentials import EgressCredential
from appliance.egress.gate import AttemptEgress, EgressGate
from appliance.egress.model import EgressInvocation, FetchRequest, FetchResponse
from appliance.egress.policy import Decision, Policy, RegoPolicy
from appliance.secret import Secret
from tests.egress.target_server import TargetServer

INVOCATION = EgressInvocation("ops", 3, "nightly", 17, 2, 9)

ALLOW_ALL = """package appliance.egress
import rego.v1
allow := true
"""

# Allows everything except the path /deny (with a reason) and the address 127.0.0.2.
MOSTLY = """package appliance.egress
import rego.v1

default allow := false

allow if {
    input.url_parsed.path != "/deny"
    not "127.0.0.2" in input.addresses
}

reason := "the path /deny is not for scripts" if input.url_parsed.path == "/deny"
reason := "127.0.0.2 is off limits" if "127.0.0.2" in input.addresses
"""


class RecordingPolicy:
    """A real policy that also keeps every input it was asked about (what the policy saw)."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.inputs: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def evaluate(self, input_document: dict[str, Any], timeout_seconds: float) -> Decision:
        with self._lock:
            self.inputs.append(input_document)
        return self.inner.evaluate(input_document, timeout_seconds)


def settings(**fields: Any) -> EgressSettings:
    document = {"policy_file": "/etc/appliance/egress.rego", **fields}
    parsed, problems = validate(EGRESS_RULE, document, "egress")
    assert parsed is not INVALID, problems
    return parsed


def rego(source: str = MOSTLY) -> RecordingPolicy:
    return RecordingPolicy(RegoPolicy.load(source, "/etc/appliance/egress.rego"))


def credential(
    origin: str,
    value: str,
    *,
    header: str = "Authorization",
    prefix: str = "/",
    name: str = "HOOK_TOKEN",
) -> tuple[dict[str, Any], str]:
    rule = {"origin": origin, "header": header, "value_env": name, "path_prefix": prefix}
    return rule, value


def make_gate(
    policy: Policy | None = None,
    *,
    credentials: list[tuple[dict[str, Any], str]] = (),  # type: ignore[assignment]
    ca_pem: str | None = None,
    resolver: Any = None,
    **fields: Any,
) -> EgressGate:
    parsed = settings(credentials=[rule for rule, _ in credentials], **fields)
    held = tuple(
        EgressCredential(rule, Secret(value))
        for rule, (_, value) in zip(parsed.credentials, credentials, strict=True)
    )
    extra = {} if resolver is None else {"resolver": resolver}
    return EgressGate(parsed, policy or rego(), held, ca_pem=ca_pem, **extra)


def attempt_of(gate: EgressGate, seconds: float = 20.0) -> AttemptEgress:
    return gate.open_attempt(INVOCATION, time.monotonic() + seconds)


def fetch(attempt: AttemptEgress, url: str, **fields: Any) -> FetchResponse:
    return attempt.prepare(FetchRequest(url, **fields)).run()


@pytest.fixture
def target() -> Iterator[TargetServer]:
    server = TargetServer()
    yield server
    server.close()
