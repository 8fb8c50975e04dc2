"""Who may speak on a TLS cluster port (issue 36, finding 5): a Raft message's ``sender`` must be
the node id its client certificate names, and a member (voter or learner) of the configuration in
force — or, as Raft requires of a node that may lag behind a membership change (thesis §4.1), a
leader's message or a vote request at its current term or later. Status reads need a member's
certificate too.

One real voter (``RaftMember`` over its SQLite store, its cluster listener a ``DirectServer``
with TLS) of the genesis voters n1, n2, n3; clients hold certificates of the same cluster CA for
n2, n3 and n4 (issued, but never added: a non-member).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.cluster_init import pki
from appliance.config.contract import contract_digest, sealed_contract
from appliance.config.credentials import resolve_runner_credentials
from appliance.config.runner import parse_runner_config
from appliance.config.tls import TlsConfig
from appliance.http import HttpClient
from appliance.http.tls import client_context, voter_name
from appliance.raft.codec import encode
from appliance.raft.messages import (
    Heartbeat,
    HeartbeatResponse,
    Message,
    TimeoutNow,
    VoteRequest,
)
from appliance.replication.raft_member import RaftMember
from appliance.store.runner_store import RunnerStore
from tests.ports import free_ports
from tests.replication.test_raft_member import ENV, runner_doc

IDS = ("n1", "n2", "n3")


@pytest.fixture
def voter(tmp_path: Path) -> Iterator[tuple[int, str, dict[str, TlsConfig]]]:
    authority = pki.new_authority("test cluster CA")
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    ca = tls_dir / "ca.pem"
    pki.write_public(ca, authority.cert_pem())
    certs: dict[str, TlsConfig] = {}
    for node_id in (*IDS, "n4"):
        issued = pki.issue(
            authority, node_id, dns_names=["localhost", voter_name(node_id)], ip_addresses=[]
        )
        cert, key = tls_dir / f"{node_id}.pem", tls_dir / f"{node_id}.key"
        pki.write_public(cert, issued.cert_pem())
        pki.write_private(key, issued.key_pem())
        certs[node_id] = TlsConfig(str(ca), str(cert), str(key))
    ports = dict(zip(IDS, free_ports(3), strict=True))
    doc = runner_doc("n1", ports, tmp_path)
    doc["tls"] = {"ca_file": str(ca), "cert_file": certs["n1"].cert_file}
    doc["tls"]["key_file"] = certs["n1"].key_file
    cfg = parse_runner_config(doc)
    digest = contract_digest(cfg)
    store = RunnerStore.create_or_open(
        cfg.data_dir, contract=sealed_contract(cfg), contract_digest=digest
    )
    member = RaftMember(
        cfg, resolve_runner_credentials(cfg, ENV), store, lambda i, c: None, contract_digest=digest
    )
    member.start()
    try:
        yield ports["n1"], digest, certs
    finally:
        member.stop()
        store.close()


def _post(port: int, tls: TlsConfig, path: str, message: Message, digest: str) -> Any:
    context = client_context(tls, check_hostname=False)
    with HttpClient(ssl_context=context, read_timeout_ms=5_000) as http:
        return http.post(
            f"https://127.0.0.1:{port}{path}",
            encode(message, digest),
            headers={"Content-Type": "application/octet-stream"},
            bearer=ENV["CLUSTER_TOKEN"],
            fresh_connection=True,
        )


def _status(port: int, tls: TlsConfig) -> Any:
    context = client_context(tls, check_hostname=False)
    with HttpClient(ssl_context=context, read_timeout_ms=5_000) as http:
        return http.get(
            f"https://127.0.0.1:{port}/raft/v1/status",
            bearer=ENV["CLUSTER_TOKEN"],
            fresh_connection=True,
        )


def _code(response: Any) -> str:
    return str(response.json()["error"]["code"])


def test_a_message_whose_sender_is_not_its_certificates_node_is_refused(voter) -> None:
    port, digest, certs = voter
    # n3's certificate, speaking as n2: refused whatever the kind.
    for message in (HeartbeatResponse("n2", "n1", 1, 0), Heartbeat("n2", "n1", 9, 0, 0)):
        answer = _post(port, certs["n3"], "/raft/v1/append", message, digest)
        assert answer.status == 403 and _code(answer) == "sender_mismatch", answer.body
        assert "n3" in answer.json()["error"]["message"]
    answer = _post(
        port, certs["n3"], "/raft/v1/vote", VoteRequest("n2", "n1", 9, 0, 0, True), digest
    )
    assert answer.status == 403 and _code(answer) == "sender_mismatch"
    # Its own name: delivered.
    own = _post(port, certs["n2"], "/raft/v1/append", HeartbeatResponse("n2", "n1", 0, 0), digest)
    assert own.status in (200, 202), own.body


def test_a_non_member_may_only_do_what_raft_requires_of_a_newer_configuration(voter) -> None:
    port, digest, certs = voter
    n4 = certs["n4"]
    # An answer, a leadership transfer, a status read: a non-member has no business with them.
    for path, message in (
        ("/raft/v1/append", HeartbeatResponse("n4", "n1", 0, 0)),
        ("/raft/v1/vote", TimeoutNow("n4", "n1", 5)),
    ):
        answer = _post(port, n4, path, message, digest)
        assert answer.status == 403 and _code(answer) == "not_a_member", answer.body
        assert "n4" in answer.json()["error"]["message"]
    status = _status(port, n4)
    assert status.status == 403 and _code(status) == "not_a_member"
    assert _status(port, certs["n2"]).status == 200
    # n2 (a member) leads term 5: this node follows it.
    led = _post(port, certs["n2"], "/raft/v1/append", Heartbeat("n2", "n1", 5, 0, 0), digest)
    assert led.status in (200, 202)
    assert _status(port, certs["n2"]).json()["term"] == 5
    # A leader's message or a vote request at the current term or later is taken: a node that
    # lags behind the configuration change adding n4 must still hear a leader n4 (thesis §4.1).
    for path, message in (
        ("/raft/v1/append", Heartbeat("n4", "n1", 6, 0, 0)),
        ("/raft/v1/vote", VoteRequest("n4", "n1", 7, 0, 0, True)),
    ):
        assert _post(port, n4, path, message, digest).status in (200, 202)
    # The same kinds at an older term come from no one Raft needs to hear: refused.
    term = _status(port, certs["n2"]).json()["term"]
    for path, message in (
        ("/raft/v1/append", Heartbeat("n4", "n1", term - 1, 0, 0)),
        ("/raft/v1/vote", VoteRequest("n4", "n1", term - 1, 0, 0, False)),
    ):
        answer = _post(port, n4, path, message, digest)
        assert answer.status == 403 and _code(answer) == "not_a_member", (message, answer.body)
