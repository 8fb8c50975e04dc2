"""Answers riding back in response bodies, and queued appends merged per peer.

A vote, append or heartbeat delivered with a reply slot returns its answer (produced after the
fsync it depends on) as the body of a 200; a request that produces no answer gets an empty 202;
an answer produced too late goes out one-way. Appends queued behind an in-flight request merge
into one, within the batch caps.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from appliance.config.credentials import Secret
from appliance.http import HttpClient, HttpServer
from appliance.raft import MemoryLogStorage, RaftConfig, RaftNode
from appliance.raft.codec import (
    BATCH_ENTRIES_MAX,
    BATCH_PAYLOAD_BYTES_MAX,
    BODY_BYTES_MAX,
    decode,
    encode,
)
from appliance.raft.driver import RaftDriver
from appliance.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from appliance.raft.peer_pipeline import merge_appends
from appliance.raft.reply_slot import ReplySlot
from appliance.raft.transport import APPEND_PATH, HttpTransport, create_raft_app
from tests import support

CLUSTER = "cluster-token-abcd"
DIGEST = "d" * 64
WAIT_S = 10.0


def entry(index: int, term: int = 4, data: bytes = b"x") -> Entry:
    return Entry(index, term, EntryKind.NORMAL, data)


def append(prev_index: int, count: int, *, term: int = 4, commit: int = 0) -> AppendRequest:
    entries = tuple(entry(prev_index + 1 + i, term) for i in range(count))
    return AppendRequest("a", "b", term, prev_index, term, entries, commit)


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    support.wait_for(predicate, what, WAIT_S, poll_s=0.002)


# -- merging queued appends ----------------------------------------------------------------------


def test_an_append_that_continues_the_queued_one_merges_with_the_higher_commit() -> None:
    merged = merge_appends(append(10, 2, commit=9), append(12, 3, commit=11))
    assert merged == AppendRequest("a", "b", 4, 10, 4, tuple(entry(i) for i in range(11, 16)), 11)


def test_an_empty_append_after_a_batch_only_raises_its_commit() -> None:
    merged = merge_appends(append(10, 2, commit=9), append(12, 0, commit=12))
    assert merged is not None
    assert [e.index for e in merged.entries] == [11, 12]
    assert merged.commit == 12


@pytest.mark.parametrize(
    "later",
    [
        append(13, 1),  # a gap: not a continuation
        append(11, 1),  # overlaps the queued entries
        append(12, 1, term=5),  # a newer term
        AppendRequest("a", "b", 4, 12, 3, (entry(13),), 0),  # prev_term does not match
    ],
)
def test_appends_that_do_not_continue_the_queued_one_stay_apart(later: AppendRequest) -> None:
    assert merge_appends(append(10, 2), later) is None


def test_a_merge_may_reach_the_entry_cap_but_not_pass_it() -> None:
    assert merge_appends(append(0, BATCH_ENTRIES_MAX - 1), append(BATCH_ENTRIES_MAX - 1, 1))
    assert merge_appends(append(0, BATCH_ENTRIES_MAX), append(BATCH_ENTRIES_MAX, 1)) is None


def test_a_merge_may_reach_the_payload_cap_but_not_pass_it() -> None:
    half = BATCH_PAYLOAD_BYTES_MAX // 2 - 1  # an entry's payload is its kind byte + data
    first = AppendRequest("a", "b", 4, 0, 4, (entry(1, data=b"p" * half),), 0)
    exact = AppendRequest("a", "b", 4, 1, 4, (entry(2, data=b"q" * half),), 0)
    over = AppendRequest("a", "b", 4, 1, 4, (entry(2, data=b"q" * (half + 1)),), 0)
    merged = merge_appends(first, exact)
    assert merged is not None
    assert sum(e.payload_bytes for e in merged.entries) == BATCH_PAYLOAD_BYTES_MAX
    assert merge_appends(first, over) is None


# -- reply slots -----------------------------------------------------------------------------


def test_a_slot_carries_one_answer_and_refuses_one_after_it_closed() -> None:
    answer = AppendResponse("b", "a", 4, True, 12)
    slot = ReplySlot("a")
    assert slot.offer(answer)
    assert not slot.offer(AppendResponse("b", "a", 4, True, 13))
    assert slot.wait(0) == answer

    closed = ReplySlot("a")
    closed.close()
    assert closed.wait(WAIT_S) is None
    assert not closed.offer(answer)


def test_a_slot_whose_waiter_gave_up_refuses_a_late_answer() -> None:
    slot = ReplySlot("a")
    assert slot.wait(0.01) is None
    assert not slot.offer(AppendResponse("b", "a", 4, True, 12))


# -- server side: the answer in the response body ------------------------------------------------


class AnsweringInbox:
    """Node "b"'s driver stand-in: answers each question through its slot (or not)."""

    def __init__(self, answer: Callable[[Message], Message | None]) -> None:
        self._answer = answer
        self.one_way: list[Message] = []
        self.questions: list[Message] = []

    def deliver(self, message: Message) -> None:
        self.one_way.append(message)

    def deliver_with_reply(self, message: Message, slot: ReplySlot) -> None:
        self.questions.append(message)
        answer = self._answer(message)
        if answer is None:
            slot.close()
        elif answer is not message:  # "message itself" stands for "say nothing, let it wait"
            slot.offer(answer)


