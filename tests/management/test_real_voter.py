"""The management listener against a real voter: R2's runner loop, core, machine and single-voter
Raft in process (tests/runner/harness.Voter), with only the worker scripted at the network edge.

Commands go listener → bounded management queue → forwarding consumer → ``Runner.operator`` →
the one serialized runner loop. Proves: the authorization matrix (every credential kind by every
route and tool), the official SDK client (list tools, create, list, cancel, acknowledge),
``list`` is served as a stale local view with the source redacted, the error mapping of core
refusals after admission (503 uncertain) and queue rejection, and that a disconnecting client
does not withdraw its queued command.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from appliance.config.addresses import HostPort
from appliance.http import HttpClient
from appliance.management import (
    BoundedCommandQueue,
    ManagementListener,
    ThreadedConsumer,
)
from appliance.management.wiring import runner_handler
from appliance.runner.worker_client import ObserveResult
from tests.management.bodies import CAP_BYTES, escaped_create
from tests.management.conftest import TOKENS
from tests.management.mcp_raw import call, headers, rpc
from tests.ports import free_ports
from tests.runner.harness import T0, Voter, definition, wait_until


@dataclass
class RealVoter:
    voter: Voter
    gateway: BoundedCommandQueue
    consumer: ThreadedConsumer
    listener: ManagementListener
    http: HttpClient

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.listener.port}"

    def request(
        self,
        method: str,
        path: str,
        role: str | None,
        body: Any = None,
        extra: dict[str, str] | None = None,
    ):
        data = (
            None
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        bearer = None if role is None else (TOKENS.get(role) or role)
        return self.http.request(method, self.base + path, body=data, bearer=bearer, headers=extra)


@pytest.fixture
def real() -> Iterator[RealVoter]:
    with Voter() as voter:
        gateway = BoundedCommandQueue()
        consumer = ThreadedConsumer(gateway, runner_handler(voter.runner)).start()
        listener = ManagementListener(
            HostPort("127.0.0.1", 0), gateway, TOKENS, voter.cfg.limits
        ).start()
        client = HttpClient(read_timeout_ms=30_000)
        try:
            yield RealVoter(voter, gateway, consumer, listener, client)
        finally:
            client.close()
            listener.stop()
            consumer.stop()


def operator_events(voter: Voter) -> int:
    return len(voter.events("operator")) + len(voter.events("operator_refused"))


# ---- authorization matrix ----------------------------------------------------------------------

KINDS = ["missing", "invalid", "worker", "admission", "cluster", "operator", "recovery"]
ROUTES = ["status", "list", "create", "disable", "cancel", "delete", "acknowledge_stopped"]


def _arguments(real: RealVoter, action: str) -> dict[str, Any]:
    if action == "create":
        return {"definition": definition()}
    if action in ("disable", "delete"):
        created = real.voter.command(json.dumps({"action": "create", "definition": definition()}))
        return {"id": created["id"]}
    if action == "cancel":
        return {"occurrence_id": 999}
    if action == "acknowledge_stopped":
        return {"occurrence_id": 999, "dispatcher_and_work_quiesced": True}
    return {}


def _role(kind: str) -> str | None:
    return {"missing": None, "invalid": "not-a-token"}.get(kind, kind)


@pytest.mark.parametrize("transport", ["http", "mcp"])
@pytest.mark.parametrize("action", ROUTES)
@pytest.mark.parametrize("kind", KINDS)
def test_authorization_matrix_on_a_real_voter(real: RealVoter, kind, action, transport) -> None:
    arguments = _arguments(real, action)
    before = operator_events(real.voter)
    role = _role(kind)
    if transport == "http":
        if action in ("status", "list"):
            path = "/scheduler/v1/status" if action == "status" else "/scheduler/v1/schedules"
            response = real.request("GET", path, role)
        else:
            response = real.request(
                "POST", "/scheduler/v1/commands", role, {"action": action, **arguments}
            )
        body = response.json()
        outcome_status = response.status
    else:
        document, extra = call(f"scheduler_{action}", arguments)
        response = real.request("POST", "/mcp", role, document, extra)
        body = response.json()
        outcome_status = response.status
        if response.status == 200:
            text = json.loads(body["result"]["content"][0]["text"])
            outcome_status = text.get("status", 200)
            body = text
    if kind in ("missing", "invalid", "worker", "admission", "cluster"):
        assert response.status == 401
        assert operator_events(real.voter) == before
        return
    if kind == "operator" and action == "acknowledge_stopped":
        assert outcome_status == 403
        assert operator_events(real.voter) == before
        return
    if action in ("cancel", "acknowledge_stopped"):
        # Allowed, reached the loop; the core refused occurrence 999 on apply: a definite
        # refusal (404 with the core's reason), never reported as uncertain.
        assert outcome_status == 404, body
        assert body["error"]["code"] == "no_such_occurrence"
        assert "no occurrence 999" in body["error"]["message"]
        assert "outcome" not in body and "retry_safe" not in body
        assert operator_events(real.voter) == before + 1
        return
    assert outcome_status == 200, body
    assert body["ok"] is True


def test_tools_list_on_a_real_voter_depends_on_the_credential(real: RealVoter) -> None:
    names = {}
    for role in ("operator", "recovery"):
        response = real.request("POST", "/mcp", role, rpc("tools/list"), headers("tools/list"))
        names[role] = [tool["name"] for tool in response.json()["result"]["tools"]]
    assert "scheduler_acknowledge_stopped" not in names["operator"]
    assert names["recovery"][-1] == "scheduler_acknowledge_stopped"


# ---- the official SDK client -------------------------------------------------------------------


def sdk(real: RealVoter, role: str, body) -> Any:
    async def main() -> Any:
        auth = {"Authorization": f"Bearer {TOKENS[role]}"}
        async with httpx2.AsyncClient(headers=auth, timeout=30.0) as http:
            transport = streamable_http_client(f"{real.base}/mcp", http_client=http)
            with anyio.fail_after(60):
                async with Client(transport, mode="2026-07-28") as client:
                    return await body(client)

    return anyio.run(main)


def text(result) -> dict[str, Any]:
    return json.loads(result.content[0].text)


def test_sdk_client_creates_lists_and_cancels_on_a_real_voter(real: RealVoter) -> None:
    v = real.voter
    v.worker.on_observe = lambda eid: ObserveResult("running")

    async def create_and_list(client: Client):
        tools = [tool.name for tool in (await client.list_tools()).tools]
        created = await client.call_tool("scheduler_create", {"definition": definition()})
        listed = await client.call_tool("scheduler_list", {})
        return tools, created, listed

    tools, created, listed = sdk(real, "operator", create_and_list)
    assert "scheduler_acknowledge_stopped" not in tools and len(tools) == 13
    assert created.is_error is False and text(created)["result"]["id"] == 1
    view = text(listed)
    assert view["result"]["stale_local_view"] is True
    assert "console.log(1)" not in listed.content[0].text  # the source is redacted...
    assert view["result"]["schedules"][0]["definition"]["code_bytes"] == len("console.log(1)")
    v.advance_to(T0 + 60)
    v.wait_state(1, "Running")
    wait_until(lambda: v.worker.admissions, "admission")

    async def cancel(client: Client):
        return await client.call_tool("scheduler_cancel", {"occurrence_id": 1})

    cancelled = sdk(real, "operator", cancel)
    assert cancelled.is_error is False
    reply = text(cancelled)
    assert reply["result"]["state"] == "Cancelling"
    assert "intent was recorded" in reply["meaning"]
    v.wait_state(1, "Cancelled")  # only once the (scripted) worker confirmed the stop


def test_sdk_client_acknowledges_unknown_with_the_recovery_credential(real: RealVoter) -> None:
    v = real.voter
    # Admitted (a permit is committed), then the worker restarted: lost, so Unknown.
    v.worker.on_observe = lambda eid: ObserveResult("lost")
    v.command(json.dumps({"action": "create", "definition": definition()}))
    v.advance_to(T0 + 60)
    v.wait_state(1, "Unknown")

    async def operator_tries(client: Client):
        return await client.call_tool(
            "scheduler_acknowledge_stopped",
            {"occurrence_id": 1, "dispatcher_and_work_quiesced": True},
        )

    refused = sdk(real, "operator", operator_tries)
    assert refused.is_error is True and text(refused)["status"] == 403
    assert v.state_of(1) == "Unknown"

    async def recovery(client: Client):
        tools = [tool.name for tool in (await client.list_tools()).tools]
        missing = await client.call_tool("scheduler_acknowledge_stopped", {"occurrence_id": 1})
        done = await client.call_tool(
            "scheduler_acknowledge_stopped",
            {"occurrence_id": 1, "dispatcher_and_work_quiesced": True},
        )
        return tools, missing, done

    tools, missing, done = sdk(real, "recovery", recovery)
    assert "scheduler_acknowledge_stopped" in tools
    assert missing.is_error is True and text(missing)["status"] == 400
    assert done.is_error is False and text(done)["result"]["state"] == "Abandoned"
    assert v.state_of(1) == "Abandoned"


# ---- errors, limits, disconnect ----------------------------------------------------------------


def test_status_on_the_owner_names_node_and_epoch(real: RealVoter) -> None:
    response = real.request("GET", "/scheduler/v1/status", "operator")
    result = response.json()["result"]
    assert response.status == 200
    assert result["ownership"] == {"node": "v1", "epoch": real.voter.runner.epoch}


def test_invalid_definitions_are_400_before_reaching_the_loop(real: RealVoter) -> None:
    before = operator_events(real.voter)
    response = real.request(
        "POST",
        "/scheduler/v1/commands",
        "operator",
        {"action": "create", "definition": definition(cron="0 0 31 2 *")},
    )
    assert response.status == 400
    assert response.json()["error"]["field"] == "definition.cron"
    assert operator_events(real.voter) == before


def test_queue_full_on_a_real_voter_is_503_accepted_false(real: RealVoter) -> None:
    real.consumer.pause()
    try:
        for _ in range(64):
            real.gateway.submit({"action": "status"}, role="operator")
        response = real.request(
            "POST",
            "/scheduler/v1/commands",
            "operator",
            {"action": "create", "definition": definition()},
        )
        assert response.status == 503 and response.json()["accepted"] is False
    finally:
        real.consumer.resume()
    assert real.consumer.wait_idle(30.0)


def test_a_disconnected_client_does_not_withdraw_its_create(real: RealVoter) -> None:
    real.consumer.pause()
    body = json.dumps({"action": "create", "definition": definition()}).encode()
    request = (
        b"POST /scheduler/v1/commands HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {TOKENS['operator']}\r\n".encode()
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with socket.create_connection(("127.0.0.1", real.listener.port), timeout=5) as sock:
        sock.sendall(request)
        wait_until(lambda: len(real.gateway) == 1, "the command to be queued")
    real.consumer.resume()
    assert real.consumer.wait_idle(30.0)
    listed = real.request("GET", "/scheduler/v1/schedules", "operator").json()
    assert [s["id"] for s in listed["result"]["schedules"]] == [1]


def test_72_kib_boundary_with_escaped_source_on_a_real_voter(real: RealVoter) -> None:
    at_cap = real.request("POST", "/scheduler/v1/commands", "operator", escaped_create(CAP_BYTES))
    assert at_cap.status == 200, at_cap.body[:300]
    over = real.request("POST", "/scheduler/v1/commands", "operator", escaped_create(CAP_BYTES + 1))
    assert over.status == 413
    listed = real.request("GET", "/scheduler/v1/schedules", "operator").json()
    assert [s["id"] for s in listed["result"]["schedules"]] == [1]


def test_origin_header_is_403_on_a_real_voter(real: RealVoter) -> None:
    response = real.request("GET", "/scheduler/v1/status", "operator", extra={"Origin": "null"})
    assert response.status == 403


def test_409_on_a_voter_without_acquired_ownership() -> None:
    voter = Voter()  # replication never started: this voter never acquires ownership
    voter.runner.start()
    gateway = BoundedCommandQueue()
    consumer = ThreadedConsumer(gateway, runner_handler(voter.runner)).start()
    listener = ManagementListener(
        HostPort("127.0.0.1", 0), gateway, TOKENS, voter.cfg.limits
    ).start()
    client = HttpClient(read_timeout_ms=30_000)
    try:
        base = f"http://127.0.0.1:{listener.port}"
        status = client.get(base + "/scheduler/v1/status", bearer=TOKENS["operator"])
        assert status.status == 409 and status.json()["error"]["code"] == "not_owner"
        body = json.dumps({"action": "create", "definition": definition()}).encode()
        create = client.post(base + "/scheduler/v1/commands", body, bearer=TOKENS["operator"])
        assert create.status == 409
        listed = client.get(base + "/scheduler/v1/schedules", bearer=TOKENS["operator"])
        assert listed.status == 200  # list is a stale local view, served by any voter
        assert listed.json()["result"]["schedules"] == []
    finally:
        client.close()
        listener.stop()
        consumer.stop()
        voter.runner.drain_and_stop(1.0)


def _free_port() -> int:
    return free_ports(1)[0]


@pytest.mark.parametrize("with_recovery", [True, False])
def test_management_service_from_config_and_resolved_credentials(with_recovery: bool) -> None:
    """The wiring R2 uses: config ``management`` + resolved credentials + ``Runner``.

    Omitting ``recovery_bearer_env`` disables remote recovery entirely: the would-be recovery
    token is unknown (401) and the operator is refused (403), so nothing can acknowledge.
    """
    from dataclasses import replace

    from appliance.config.credentials import resolve_runner_credentials
    from appliance.config.runner import ManagementConfig
    from appliance.management import ManagementService

    env = {"A": "adm-1", "C": "clu-1", "W": "wrk-1", "OP": "op-1", "REC": "rec-1"}
    with Voter() as voter:
        # Admitted (a permit is committed), then the worker restarted: lost, so Unknown.
        voter.worker.on_observe = lambda eid: ObserveResult("lost")
        cfg = replace(
            voter.cfg,
            management=ManagementConfig(
                addr=HostPort("127.0.0.1", _free_port()),
                bearer_env="OP",
                recovery_bearer_env="REC" if with_recovery else None,
            ),
        )
        credentials = resolve_runner_credentials(cfg, env)
        service = ManagementService(cfg, credentials, voter.runner).start()
        client = HttpClient(read_timeout_ms=30_000)
        try:
            base = f"http://127.0.0.1:{service.port}"
            voter.command(json.dumps({"action": "create", "definition": definition()}))
            voter.advance_to(T0 + 60)
            voter.wait_state(1, "Unknown")
            ack = json.dumps(
                {
                    "action": "acknowledge_stopped",
                    "occurrence_id": 1,
                    "dispatcher_and_work_quiesced": True,
                }
            ).encode()
            url = base + "/scheduler/v1/commands"
            assert client.post(url, ack, bearer="op-1").status == 403
            for token in ("adm-1", "clu-1", "wrk-1"):
                assert client.post(url, ack, bearer=token).status == 401
            response = client.post(url, ack, bearer="rec-1")
            if with_recovery:
                assert response.status == 200
                assert voter.state_of(1) == "Abandoned"
            else:
                assert response.status == 401
                assert voter.state_of(1) == "Unknown"
            assert client.get(base + "/scheduler/v1/status", bearer="op-1").status == 200
        finally:
            client.close()
            service.stop()
