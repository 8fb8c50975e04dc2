"""The Raft HTTP surface and transport: the cluster bearer on every route (before the body is
read), the 16 MiB cap, contract-digest refusal, and three voters replicating over real loopback
HTTP (waitress + the pooled client), surviving the loss of their leader."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from falcon import testing

from appliance.config.credentials import Secret
from appliance.http import HttpServer
from appliance.raft import AppendResponse, HeartbeatResponse, MemoryLogStorage, VoteRequest
from appliance.raft.codec import BODY_BYTES_MAX, encode
from appliance.raft.transport import HttpTransport, create_raft_app
from appliance.replication import RaftReplication
from tests import support

DIGEST = "c" * 64
CLUSTER = "cluster-token-0123456789"
WORKER = "worker-token-9876543210"
WAIT_S = 15.0


class Inbox:
    def __init__(self) -> None:
        self.messages: list[object] = []

    def __call__(self, message: object) -> None:
        self.messages.append(message)


@pytest.fixture
def inbox() -> Inbox:
    return Inbox()


@pytest.fixture
def client(inbox: Inbox) -> testing.TestClient:
    app = create_raft_app(
        node_id="n1",
        digest=DIGEST,
        deliver=inbox,
        status=lambda: {"node_id": "n1", "role": "follower", "term": 3},
        credentials={"cluster": Secret(CLUSTER), "worker": Secret(WORKER)},
    )
    return testing.TestClient(app)


def bearer(token: str = CLUSTER) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


BODY = encode(HeartbeatResponse("n2", "n1", 3, 0), DIGEST)


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/raft/v1/append"), ("POST", "/raft/v1/vote"), ("GET", "/raft/v1/status")],
)
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, bearer(WORKER)])
def test_every_route_requires_the_cluster_bearer(client, inbox, method, path, headers) -> None:  # type: ignore[no-untyped-def]
    result = client.simulate_request(method, path, headers=headers, body=BODY)
    assert result.status_code == 401
    assert inbox.messages == []


def test_a_message_with_the_bearer_is_delivered(client, inbox) -> None:  # type: ignore[no-untyped-def]
    result = client.simulate_post("/raft/v1/append", headers=bearer(), body=BODY)
    assert result.status_code == 202
    assert inbox.messages == [HeartbeatResponse("n2", "n1", 3, 0)]


def test_status_reports_the_node(client) -> None:  # type: ignore[no-untyped-def]
    result = client.simulate_get("/raft/v1/status", headers=bearer())
    assert result.status_code == 200 and result.json["term"] == 3


def test_a_body_over_16_mib_is_refused_before_it_is_read(client, inbox) -> None:  # type: ignore[no-untyped-def]
    headers = {**bearer(), "Content-Length": str(BODY_BYTES_MAX + 1)}
    result = client.simulate_post("/raft/v1/append", headers=headers, body=b"")
    assert result.status_code == 413
    assert inbox.messages == []


def test_another_contract_is_refused_and_logged_loudly(client, inbox, caplog) -> None:  # type: ignore[no-untyped-def]
    body = encode(HeartbeatResponse("n2", "n1", 3, 0), "e" * 64)
    with caplog.at_level(logging.ERROR):
        result = client.simulate_post("/raft/v1/append", headers=bearer(), body=body)
    assert result.status_code == 403
    assert inbox.messages == []
    assert any("contract digest mismatch from 'n2'" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        ("/raft/v1/append", b"garbage", "malformed_message"),
        ("/raft/v1/vote", BODY, "wrong_route"),
        ("/raft/v1/append", encode(VoteRequest("n2", "n1", 1, 0, 0, True), DIGEST), "wrong_route"),
        ("/raft/v1/append", encode(AppendResponse("n2", "n9", 1, True, 1), DIGEST), "misrouted"),
    ],
)
def test_malformed_or_misrouted_messages_are_refused(client, inbox, path, body, code) -> None:  # type: ignore[no-untyped-def]
    result = client.simulate_post(path, headers=bearer(), body=body)
    assert result.status_code == 400
    assert code in result.text
    assert inbox.messages == []


# -- three voters over loopback HTTP ------------------------------------------------------------


class Voter:
    def __init__(self, node_id: str, ids: list[str]) -> None:
        self.id = node_id
        self.ids = ids
        self.storage = MemoryLogStorage()
        self.applied: list[bytes] = []
        self.member: RaftReplication | None = None
        self.transport: HttpTransport | None = None
        self.server = HttpServer(
            create_raft_app(
                node_id=node_id,
                digest=DIGEST,
                deliver=self._deliver,
                status=self._status,
                credentials={"cluster": Secret(CLUSTER)},
            ),
            host="127.0.0.1",
            port=0,
            name=f"raft-{node_id}",
            body_bytes_max=BODY_BYTES_MAX,
        )

    def _deliver(self, message) -> None:  # type: ignore[no-untyped-def]
        if self.member is not None:
            self.member.deliver(message)

    def _status(self) -> dict:  # type: ignore[type-arg]
        return self.member.status() if self.member else {}

    def start(self, addresses: dict[str, str]) -> None:
        self.applied = []
        self.transport = HttpTransport(
            node_id=self.id,
            peers={p: a for p, a in addresses.items() if p != self.id},
            digest=DIGEST,
            cluster_token=Secret(CLUSTER),
        )
        self.member = RaftReplication(
            node_id=self.id,
            voters=self.ids,
            storage=self.storage,
            transport=self.transport,
            apply=lambda index, command: self.applied.append(command),
            heartbeat_ms=50,
            election_timeout_min_ms=300,
            election_timeout_max_ms=600,
        )
        self.transport.start()
        self.member.start()

    def crash(self) -> None:
        if self.member is not None:
            self.member.stop()
        if self.transport is not None:
            self.transport.stop()
        self.member = None


@pytest.fixture
def voters() -> Iterator[tuple[dict[str, Voter], dict[str, str]]]:
    ids = ["n1", "n2", "n3"]
    cluster = {i: Voter(i, ids) for i in ids}
    for voter in cluster.values():
        voter.server.start()
    addresses = {i: f"127.0.0.1:{v.server.port}" for i, v in cluster.items()}
    for voter in cluster.values():
        voter.start(addresses)
    yield cluster, addresses
    for voter in cluster.values():
        voter.crash()
        voter.server.stop()


def wait_for(predicate, what: str):  # type: ignore[no-untyped-def]
    return support.wait_for(predicate, what, WAIT_S)


def leader_of(cluster: dict[str, Voter]) -> Voter:
    def one() -> Voter | None:
        leaders = [v for v in cluster.values() if v.member and v.member.is_leader()]
        return leaders[0] if len(leaders) == 1 else None

    return wait_for(one, "a single leader")


def test_three_voters_over_http_replicate_and_survive_losing_the_leader(voters) -> None:  # type: ignore[no-untyped-def]
    cluster, addresses = voters
    leader = leader_of(cluster)
    for n in range(10):
        leader.member.propose(b"before-%d" % n, timeout_s=WAIT_S)  # type: ignore[union-attr]
    leader.crash()  # like SIGKILL for this member: its driver and sender threads stop
    others = {i: v for i, v in cluster.items() if v is not leader}
    new = leader_of(others)
    new.member.propose(b"after", timeout_s=WAIT_S)  # type: ignore[union-attr]
    expected = [b"before-%d" % n for n in range(10)] + [b"after"]
    wait_for(lambda: all(v.applied == expected for v in others.values()), "survivors apply")
    leader.start(addresses)  # rejoins from its durable log and catches up
    wait_for(lambda: leader.applied == expected, "the old leader catches up")
    status = leader.member.status()  # type: ignore[union-attr]
    assert status["role"] == "follower" and status["leader_id"] == new.id