def serve(inbox: AnsweringInbox, *, reply_wait_s: float = 1.0) -> HttpServer:
    app = create_raft_app(
        node_id="b",
        digest=DIGEST,
        deliver=inbox.deliver,
        status=lambda: {},
        credentials={"cluster": Secret(CLUSTER)},
        deliver_with_reply=inbox.deliver_with_reply,
        reply_wait_s=reply_wait_s,
    )
    return HttpServer(app, host="127.0.0.1", port=0, name="raft-b", body_bytes_max=BODY_BYTES_MAX)


@pytest.fixture
def http() -> Iterator[HttpClient]:
    client = HttpClient(read_timeout_ms=10_000)
    yield client
    client.close()


def post(http: HttpClient, server: HttpServer, message: Message):  # type: ignore[no-untyped-def]
    return http.post(
        f"http://127.0.0.1:{server.port}{APPEND_PATH}",
        encode(message, DIGEST),
        bearer=CLUSTER,
    )


def test_an_append_is_answered_in_the_response_body(http: HttpClient) -> None:
    question = append(10, 1)
    inbox = AnsweringInbox(lambda m: AppendResponse("b", "a", 4, True, 11))
    with serve(inbox) as server:
        response = post(http, server, question)
    assert response.status == 200
    assert decode(response.body, DIGEST) == AppendResponse("b", "a", 4, True, 11)
    assert inbox.questions == [question]
    assert inbox.one_way == []


def test_a_question_without_an_answer_gets_an_empty_202_at_once(http: HttpClient) -> None:
    inbox = AnsweringInbox(lambda m: None)
    with serve(inbox, reply_wait_s=WAIT_S) as server:
        started = time.monotonic()
        response = post(http, server, Heartbeat("a", "b", 4, 0, 1))
        assert time.monotonic() - started < WAIT_S / 2  # released by close, not by the timeout
    assert (response.status, response.body) == (202, b"")


def test_a_question_whose_answer_is_late_gets_202_after_the_wait(http: HttpClient) -> None:
    inbox = AnsweringInbox(lambda m: m)  # never offers, never closes
    with serve(inbox, reply_wait_s=0.05) as server:
        response = post(http, server, append(10, 1))
    assert (response.status, response.body) == (202, b"")


