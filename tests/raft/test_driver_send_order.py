"""When the driver may send before its fsync (thesis §10.2.1) and when it must not.

A leader's appends leave while its own persist is still running, but the leader does not count
its own copy (nor commit, nor answer the proposer) before that persist returned. Votes and append
acknowledgements never leave before the state they depend on is durable.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from concurrent.futures import Future

from appliance.raft import MemoryLogStorage, RaftConfig, RaftNode
from appliance.raft.driver import RaftDriver
from appliance.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    Message,
    VoteRequest,
    VoteResponse,
)
from tests.raft.test_driver import WAIT_S, Recorder, wait_for


class GatedStorage(MemoryLogStorage):
    """A store whose persist, once ``armed``, waits for ``release`` (a slow fsync, held open)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def persist(
        self,
        *,
        term: int,
        voted_for: str | None,
        truncate_from: int | None = None,
        entries: Sequence[tuple[int, int, bytes]] = (),
    ) -> None:
        if self.armed:
            self.entered.set()
            if not self.release.wait(WAIT_S):
                raise TimeoutError("the test never released the persist")
        super().persist(
            term=term, voted_for=voted_for, truncate_from=truncate_from, entries=entries
        )


def deliver_from_a_thread(driver: RaftDriver, message: Message) -> threading.Thread:
    """Deliver as the transport does, from a thread of its own: ``deliver`` may run the cycle,
    fsync included, on the caller's thread."""
    thread = threading.Thread(target=driver.deliver, args=(message,), daemon=True)
    thread.start()
    return thread


def start_driver(*, campaign: bool) -> tuple[RaftDriver, Recorder, GatedStorage]:
    storage = GatedStorage()
    node = RaftNode(RaftConfig("n1", ("n1", "n2", "n3")), storage, random.Random(3))
    transport = Recorder()
    driver = RaftDriver(
        node, storage, transport, lambda index, command: index, campaign_at_start=campaign
    )
    driver.start()
    return driver, transport, storage


def elect_n1(driver: RaftDriver, transport: Recorder) -> None:
    """n1 campaigns at start; n2 grants every (pre-)vote it is asked for."""
    answered: set[int] = set()

    def grant_what_was_asked() -> bool:
        for position, message in enumerate(list(transport.sent)):
            if isinstance(message, VoteRequest) and message.to == "n2" and position not in answered:
                answered.add(position)
                driver.deliver(VoteResponse("n2", "n1", message.term, True, message.pre_vote))
        return driver.status().role == "leader"

    wait_for(grant_what_was_asked, "n1 to lead")
    # Both followers accept the leader's first append, so both are replicated to in a stream.
    wait_for(lambda: appends_to_both(transport), "the leader's first appends")
    for append in appends_to_both(transport):
        last = append.entries[-1].index if append.entries else append.prev_index
        driver.deliver(AppendResponse(append.to, "n1", append.term, True, last))
    wait_for(lambda: driver.status().commit_index >= 1, "the leader's first entry to commit")


def appends_to_both(transport: Recorder) -> list[AppendRequest]:
    firsts = {}
    for m in list(transport.sent):
        if isinstance(m, AppendRequest):
            firsts.setdefault(m.to, m)
    return list(firsts.values()) if set(firsts) == {"n2", "n3"} else []


def appends_carrying(transport: Recorder, data: bytes) -> list[AppendRequest]:
    return [
        m
        for m in list(transport.sent)
        if isinstance(m, AppendRequest) and any(e.data == data for e in m.entries)
    ]


def test_a_leaders_appends_leave_while_its_own_persist_runs_and_commit_waits_for_it() -> None:
    driver, transport, storage = start_driver(campaign=True)
    try:
        elect_n1(driver, transport)
        storage.armed = True
        # The proposer's thread may run the persist itself: propose from a thread of its own.
        proposed: list[Future[object]] = []
        proposer = threading.Thread(
            target=lambda: proposed.append(driver.propose(b"x")), daemon=True
        )
        proposer.start()
        assert storage.entered.wait(WAIT_S)
        wait_for(
            lambda: {m.to for m in appends_carrying(transport, b"x")} == {"n2", "n3"},
            "the appends of x to both followers, sent before the leader's persist returned",
        )
        assert not storage.release.is_set()
        append = appends_carrying(transport, b"x")[0]
        index = append.entries[-1].index
        assert storage.last_index() < index  # not durable on the leader yet
        driver.deliver(AppendResponse("n2", "n1", append.term, True, index))
        # one follower's copy alone is not a majority of durable ones
        assert not (proposed and proposed[0].done())
        storage.release.set()
        proposer.join(WAIT_S)
        assert proposed[0].result(WAIT_S) == index  # leader's durable copy + n2: committed, applied
        assert storage.last_index() >= index
    finally:
        storage.release.set()
        driver.stop()


def test_an_append_acknowledgement_leaves_only_after_the_entries_are_durable() -> None:
    driver, transport, storage = start_driver(campaign=False)
    try:
        storage.armed = True
        entry = Entry(1, 1, EntryKind.NORMAL, b"y")
        deliver_from_a_thread(driver, AppendRequest("n2", "n1", 1, 0, 0, (entry,), 0))
        assert storage.entered.wait(WAIT_S)
        assert not [m for m in transport.sent if isinstance(m, AppendResponse)]
        storage.release.set()
        wait_for(
            lambda: any(isinstance(m, AppendResponse) for m in list(transport.sent)), "the ack"
        )
        ack = next(m for m in transport.sent if isinstance(m, AppendResponse))
        assert (ack.success, ack.index, storage.last_index()) == (True, 1, 1)
    finally:
        storage.release.set()
        driver.stop()


def test_a_vote_leaves_only_after_the_vote_is_durable() -> None:
    driver, transport, storage = start_driver(campaign=False)
    try:
        storage.armed = True
        deliver_from_a_thread(driver, VoteRequest("n2", "n1", 1, 0, 0, False))
        assert storage.entered.wait(WAIT_S)
        assert not [m for m in transport.sent if isinstance(m, VoteResponse)]
        storage.release.set()
        wait_for(lambda: any(isinstance(m, VoteResponse) for m in list(transport.sent)), "a vote")
        vote = next(m for m in transport.sent if isinstance(m, VoteResponse))
        assert vote.granted
        assert storage.hard_state() == (1, "n2")
    finally:
        storage.release.set()
        driver.stop()
