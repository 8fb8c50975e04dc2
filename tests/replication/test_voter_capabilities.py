"""The version gate's view of its peers: it follows the configuration in force and remembers the
last reports across a restart, so an owner restarted while a peer is down still proposes what
every member was heard to apply."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from appliance.capabilities import BASELINE_COMMAND_KINDS, Capabilities, local_capabilities
from appliance.replication.raft_member import configured_members
from appliance.replication.voter_capabilities import (
    MANAGEMENT_ADDR_CHARS_MAX,
    REMEMBERED_FILE,
    VoterCapabilities,
    management_addr_of,
)
from appliance.secret import Secret
from tests.support import wait_for

TOKEN = "cluster-secret-1111111"
NEW_KIND = sorted(local_capabilities().commands - BASELINE_COMMAND_KINDS)[0]  # a gated kind


class StatusPeer:
    """A peer's cluster status route on loopback, answering ``report`` to the cluster bearer."""

    def __init__(self, report: Capabilities) -> None:
        self.report = report
        self.extra: dict[str, Any] = {}  # more fields of the status answer
        self.asked = 0
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                peer.asked += 1
                body = json.dumps({"capabilities": peer.report.to_json(), **peer.extra}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def peer() -> Iterator[StatusPeer]:
    server = StatusPeer(local_capabilities())
    yield server
    server.stop()


def gate(peers: dict[str, str], path: Path, **kwargs: Any) -> VoterCapabilities:
    return VoterCapabilities(
        node_id="n1", peers=peers, cluster_token=Secret(TOKEN), remembered=path, **kwargs
    )


def test_reports_are_remembered_across_a_restart_while_the_peer_is_down(
    tmp_path: Path, peer: StatusPeer
) -> None:
    path = tmp_path / REMEMBERED_FILE
    first = gate({"n2": peer.address}, path)
    assert first.refusal(NEW_KIND) is not None  # n2 not heard yet: a baseline binary
    first.poll_once()
    assert first.refusal(NEW_KIND) is None
    first.stop()
    assert path.stat().st_mode & 0o777 == 0o600
    peer.stop()  # the peer is down when the owner comes back
    again = gate({"n2": peer.address}, path)
    again.poll_once()  # unreachable: the remembered report stands
    assert again.reports()["n2"] == local_capabilities()
    assert again.refusal(NEW_KIND) is None
    again.stop()


def test_a_changed_binary_replaces_the_remembered_report(tmp_path: Path, peer: StatusPeer) -> None:
    path = tmp_path / REMEMBERED_FILE
    first = gate({"n2": peer.address}, path)
    first.poll_once()
    first.stop()
    peer.report = Capabilities("0.0.1", frozenset({"Observe"}))  # rolled back to an old binary
    again = gate({"n2": peer.address}, path)
    again.poll_once()
    refusal = again.refusal(NEW_KIND)
    assert refusal is not None and "n2 (binary 0.0.1)" in refusal
    again.stop()
    assert json.loads(path.read_text())["voters"]["n2"]["binary"] == "0.0.1"


@pytest.mark.parametrize("content", ["not json", '{"voters": 3}', '{"voters": {"n2": {}}}'])
def test_a_damaged_file_counts_as_no_report(tmp_path: Path, content: str) -> None:
    path = tmp_path / REMEMBERED_FILE
    path.write_text(content)
    refusal = gate({"n2": "127.0.0.1:1"}, path).refusal(NEW_KIND)
    assert refusal is not None and "n2 (no report yet)" in refusal


def test_the_gate_follows_the_configuration_in_force(tmp_path: Path, peer: StatusPeer) -> None:
    configuration: dict[str, Any] = {"voters": ["n1", "n2"], "learners": [], "addresses": {}}
    genesis = {"n2": peer.address}
    view = gate(
        genesis,
        tmp_path / REMEMBERED_FILE,
        members=lambda: configured_members({"configuration": configuration}, genesis),
    )
    view.poll_once()
    assert view.refusal(NEW_KIND) is None
    # A learner added at run time (no address in the genesis mapping) is waited for ...
    configuration["learners"] = ["n4"]
    configuration["addresses"] = {"n4": "127.0.0.1:1"}
    refusal = view.refusal(NEW_KIND)
    assert refusal is not None and "n4 (no report yet)" in refusal
    # ... and a removed genesis voter no longer is (it will never answer again).
    configuration.update(voters=["n1", "n4"], learners=[], addresses={"n4": peer.address})
    view.poll_once()
    assert view.voters == ("n1", "n4")
    assert view.refusal(NEW_KIND) is None
    view.stop()


def test_a_member_without_any_known_address_is_still_waited_for() -> None:
    status = {"configuration": {"voters": ["n1", "n2", "n5"], "learners": [], "addresses": {}}}
    assert configured_members(status, {"n2": "h:1"}) == {"n1": "", "n2": "h:1", "n5": ""}


def test_a_peers_management_listener_is_learnt_from_its_status(
    tmp_path: Path, peer: StatusPeer
) -> None:
    own = gate({"n2": peer.address}, tmp_path / REMEMBERED_FILE, management_addr="127.0.0.1:4601")
    assert own.management_addr("n1") == "127.0.0.1:4601"
    assert own.management_addr("n2") is None  # not heard yet
    peer.extra = {"management_addr": "https://127.0.0.1:4611"}
    own.poll_once()
    assert own.management_addr("n2") == "https://127.0.0.1:4611"
    peer.extra = {}  # restarted without a management listener
    own.poll_once()
    assert own.management_addr("n2") is None
    own.stop()


LONGEST_ADDR = "https://[0000:0000:0000:0000:0000:0000:0000:0001]:65535"


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("127.0.0.1:4611", True),
        ("[::1]:4611", True),
        ("https://127.0.0.1:4611", True),
        ("127.0.0.1", False),
        ("ftp://127.0.0.1:1", False),
        ("10.0.0.2:4611", False),  # a management listener is loopback-only
        (4611, False),
        (LONGEST_ADDR, True),  # exactly at the limit
        (LONGEST_ADDR.replace(":0001]", ":00001]"), False),  # one character over
    ],
)
def test_only_a_well_formed_management_addr_is_kept(value: Any, kept: bool) -> None:
    assert len(LONGEST_ADDR) == MANAGEMENT_ADDR_CHARS_MAX
    assert management_addr_of({"management_addr": value}) == (value if kept else None)


def test_a_member_not_heard_since_the_start_is_asked_again_soon(
    tmp_path: Path, peer: StatusPeer
) -> None:
    """A fresh cluster's voters start one after another: the gate polls a silent member again
    within a fraction of a second, not after the whole interval."""
    late = StatusPeer(local_capabilities())
    late_address = late.address
    late.stop()  # down at the first poll
    watcher = gate(
        {"n2": peer.address, "n3": late_address}, tmp_path / REMEMBERED_FILE, poll_s=600.0
    )
    watcher.start()
    try:
        wait_for(lambda: peer.asked >= 3, "three polls while n3 is silent", 10.0)
    finally:
        watcher.stop()
