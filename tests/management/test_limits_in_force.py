"""The management listener checks against the limits in force: after an ``amend_limits`` the
HTTP and MCP surfaces accept what the new limits allow, without a restart (issue 20)."""

from __future__ import annotations

import copy
from dataclasses import replace

import falcon.testing

from appliance.core.limits import Limits
from appliance.management import (
    BoundedCommandQueue,
    ThreadedConsumer,
    create_management_app,
)
from tests.management.conftest import DEFINITION, TOKENS, bearer
from tests.management.fake_runner import FakeRunner
from tests.management.mcp_raw import call

GENESIS = Limits()


def catch_up(cap: int) -> dict[str, object]:
    definition = copy.deepcopy(DEFINITION)
    definition["policy"]["missed"] = {"CatchUp": {"cap": cap}}  # type: ignore[index]
    return {"action": "create", "definition": definition}


def test_http_and_mcp_follow_an_amendment_of_the_limits() -> None:
    in_force = [GENESIS]
    runner = FakeRunner()
    gateway = BoundedCommandQueue()
    consumer = ThreadedConsumer(gateway, runner.handle).start()
    client = falcon.testing.TestClient(create_management_app(gateway, TOKENS, lambda: in_force[0]))
    try:
        over_genesis = catch_up(GENESIS.outstanding + 1)
        body, mcp_headers = call("scheduler_create", {"definition": over_genesis["definition"]})
        mcp_headers = {**mcp_headers, **bearer("operator")}

        def http() -> falcon.testing.Result:
            return client.simulate_post(
                "/scheduler/v1/commands", json=over_genesis, headers=bearer("operator")
            )

        def mcp() -> str:
            return client.simulate_post("/mcp", json=body, headers=mcp_headers).text

        refused = http()
        assert refused.status_code == 400 and "limits.outstanding" in refused.text
        assert "limits.outstanding" in mcp()
        in_force[0] = replace(GENESIS, outstanding=GENESIS.outstanding + 1)  # amend_limits
        accepted = http()
        assert accepted.status_code == 200, accepted.text
        answer = mcp()
        assert "limits.outstanding" not in answer and '"isError":true' not in answer, answer
    finally:
        consumer.stop()
