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
    REMEMBERED_FILE,
    VoterCapabilities,
)
from appliance.secret import Secret
from tests.ports import free_ports
from tests.support import wait_for

TOKEN = "cluster-secret-1111111"
NEW_KIND = sorted(local_capabilities().commands - BASELINE_COMMAND_KINDS)[0]  # a gated kind


class StatusPeer:
    """A peer's cluster status route on loopback, answering ``report`` to the cluster bearer."""

    def __init__(self, report: Capabilities, port: int = 0) -> None:
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

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
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


# ---- issue 36: reports at start, and learners that never reported ------------------------------


def test_a_member_not_heard_yet_is_asked_again_soon_not_at_the_next_poll(tmp_path: Path) -> None:
    """Right after a fresh start the peers are not listening yet: the first poll fails, and the
    gate must not wait a whole interval (5 s) to hear them once they are up."""
    port = free_ports(1)[0]
    view = gate({"n2": f"127.0.0.1:{port}"}, tmp_path / REMEMBERED_FILE, poll_s=60.0)
    view.start()
    peer = None
    try:
        wait_for(lambda: view.polls >= 1 or None, "the first poll", 5)
        assert view.refusal(NEW_KIND) is not None  # nobody listens yet
        peer = StatusPeer(local_capabilities(), port)
        wait_for(lambda: view.refusal(NEW_KIND) is None or None, "n2 heard within a second", 2)
    finally:
        view.stop()
        if peer is not None:
            peer.stop()


def test_refresh_asks_the_voters_without_a_report_on_the_callers_thread(
    tmp_path: Path, peer: StatusPeer
) -> None:
    learner = StatusPeer(Capabilities("0.0.1", frozenset({"Observe"})))
    try:
        members = {"n2": peer.address, "n4": learner.address}
        view = gate(
            members,
            tmp_path / REMEMBERED_FILE,
            members=lambda: members,
            learners=lambda: ("n4",),
        )
        refusal = view.refusal(NEW_KIND)
        assert refusal is not None and "n2 (no report yet)" in refusal and "n4" not in refusal
        view.refresh()  # no poll thread: the caller asks
        assert peer.asked == 1 and learner.asked == 0  # a learner is not the gate's business
        assert view.refusal(NEW_KIND) is None  # n4 never reported: left out
        view.refresh()
        assert peer.asked == 1  # every voter has reported: nothing to ask
        # Asked directly (promote_voter), the learner's old binary then holds the gate.
        report = view.report_of("n4", ask=True)
        assert report is not None and report.binary == "0.0.1" and learner.asked == 1
        refusal = view.refusal(NEW_KIND)
        assert refusal is not None and "n4 (learner, binary 0.0.1)" in refusal
        view.stop()
    finally:
        learner.stop()
