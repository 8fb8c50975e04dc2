"""A voter that is not the owner names the owner and the owner's management listener (issue 35,
item 4): three real voters written by ``cluster init``, asked over HTTP and through the real CLI.

Each voter serves its management address on its Raft status; the others learn it (the version
gate's poll), so a 409 carries ``owner_management_addr``. The CLI goes straight to that listener
when it is among the addresses given, and otherwise says which address to give.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from appliance.cli.admin_endpoints import Failed, endpoints, send
from appliance.cluster_init.layout import PORT_SPAN
from appliance.http import HttpClient
from tests.ports import free_ports
from tests.support import wait_for

from .conftest import cluster_init, read_env_file
from .processes import decisions, free_port_block, started

COMMANDS_PATH = "/scheduler/v1/commands"
OWNER_TIMEOUT_S = 60.0
CLI_TIMEOUT_S = 60
DEFINITION = {
    "name": "named-by-the-owner",
    "code": "console.log('x')",
    "cron": "0 0 1 1 *",
    "timezone": "UTC",
}


def owner_of(logs: list[Path]) -> str | None:
    acquired = [
        event["node"]
        for log in logs
        for event in decisions(log)
        if event.get("event") == "ownership_acquired"
    ]
    return acquired[-1] if acquired else None


def management_addr(out: Path, node: str) -> str:
    return json.loads((out / f"{node}.json").read_text())["management"]["addr"]


def admin(env: dict[str, str], cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "appliance", "admin", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


@pytest.mark.slow
def test_a_not_owner_409_names_the_owner_and_its_listener_and_the_cli_goes_there(
    tmp_path: Path,
) -> None:
    out = tmp_path / "cluster"
    base_port = str(free_port_block(PORT_SPAN))
    argv = ("--voters", "3", "--out", str(out), "--base-port", base_port, "--no-tls", "--no-demo")
    assert cluster_init(*argv) == 0
    env = {**os.environ, **read_env_file(out / "cluster.env")}
    token = env["MCP_SCHEDULER_OPERATOR_TOKEN"]
    (out / "named.json").write_text(json.dumps(DEFINITION))
    nodes = ["voter-1", "voter-2", "voter-3"]
    voters = [[sys.executable, "-m", "appliance", "runner", f"{node}.json"] for node in nodes]
    with started(voters, out, env) as logs:
        owner = wait_for(lambda: owner_of(logs), "an acquired owner", OWNER_TIMEOUT_S)
        followers = [node for node in nodes if node != owner]
        addr = {node: management_addr(out, node) for node in nodes}
        url = {node: endpoints([addr[node]])[0] for node in nodes}
        client = HttpClient(read_timeout_ms=10_000)
        body = json.dumps({"action": "disable", "id": 1}).encode()

        def named_409() -> dict[str, Any] | None:
            # The followers learn the owner's listener at their next poll of its status.
            try:
                sent = send(client, [url[followers[0]]], token, "POST", COMMANDS_PATH, body)
            except Failed:  # its listener is not up yet
                return None
            if sent.status == 409 and sent.reply.get("owner_management_addr"):
                return sent.reply
            return None

        try:
            reply = wait_for(named_409, "a 409 naming the owner's listener", OWNER_TIMEOUT_S)
            assert reply["error"]["code"] == "not_owner"
            assert reply["leader_hint"] == owner
            assert reply["owner_management_addr"] == addr[owner]

            # Given the owner's listener after a dead endpoint and the other follower: the
            # first 409 sends the CLI straight to the owner; nothing else is asked.
            dead = f"127.0.0.1:{free_ports(1)[0]}"
            given = endpoints([addr[followers[0]], dead, addr[followers[1]], addr[owner]])
            walked = send(client, given, token, "POST", COMMANDS_PATH, body)
            assert walked.base == url[owner], walked
            assert len(walked.skipped) == 1 and walked.skipped[0].startswith(url[followers[0]])
        finally:
            client.close()

        # Only a follower given: the CLI names the owner and the address to add.
        refused = admin(env, out, "create", "named.json", "--addr", addr[followers[0]])
        assert refused.returncode == 1, refused.stderr
        assert "HTTP 409 not_owner" in refused.stderr
        assert f"the acquired owner is {owner}" in refused.stderr
        assert f"add --addr {addr[owner]}" in refused.stderr
        assert "ssh" not in refused.stderr  # every voter is on this machine: no forward needed

        # The follower first and then the owner: created on the owner, once.
        created = admin(
            env, out, "create", "named.json", "--addr", addr[followers[1]], "--addr", addr[owner]
        )
        assert created.returncode == 0, created.stderr
        listed = admin(env, out, "list", "--json")
        assert listed.returncode == 0, listed.stderr
        names = [
            s["definition"].get("name") for s in json.loads(listed.stdout)["result"]["schedules"]
        ]
        assert names == ["named-by-the-owner"]
