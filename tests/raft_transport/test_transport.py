"""The Raft cluster routes and the per-peer pipeline, over real waitress servers on loopback.

(tests/raft/test_transport.py, by the Raft helper, covers the same routes through Falcon's test
client and a three-voter cluster; these tests pin the HTTP-level guarantees and the pipeline.)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pytest

from appliance.config.credentials import Secret
from appliance.http import HttpClient, HttpServer
from appliance.raft.codec import (
    BATCH_ENTRIES_MAX,
    BATCH_PAYLOAD_BYTES_MAX,
    BODY_BYTES_MAX,
    encode,
)
from appliance.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    Message,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from appliance.raft.peer_pipeline import coalesce_key_for
from appliance.raft.transport import (
    APPEND_PATH,
    STATUS_PATH,
    VOTE_PATH,
    HttpTransport,
    RateLimitedLog,
    create_raft_app,
    path_for,
)
from tests import support

CLUSTER = "cluster-token-abcd"
ADMISSION = "admission-token-efgh"
DIGEST = "d" * 64
OTHER_DIGEST = "e" * 64
STATUS = {
    "node_id": "b",
    "role": "follower",
    "term": 3,
    "leader_id": "a",
    "commit_index": 7,
    "applied_index": 7,
    "last_log_index": 8,
}
WAIT_S = 10.0


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


class Follower:
    """Node "b"'s inbox: records deliveries; can hold a delivery (keeping the request in flight)
    and can fail one (the route then answers 500)."""

    def __init__(self) -> None:
        self.delivered: list[Message] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.fail_next = False
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def __call__(self, message: Message) -> None:
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.arrived.set()
        self.release.wait(WAIT_S)
        with self.changed:
            self.in_flight -= 1
            self.delivered.append(message)
            self.changed.notify_all()
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError("inbox refused")  # → HTTP 500

    def wait_for(self, count: int) -> list[Message]:
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.delivered) >= count, WAIT_S):
                raise AssertionError(f"only {len(self.delivered)} of {count} delivered")
            return list(self.delivered)


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    support.wait_for(predicate, what, WAIT_S)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def follower() -> Follower:
    return Follower()


@pytest.fixture
def server(follower: Follower, clock: FakeClock) -> Iterator[HttpServer]:
    app = create_raft_app(
        node_id="b",
        digest=DIGEST,
        deliver=follower,
        status=lambda: STATUS,
        credentials={"cluster": Secret(CLUSTER), "admission": Secret(ADMISSION)},
        mismatches=RateLimitedLog(logging.ERROR, 60.0, clock),
    )
    srv = HttpServer(
        app, host="127.0.0.1", port=0, name="raft-b", body_bytes_max=BODY_BYTES_MAX, threads=4
    )
    with srv:
        yield srv


@pytest.fixture
def http() -> Iterator[HttpClient]:
    client = HttpClient(read_timeout_ms=10_000)
    yield client
    client.close()


def url(server: HttpServer, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


def transport_to(server: HttpServer, **kwargs) -> HttpTransport:  # type: ignore[no-untyped-def]
    kwargs.setdefault("digest", DIGEST)
    kwargs.setdefault("cluster_token", Secret(CLUSTER))
    return HttpTransport(node_id="a", peers={"b": f"127.0.0.1:{server.port}"}, **kwargs)


def ack(index: int) -> AppendResponse:
    return AppendResponse("a", "b", 4, True, index)


VOTE = VoteRequest("a", "b", 4, 8, 3, False)
ROUTES = [("POST", APPEND_PATH), ("POST", VOTE_PATH), ("GET", STATUS_PATH)]

# -- server side ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize("bearer", [None, "wrong-token", ADMISSION])
def test_every_route_status_included_refuses_anything_but_the_cluster_bearer(
    server, http, follower, method, path, bearer
):
    body = encode(VOTE, DIGEST) if method == "POST" else None
    response = http.request(method, url(server, path), body=body, bearer=bearer)
    assert response.status == 401
    assert response.header("www-authenticate") == "Bearer"
    assert response.json()["error"]["code"] == "unauthorized"
    assert follower.delivered == []


def test_status_answers_the_status_callback_to_the_cluster_bearer(server, http):
    response = http.get(url(server, STATUS_PATH), bearer=CLUSTER)
    assert response.status == 200
    assert response.json() == STATUS


def test_a_message_is_delivered_and_acknowledged_202_on_a_kept_alive_connection(
    server, http, follower
):
    for _ in range(3):
        response = http.post(url(server, VOTE_PATH), encode(VOTE, DIGEST), bearer=CLUSTER)
        assert (response.status, response.body) == (202, b"")
    assert follower.delivered == [VOTE, VOTE, VOTE]
    assert http.connections_opened == 1


def test_a_leader_handing_over_reaches_the_recipient_on_the_vote_route(server, http, follower):
    # Found by the real-process membership test: TimeoutNow went to the append route (400).
    handover = TimeoutNow("a", "b", 4)
    response = http.post(url(server, path_for(handover)), encode(handover, DIGEST), bearer=CLUSTER)
    assert (response.status, response.body) == (202, b"")
    assert follower.delivered == [handover]


def test_a_huge_body_without_the_bearer_never_reaches_the_inbox(server, http, follower):
    response = http.post(url(server, APPEND_PATH), b"\0" * (15 * 1024 * 1024))
    assert response.status == 401
    assert follower.delivered == []


def test_the_16_mib_cap_passes_at_the_cap_and_refuses_one_byte_more(server, http, follower):
    # Exactly at the cap the body is read and decoded (and refused as garbage: 400), one byte
    # more is refused before the route reads it (413).
    at_cap = http.post(url(server, APPEND_PATH), b"\0" * BODY_BYTES_MAX, bearer=CLUSTER)
    over = http.post(url(server, APPEND_PATH), b"\0" * (BODY_BYTES_MAX + 1), bearer=CLUSTER)
    assert (at_cap.status, at_cap.json()["error"]["code"]) == (400, "malformed_message")
    assert (over.status, over.json()["error"]["code"]) == (413, "body_too_large")
    assert follower.delivered == []


def test_a_full_batch_of_32_entries_and_12_mib_fits_and_is_delivered(server, http, follower):
    per_entry = BATCH_PAYLOAD_BYTES_MAX // BATCH_ENTRIES_MAX - 1  # + the kind byte
    entries = tuple(
        Entry(index, 4, EntryKind.NORMAL, b"x" * per_entry)
        for index in range(9, 9 + BATCH_ENTRIES_MAX)
    )
    batch = AppendRequest("a", "b", 4, 8, 3, entries, 7)
    body = encode(batch, DIGEST)
    assert BATCH_PAYLOAD_BYTES_MAX < len(body) <= BODY_BYTES_MAX
    assert http.post(url(server, APPEND_PATH), body, bearer=CLUSTER).status == 202
    assert follower.delivered == [batch]


def test_another_contract_is_refused_and_logged_loudly_once_per_peer_per_minute(
    server, http, follower, clock, caplog
):
    caplog.set_level(logging.ERROR, logger="appliance.raft.transport")
    foreign = encode(VoteRequest("x", "b", 4, 8, 3, False), OTHER_DIGEST)

    def refusals() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "REFUSED raft message" in r.getMessage()]

    statuses = [http.post(url(server, VOTE_PATH), foreign, bearer=CLUSTER).status for _ in "abc"]
    assert statuses == [403, 403, 403]
    assert follower.delivered == []
    assert len(refusals()) == 1
    assert refusals()[0].levelno == logging.ERROR
    assert "'x'" in refusals()[0].getMessage()
    clock.now_s += 59.9
    http.post(url(server, VOTE_PATH), foreign, bearer=CLUSTER)
    assert len(refusals()) == 1
    clock.now_s += 0.1
    http.post(url(server, VOTE_PATH), foreign, bearer=CLUSTER)
    assert len(refusals()) == 2
    assert "(3 more suppressed since the last report)" in refusals()[1].getMessage()


def test_messages_travel_on_their_routes_and_only_heartbeats_coalesce():
    assert path_for(VOTE) == VOTE_PATH
    assert path_for(VoteResponse("b", "a", 4, True, True)) == VOTE_PATH
    assert path_for(TimeoutNow("a", "b", 4)) == VOTE_PATH  # a leader handing over
    for message in (AppendRequest("a", "b", 4, 8, 3, (), 7), ack(1), Heartbeat("a", "b", 4, 7, 1)):
        assert path_for(message) == APPEND_PATH
    assert coalesce_key_for(Heartbeat("a", "b", 4, 7, 1)) == "heartbeat"
    assert coalesce_key_for(HeartbeatResponse("b", "a", 4, 1)) == "heartbeat_response"
    assert coalesce_key_for(AppendRequest("a", "b", 4, 8, 3, (), 7)) is None
    assert coalesce_key_for(VOTE) is None


# -- client side: the per-peer pipeline ----------------------------------------------------------


def hold_first_delivery(follower: Follower, transport: HttpTransport, first: Message) -> None:
    follower.release.clear()
    transport.send(first)
    assert follower.arrived.wait(WAIT_S)


def test_a_peer_has_one_request_in_flight_and_order_is_preserved(server, follower):
    transport = transport_to(server)
    transport.start()
    try:
        hold_first_delivery(follower, transport, ack(1))
        for index in range(2, 6):
            transport.send(ack(index))
        assert transport.pending("b") == 4  # queued behind the one in flight
        follower.release.set()
        assert follower.wait_for(5) == [ack(i) for i in range(1, 6)]
        assert follower.max_in_flight == 1
        wait_until(lambda: transport.stats("b").sent == 5, "five sends counted")
    finally:
        transport.stop()


def test_a_full_queue_drops_its_oldest_message(server, follower):
    transport = transport_to(server, peer_queue_max=2)
    transport.start()
    try:
        hold_first_delivery(follower, transport, ack(1))
        for index in (2, 3, 4):
            transport.send(ack(index))
        assert transport.dropped == {"b": 1}
        follower.release.set()
        assert follower.wait_for(3) == [ack(1), ack(3), ack(4)]
    finally:
        transport.stop()


def test_a_newer_heartbeat_replaces_the_queued_one(server, follower):
    transport = transport_to(server)
    transport.start()
    try:
        hold_first_delivery(follower, transport, ack(1))
        transport.send(Heartbeat("a", "b", 4, 1, 1))
        transport.send(ack(2))
        transport.send(Heartbeat("a", "b", 4, 2, 2))
        follower.release.set()
        assert follower.wait_for(3) == [ack(1), Heartbeat("a", "b", 4, 2, 2), ack(2)]
        assert transport.stats("b").coalesced == 1
    finally:
        transport.stop()


def test_a_failed_send_is_not_retried_and_drops_the_stale_queue(server, follower):
    transport = transport_to(server, backoff_s=0.01)
    transport.start()
    try:
        follower.fail_next = True
        hold_first_delivery(follower, transport, ack(1))
        transport.send(ack(2))
        transport.send(ack(3))
        follower.release.set()
        wait_until(lambda: transport.stats("b").failed == 1, "the failure to be counted")
        assert transport.dropped == {"b": 2}
        transport.send(ack(4))  # the pipeline keeps working after its backoff
        assert follower.wait_for(2) == [ack(1), ack(4)]  # ack(1) arrived exactly once
    finally:
        transport.stop()


def test_an_unreachable_peer_costs_a_counted_failure_not_a_retry():
    transport = HttpTransport(
        node_id="a",
        peers={"b": "127.0.0.1:9"},  # discard port: nothing listens
        digest=DIGEST,
        cluster_token=Secret(CLUSTER),
    )
    transport.start()
    try:
        transport.send(ack(1))
        wait_until(lambda: transport.stats("b").failed == 1, "the failure")
        assert transport.stats("b").sent == 0
    finally:
        transport.stop()


def test_a_peer_refusing_our_contract_is_logged_loudly_once_per_minute(server, follower, caplog):
    caplog.set_level(logging.WARNING, logger="appliance.raft.transport")
    transport = transport_to(server, digest=OTHER_DIGEST, backoff_s=0.0)
    transport.start()
    try:
        for index in range(1, 4):
            transport.send(ack(index))
            wait_until(lambda i=index: transport.stats("b").failed == i, "a refusal")
        loud = [r for r in caplog.records if "REFUSED our contract digest" in r.getMessage()]
        assert len(loud) == 1
        assert loud[0].levelno == logging.ERROR
        assert follower.delivered == []
    finally:
        transport.stop()


def test_a_peer_refusing_our_credential_is_logged_without_the_token(server, follower, caplog):
    caplog.set_level(logging.WARNING, logger="appliance.raft.transport")
    transport = transport_to(server, cluster_token=Secret("not-the-cluster-token"))
    transport.start()
    try:
        transport.send(ack(1))
        wait_until(lambda: transport.stats("b").failed == 1, "the refusal")
        text = "\n".join(r.getMessage() for r in caplog.records)
        assert "refused our cluster credential (401)" in text
        assert "not-the-cluster-token" not in text
        assert follower.delivered == []
    finally:
        transport.stop()


def test_stop_joins_the_sender_threads():
    transport = HttpTransport(
        node_id="a", peers={"b": "127.0.0.1:9"}, digest=DIGEST, cluster_token=Secret(CLUSTER)
    )
    transport.start()
    transport.stop()
    assert not [t for t in threading.enumerate() if t.name == "raft-send-b"]