def test_answers_are_delivered_one_way_with_202(http: HttpClient) -> None:
    inbox = AnsweringInbox(lambda m: AppendResponse("b", "a", 4, True, 1))
    answer = AppendResponse("a", "b", 4, True, 11)
    with serve(inbox) as server:
        response = post(http, server, answer)
    assert response.status == 202
    assert inbox.one_way == [answer]
    assert inbox.questions == []


# -- client side: the answer fed to the local driver ---------------------------------------------


def transport_to(server: HttpServer) -> tuple[HttpTransport, list[Message]]:
    received: list[Message] = []
    transport = HttpTransport(
        node_id="a",
        peers={"b": f"127.0.0.1:{server.port}"},
        digest=DIGEST,
        cluster_token=Secret(CLUSTER),
    )
    transport.receive_answers(received.append)
    return transport, received


def test_an_answer_in_the_body_reaches_the_senders_driver() -> None:
    inbox = AnsweringInbox(lambda m: VoteResponse("b", "a", 4, True, False))
    with serve(inbox) as server:
        transport, received = transport_to(server)
        transport.start()
        try:
            transport.send(VoteRequest("a", "b", 4, 8, 3, False))
            wait_until(lambda: received, "the vote answer")
            assert received == [VoteResponse("b", "a", 4, True, False)]
            assert transport.stats("b").answers == 1
        finally:
            transport.stop()


