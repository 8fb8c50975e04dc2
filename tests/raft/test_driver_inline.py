"""A delivered message runs on the delivering thread when the node is free, and waits in the
inbox when another thread is running it; a failure there stops the driver like one on its own
thread."""

from __future__ import annotations

import random
import threading

import pytest

from appliance.raft import RaftConfig, RaftNode
from appliance.raft.driver import DriverStopped, RaftDriver
from appliance.raft.messages import AppendRequest, AppendResponse, Entry, EntryKind, VoteRequest
from appliance.raft.reply_slot import ReplySlot
from tests.raft.test_driver import WAIT_S, ManualClock, Recorder, wait_for
from tests.raft.test_driver_send_order import GatedStorage


class WatchedStorage(GatedStorage):
    """Also records which thread persisted, and with ``fail`` raises (a broken disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[threading.Thread] = []
        self.fail = False

    def persist(self, **kwargs) -> None:  # type: ignore[no-untyped-def, override]
        self.threads.append(threading.current_thread())
        if self.fail:
            raise OSError("disk gone")
        super().persist(**kwargs)


def start_follower(**kwargs):  # type: ignore[no-untyped-def]
    """A follower whose own thread sleeps (ticks are 10 s apart on a clock that stands still),
    so only delivering threads run it."""
    return start_follower_on(ManualClock(), **kwargs)


def start_follower_on(clock: ManualClock, **kwargs):  # type: ignore[no-untyped-def]
    storage = WatchedStorage()
    node = RaftNode(RaftConfig("n1", ("n1", "n2", "n3")), storage, random.Random(3))
    transport = Recorder()
    driver = RaftDriver(
        node, storage, transport, lambda i, c: i, tick_ms=10_000, clock=clock, **kwargs
    )
    driver.start()
    return driver, transport, storage


def append(index: int) -> AppendRequest:
    entry = Entry(index, 1, EntryKind.NORMAL, b"%d" % index)
    return AppendRequest("n2", "n1", 1, index - 1, 1 if index > 1 else 0, (entry,), 0)


def test_a_message_is_handled_and_answered_on_the_delivering_thread_before_deliver_returns() -> (
    None
):
    driver, transport, storage = start_follower()
    try:
        slot = ReplySlot("n2")
        driver.deliver(append(1), slot)
        # No waiting: the step, the fsync and the answer happened inside deliver.
        assert storage.last_index() == 1
        assert storage.threads == [threading.current_thread()]
        answer = slot.wait(0)
        assert isinstance(answer, AppendResponse)
        assert (answer.success, answer.index) == (True, 1)
        assert transport.sent == []  # the answer rode in the slot, not one-way
        assert driver.status().last_log_index == 1
    finally:
        driver.stop()


def test_a_message_delivered_while_another_thread_runs_the_node_waits_its_turn() -> None:
    driver, transport, storage = start_follower()
    try:
        storage.armed = True
        first = threading.Thread(target=driver.deliver, args=(append(1),), daemon=True)
        first.start()
        assert storage.entered.wait(WAIT_S)  # the first delivering thread holds the turn
        second = threading.Thread(target=driver.deliver, args=(append(2),), daemon=True)
        second.start()
        second.join(WAIT_S)
        assert not second.is_alive()  # it queued instead of waiting for the fsync
        assert storage.last_index() == 0
        storage.release.set()
        first.join(WAIT_S)
        wait_for(lambda: storage.last_index() == 2, "the queued append")
        acks = [m.index for m in transport.sent if isinstance(m, AppendResponse) and m.success]
        assert acks[0] == 1 and acks[-1] == 2  # handled in the order they arrived
    finally:
        storage.release.set()
        driver.stop()


def test_a_failure_on_a_delivering_thread_stops_the_driver_and_fails_later_calls() -> None:
    fatal: list[BaseException] = []
    driver, transport, storage = start_follower(on_fatal=fatal.append)
    storage.fail = True
    driver.deliver(append(1))  # the persist raises on this thread
    assert [type(exc) for exc in fatal] == [OSError]
    assert isinstance(driver.fatal, OSError)
    with pytest.raises(DriverStopped, match="disk gone"):
        driver.propose(b"after").result(WAIT_S)
    late = ReplySlot("n2")
    driver.deliver(append(1), late)
    assert late.wait(0) is None  # released at once, never handled
    assert not [m for m in transport.sent if isinstance(m, AppendResponse)]
    driver.stop()


def test_a_thread_holding_the_turn_ticks_the_node_when_a_tick_is_due() -> None:
    clock = ManualClock()
    driver, transport, _ = start_follower_on(clock)
    try:
        # Past the longest election timeout (20 ticks of 10 s); the driver's own thread is
        # asleep for 10 s of real time, so only the delivering thread can notice.
        clock.advance(210.0)
        driver.deliver(AppendResponse("n2", "n1", 0, True, 0))  # ignored by a follower
        asked = [m for m in transport.sent if isinstance(m, VoteRequest)]
        assert {m.to for m in asked} == {"n2", "n3"} and all(m.pre_vote for m in asked)
    finally:
        driver.stop()
