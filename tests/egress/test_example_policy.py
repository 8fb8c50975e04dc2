"""The example policy shipped in docs/examples loads and decides as its comments say."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from appliance.egress.policy import SAMPLE_INPUT, RegoPolicy

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "egress.rego"
POLICY = RegoPolicy.load(EXAMPLE.read_text("utf-8"), str(EXAMPLE))


def request(url: str, method: str = "POST", **fields: Any) -> dict[str, Any]:
    scheme, rest = url.split("://", 1)
    host, _, path = rest.partition("/")
    document = {
        **SAMPLE_INPUT,
        "method": method,
        "url": url,
        "url_parsed": {
            "scheme": scheme,
            "host": host,
            "port": 443,
            "path": "/" + path,
            "query": "",
        },
        "addresses": ["93.184.216.34"],
        "addresses_global": True,
        "invocation": {**SAMPLE_INPUT["invocation"], "schedule_name": "nightly-report"},
    }
    document.update(fields)
    return document


@pytest.mark.parametrize(
    ("document", "allowed", "reason"),
    [
        (request("https://hooks.example.com/hooks/build"), True, None),
        (request("https://api.example.com/v1/status", "GET"), True, None),
        (request("http://hooks.example.com/hooks/build"), False, "only https URLs may be fetched"),
        (request("https://evil.example/x"), False, "evil.example is not an API scripts may call"),
        (
            request("https://hooks.example.com/hooks/x", "GET"),
            False,
            "GET is not allowed on hooks.example.com",
        ),
        (request("https://hooks.example.com/admin"), False, "/admin is not a listed path"),
        (
            request(
                "https://hooks.example.com/hooks/x",
                invocation={**SAMPLE_INPUT["invocation"], "schedule_name": "other"},
            ),
            False,
            "this schedule may only read (GET)",
        ),
        (
            request(
                "https://hooks.example.com/hooks/x", addresses=["10.0.0.5"], addresses_global=False
            ),
            False,
            "the host resolves to a non-public address",
        ),
        (
            request("https://hooks.example.com/hooks/x", body_bytes=65537),
            False,
            "the body is larger than 64 KiB",
        ),
    ],
)
def test_the_example_decides_as_documented(
    document: dict[str, Any], allowed: bool, reason: str | None
) -> None:
    decision = POLICY.evaluate(document, 2.0)
    assert (decision.allowed, decision.reason) == (allowed, reason)
