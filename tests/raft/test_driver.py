"""The driver thread: ticks from the injected monotonic clock, one persist per Ready, fatal errors
stop it and fail every waiting call, a full inbox refuses instead of blocking."""

from __future__ import annotations

import random
import threading
import time

import pytest

from appliance.raft import (
    Heartbeat,
    MemoryLogStorage,
    Message,
    RaftConfig,
    RaftNode,
    VoteRequest,
)
from appliance.raft.driver import DriverStopped, Overloaded, RaftDriver
from tests import support

WAIT_S = 10.0


class Recorder:
    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send(self, message: Message) -> None:
        self.sent.append(message)


class ManualClock:
    def __init__(self) -> None:
        self.now_s = 100.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now_s

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now_s += seconds


def wait_for(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    support.wait_for(predicate, what, WAIT_S, poll_s=0.002)


def make_driver(voters=("n1", "n2", "n3"), **kwargs):  # type: ignore[no-untyped-def]
    storage = MemoryLogStorage()
    node = RaftNode(RaftConfig("n1", voters), storage, random.Random(3))
    transport = Recorder()
    driver = RaftDriver(node, storage, transport, kwargs.pop("apply", lambda i, c: i), **kwargs)
    return driver, transport, storage


def test_elections_follow_the_injected_monotonic_clock_not_wall_time() -> None:
    clock = ManualClock()
    driver, transport, _ = make_driver(clock=clock, tick_ms=10)
    driver.start()
    try:
        time.sleep(0.3)  # 30 real tick intervals pass, but the injected clock stands still
        assert transport.sent == []
        clock.advance(0.25)  # 25 ticks: past the longest election timeout (20)
        wait_for(lambda: transport.sent, "a pre-vote")
        assert all(isinstance(m, VoteRequest) and m.pre_vote for m in transport.sent)
    finally:
        driver.stop()


def test_an_apply_hook_that_raises_stops_the_driver_and_fails_waiting_calls() -> None:
    fatal: list[BaseException] = []

    def broken(index: int, command: bytes) -> None:
        raise RuntimeError("state machine bug")

    driver, _, _ = make_driver(
        voters=("n1",), apply=broken, on_fatal=fatal.append, campaign_at_start=True
    )
    driver.start()
    future = driver.propose(b"boom")
    with pytest.raises(DriverStopped, match="state machine bug"):
        future.result(WAIT_S)
    wait_for(lambda: fatal, "on_fatal")
    assert isinstance(driver.fatal, RuntimeError)
    with pytest.raises(DriverStopped):
        driver.propose(b"after").result(WAIT_S)


def test_a_full_inbox_refuses_instead_of_blocking() -> None:
    driver, _, _ = make_driver(inbox_max=2)  # not started: nothing drains the inbox
    driver.propose(b"a")
    driver.propose(b"b")
    with pytest.raises(Overloaded):
        driver.propose(b"c").result(0)
    with pytest.raises(Overloaded):
        driver.read_barrier().result(0)


def test_proposals_queued_together_share_one_durable_write() -> None:
    driver, _, storage = make_driver(voters=("n1",), campaign_at_start=True)
    futures = [driver.propose(b"%d" % n) for n in range(100)]  # queued before the thread runs
    driver.start()
    try:
        results = [future.result(WAIT_S) for future in futures]
        assert results == list(range(2, 102))  # apply results in proposal order
        assert storage.persist_calls == 1  # vote, barrier and 100 entries: one transaction
        assert driver.status().applied_index == 101
    finally:
        driver.stop()


def test_a_follower_whose_leader_is_gone_campaigns_early_and_says_why(caplog) -> None:  # type: ignore[no-untyped-def]
    clock = ManualClock()
    asked: list[str] = []

    def peer_gone(peer: str) -> bool:
        asked.append(peer)
        return True

    driver, transport, _ = make_driver(clock=clock, tick_ms=10, peer_gone=peer_gone)
    driver.start()
    try:
        driver.deliver(Heartbeat("n2", "n1", 1, 0, 0))
        wait_for(lambda: driver.status().leader_id == "n2", "n1 to follow n2")
        with caplog.at_level("WARNING", logger="appliance.raft.driver"):
            for _ in range(6):  # the hint's window is 2-5 ticks; the election timeout is 10+
                clock.advance(0.01)
                driver.deliver(Heartbeat("n9", "n1", 0, 0, 0))  # wakes the loop; ignored
                time.sleep(0.01)
            wait_for(
                lambda: any(isinstance(m, VoteRequest) and m.pre_vote for m in transport.sent),
                "an early pre-vote",
            )
        assert asked[0] == "n2"
        assert "leader n2's cluster port refuses connections" in caplog.text
    finally:
        driver.stop()