@pytest.mark.parametrize(
    "wrong",
    [
        HeartbeatResponse("c", "a", 4, 1),  # not from the peer we asked
        HeartbeatResponse("b", "c", 4, 1),  # not addressed to us
        Heartbeat("b", "a", 4, 0, 1),  # not an answer at all
    ],
)
def test_an_answer_that_is_not_from_the_peer_to_us_is_dropped_and_reported(
    wrong: Message, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = AnsweringInbox(lambda m: wrong)
    with serve(inbox) as server:
        transport, received = transport_to(server)
        transport.start()
        try:
            with caplog.at_level(logging.WARNING, logger="appliance.raft.transport"):
                transport.send(Heartbeat("a", "b", 4, 0, 1))
                wait_until(lambda: transport.stats("b").sent == 1, "the heartbeat sent")
        finally:
            transport.stop()
    assert received == []
    assert "dropped" in caplog.text


def test_appends_queued_behind_an_in_flight_one_leave_merged() -> None:
    release = threading.Event()
    arrived: list[AppendRequest] = []

    def answer(message: Message) -> Message:
        arrived.append(message)  # type: ignore[arg-type]
        release.wait(WAIT_S)
        return AppendResponse("b", "a", 4, True, message.entries[-1].index)  # type: ignore[union-attr]

    inbox = AnsweringInbox(answer)
    with serve(inbox) as server:
        transport, received = transport_to(server)
        transport.start()
        try:
            transport.send(append(0, 1))
            wait_until(lambda: arrived, "the first append in flight")
            for prev in (1, 2, 3):
                transport.send(append(prev, 1, commit=prev))
            assert transport.pending("b") == 1
            assert transport.stats("b").merged == 2
            release.set()
            wait_until(lambda: len(received) == 2, "both answers")
        finally:
            transport.stop()
    assert [[e.index for e in m.entries] for m in arrived] == [[1], [2, 3, 4]]
    assert arrived[1].commit == 3
    assert [m.index for m in received] == [1, 4]  # type: ignore[union-attr]


# -- the driver: answers offered to the slot, after the persist ----------------------------------


class Recorder:
    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send(self, message: Message) -> None:
        self.sent.append(message)


class CountingStorage(MemoryLogStorage):
    def __init__(self) -> None:
        super().__init__()
        self.persists = 0

    def persist(self, **kwargs) -> None:  # type: ignore[no-untyped-def, override]
        super().persist(**kwargs)
        self.persists += 1


def follower_driver() -> tuple[RaftDriver, Recorder, CountingStorage]:
    storage = CountingStorage()
    node = RaftNode(RaftConfig("b", ("a", "b", "c")), storage, random.Random(1))
    transport = Recorder()
    return RaftDriver(node, storage, transport, lambda i, c: i), transport, storage


def test_the_driver_answers_through_the_slot_only_after_the_persist() -> None:
    driver, transport, storage = follower_driver()
    driver.start()
    try:
        slot = ReplySlot("a")
        driver.deliver(AppendRequest("a", "b", 1, 0, 0, (entry(1, term=1),), 0), slot)
        answer = slot.wait(WAIT_S)
        assert answer == AppendResponse("b", "a", 1, True, 1)
        assert storage.persists >= 1  # the entry was durable before the answer was offered
        assert transport.sent == []  # it did not also go one-way
    finally:
        driver.stop()


def test_the_driver_closes_a_slot_whose_message_has_no_answer_and_sends_late_ones_one_way() -> None:
    driver, transport, _ = follower_driver()
    driver.start()
    try:
        first = ReplySlot("a")
        driver.deliver(AppendRequest("a", "b", 2, 0, 0, (), 0), first)
        assert first.wait(WAIT_S) is not None  # term 2 from "a": answered
        # A response to a follower asks for nothing back. (A message from outside the voter set
        # is answered now: a new member may lead before this node has its configuration entry.)
        stranger = ReplySlot("a")
        driver.deliver(HeartbeatResponse("a", "b", 2, 1), stranger)
        started = time.monotonic()
        assert stranger.wait(WAIT_S) is None
        assert time.monotonic() - started < WAIT_S / 2  # closed by the cycle, not timed out

        gave_up = ReplySlot("a")
        assert gave_up.wait(0) is None  # its request already answered 202
        driver.deliver(Heartbeat("a", "b", 2, 0, 2), gave_up)
        wait_until(lambda: transport.sent, "the one-way answer")
        assert transport.sent == [HeartbeatResponse("b", "a", 2, 2)]
    finally:
        driver.stop()


# -- direct writes from the caller's thread ------------------------------------------------------


def test_an_idle_warm_pipeline_writes_on_the_callers_thread_and_the_sender_reads() -> None:
    inbox = AnsweringInbox(lambda m: HeartbeatResponse("b", "a", 4, m.read_seq))  # type: ignore[union-attr]
    with serve(inbox) as server:
        transport, received = transport_to(server)
        transport.start()
        try:
            transport.send(Heartbeat("a", "b", 4, 0, 1))  # cold: the sender thread connects
            wait_until(lambda: len(received) == 1, "the first answer")
            wait_until(lambda: transport.pending("b") == 0, "an idle pipeline")
            for seq in (2, 3, 4):
                wait_until(lambda n=seq - 1: transport.stats("b").sent == n, "the last exchange")
                transport.send(Heartbeat("a", "b", 4, 0, seq))
            wait_until(lambda: len(received) == 4, "every answer")
        finally:
            transport.stop()
    stats = transport.stats("b")
    assert stats.direct == 3  # the three sent on the warm, idle connection
    assert [m.read_seq for m in received] == [1, 2, 3, 4]  # type: ignore[union-attr]
    assert [m.read_seq for m in inbox.questions] == [1, 2, 3, 4]  # type: ignore[union-attr]


def test_a_large_request_is_left_to_the_sender_thread() -> None:
    inbox = AnsweringInbox(lambda m: AppendResponse("b", "a", 4, True, m.prev_index + 1))  # type: ignore[union-attr]
    big = AppendRequest("a", "b", 4, 1, 4, (entry(2, data=b"z" * (64 * 1024)),), 0)
    with serve(inbox) as server:
        transport, received = transport_to(server)
        transport.start()
        try:
            transport.send(append(0, 1))
            wait_until(lambda: transport.stats("b").sent == 1, "the warm-up exchange")
            transport.send(big)
            wait_until(lambda: len(received) == 2, "both answers")
        finally:
            transport.stop()
    assert transport.stats("b").direct == 0
    assert inbox.questions[1] == big
