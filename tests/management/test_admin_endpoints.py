"""``appliance admin`` with several endpoints (issue 21, Build 4): commands reach the acquired
owner; the CLI moves on only after a 409 ``not_owner`` or a definite connection failure; an
ambiguous send is reported as uncertain and never re-sent."""

from __future__ import annotations

import argparse
import io
import json
import socket
import threading
from collections.abc import Iterator

import pytest

from appliance.cli import admin_ops
from appliance.cli.admin_endpoints import (
    ADDR_ENV,
    UsageError,
    endpoints,
    owner_advice,
    owner_base,
    send,
)
from appliance.http import HttpClient
from tests.management.conftest import DEFINITION, TOKENS, Live, start_live
from tests.ports import free_ports

COMMANDS = "/scheduler/v1/commands"
DISABLE = json.dumps({"action": "disable", "id": 1}).encode()


def run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="appliance admin")
    admin_ops.register(parser.add_subparsers(dest="tool", required=True))
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    code = admin_ops.run(args, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(admin_ops.OPERATOR_TOKEN_ENV, TOKENS["operator"])
    monkeypatch.delenv(ADDR_ENV, raising=False)


@pytest.fixture
def pair() -> Iterator[tuple[Live, Live]]:
    follower, owner = start_live(), start_live()
    follower.runner.owner = False
    follower.runner.leader_hint = "voter-2"
    try:
        yield follower, owner
    finally:
        for live in (follower, owner):
            live.listener.stop()
            live.consumer.stop()


def addr(live: Live) -> str:
    return f"127.0.0.1:{live.listener.port}"


def test_endpoints_from_repeated_flags_a_comma_list_or_the_environment() -> None:
    assert endpoints(["127.0.0.1:1", "127.0.0.1:2,[::1]:3"]) == [
        "http://127.0.0.1:1", "http://127.0.0.1:2", "http://[::1]:3"
    ]  # fmt: skip
    assert endpoints(None, {ADDR_ENV: "127.0.0.1:5,127.0.0.1:6"}) == [
        "http://127.0.0.1:5", "http://127.0.0.1:6"
    ]  # fmt: skip
    assert endpoints(None, {}) == ["http://127.0.0.1:4601"]
    with pytest.raises(UsageError, match="loopback"):
        endpoints(["127.0.0.1:1", "10.0.0.2:4601"])
    with pytest.raises(UsageError, match="at most 16"):
        endpoints([f"127.0.0.1:{port}" for port in range(1, 18)])


def test_a_create_goes_past_a_dead_endpoint_and_a_follower_to_the_owner(pair) -> None:
    follower, owner = pair
    dead = f"127.0.0.1:{free_ports(1)[0]}"
    argv = ["create", "-", "--addr", dead, "--addr", addr(follower), "--addr", addr(owner)]
    code, out, err = run(argv, stdin=json.dumps(DEFINITION))
    assert code == 0, err
    assert "id" in out
    assert follower.runner.schedules == {}  # refused there as not owner, nothing applied
    assert list(owner.runner.schedules) == [1]
    assert len(owner.runner.executed) == 1


def test_status_is_answered_by_the_owner_among_the_endpoints(pair) -> None:
    follower, owner = pair
    code, out, err = run(["status", "--addr", addr(follower), "--addr", addr(owner), "--json"])
    assert code == 0, err
    assert json.loads(out)["result"]["ownership"]["node"] == "n1"


def test_when_no_endpoint_is_the_owner_the_error_names_it_and_how_to_reach_it(pair) -> None:
    follower, _ = pair
    code, _, err = run(["disable", "1", "--addr", addr(follower)])
    assert code == 1
    assert "HTTP 409 not_owner" in err and "voter-2" in err
    assert "ssh -N -L" in err or "SSH forward" in err


def test_a_409_naming_a_given_listener_sends_the_walk_straight_to_it(pair) -> None:
    follower, owner = pair
    follower.runner.owner_management_addr = addr(owner)
    dead = f"127.0.0.1:{free_ports(1)[0]}"
    bases = endpoints([addr(follower), dead, addr(owner)])
    client = HttpClient()
    try:
        sent = send(client, bases, TOKENS["operator"], "POST", COMMANDS, DISABLE)
    finally:
        client.close()
    assert sent.status == 200 and sent.base == owner.base
    assert len(sent.skipped) == 1 and sent.skipped[0].startswith(follower.base)  # not the dead one


def test_the_owners_listener_is_asked_once_more_when_ownership_moved_during_the_walk(
    pair,
) -> None:
    follower, owner = pair
    follower.runner.owner_management_addr = addr(owner)
    owner.runner.not_owner_answers = 1  # not yet the owner when first asked
    code, _, err = run(["disable", "1", "--addr", addr(owner), "--addr", addr(follower)])
    assert code == 0, err
    assert [c["action"] for c in owner.runner.executed] == ["disable", "disable"]


def test_the_owners_listener_is_asked_again_only_once(pair) -> None:
    follower, owner = pair
    follower.runner.owner_management_addr = addr(owner)
    owner.runner.not_owner_answers = 5
    owner.runner.leader_hint = "voter-2"  # it names the same owner, without its listener
    code, _, err = run(["disable", "1", "--addr", addr(owner), "--addr", addr(follower)])
    assert code == 1 and "HTTP 409 not_owner" in err
    assert len(owner.runner.executed) == 2
    assert f"whose listener {addr(owner)} was given" in err


def test_a_follower_names_the_owners_listener_to_add_when_it_was_not_given(pair) -> None:
    follower, owner = pair
    follower.runner.owner_management_addr = addr(owner)
    follower.runner.leader_hint = "voter-2"
    code, _, err = run(["disable", "1", "--addr", addr(follower)])
    assert code == 1
    assert f"the acquired owner is voter-2, whose management listener is {addr(owner)}" in err
    assert f"add --addr {addr(owner)}" in err and "ssh" not in err
    assert owner.runner.executed == []


def test_a_voter_naming_its_own_address_as_the_owners_is_on_another_machine() -> None:
    here = "http://127.0.0.1:4601"
    reply = {"leader_hint": "v2", "owner_management_addr": "127.0.0.1:4601"}
    assert owner_base(reply, [here], answered_by=here) is None
    assert (
        owner_base(reply, [here, "http://127.0.0.1:4602"], answered_by="http://127.0.0.1:4602")
        == here
    )


def test_the_advice_says_how_to_reach_the_owner_wherever_it_is() -> None:
    given = ["http://127.0.0.1:4601"]
    remote = {
        "leader_hint": "v2",
        "leader_host": "10.0.0.2",
        "owner_management_addr": "127.0.0.1:4601",
    }
    advice = owner_advice(remote, given)
    assert "ssh -N -L 4602:127.0.0.1:4601 10.0.0.2" in advice and "--addr 127.0.0.1:4602" in advice
    tls = {**remote, "owner_management_addr": "https://127.0.0.1:4701"}
    assert "--addr https://127.0.0.1:4701" in owner_advice(tls, given)
    local = {**remote, "leader_host": "127.0.0.1", "owner_management_addr": "127.0.0.1:4611"}
    assert owner_advice(local, given).endswith(
        f"none of the addresses given is it: add --addr 127.0.0.1:4611 (or put it in {ADDR_ENV})"
    )
    unknown_host = {"leader_hint": "v2", "owner_management_addr": "127.0.0.1:4611"}
    assert "add --addr 127.0.0.1:4611 when that is this machine" in owner_advice(unknown_host)
    assert "SSH forward" in owner_advice({"leader_hint": "v2"})  # an owner not heard from yet


def test_a_definite_refusal_is_not_sent_elsewhere(pair) -> None:
    follower, owner = pair
    bad = json.dumps({**DEFINITION, "cron": "@daily"})
    code, _, err = run(["create", "-", "--addr", addr(owner), "--addr", addr(follower)], bad)
    assert code == 1 and "HTTP 400" in err
    assert follower.runner.executed == []


def test_an_uncertain_outcome_is_reported_and_never_re_sent(pair) -> None:
    follower, owner = pair
    owner.runner.fail_next = RuntimeError("disk gone")
    code, _, err = run(["disable", "1", "--addr", addr(owner), "--addr", addr(follower)])
    assert code == 1 and "outcome uncertain" in err
    assert follower.runner.executed == []  # the next endpoint never saw it


class _Swallower:
    """Accepts one connection, reads the request, closes without answering: ambiguous."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.received = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            self.received.set()

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


def test_an_ambiguous_send_is_uncertain_and_the_next_endpoint_never_sees_it(pair) -> None:
    _, owner = pair
    swallower = _Swallower()
    try:
        argv = ["create", "-", "--addr", f"127.0.0.1:{swallower.port}", "--addr", addr(owner)]
        code, _, err = run(argv, stdin=json.dumps(DEFINITION))
    finally:
        swallower.close()
    assert swallower.received.is_set()
    assert code == 1 and "uncertain" in err and "NOT re-sent" in err
    assert owner.runner.executed == []


def test_an_https_endpoint_keeps_its_scheme_and_must_still_be_loopback() -> None:
    assert endpoints(["https://127.0.0.1:4601", "127.0.0.1:4602"]) == [
        "https://127.0.0.1:4601",
        "http://127.0.0.1:4602",
    ]
    with pytest.raises(UsageError, match="loopback"):
        endpoints(["https://10.0.0.1:4601"])
