"""The live source and the hub: the runner's change feed in the console's shape, one reader
for every page, followed output through the route's own function, numbering, bounded replay."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from appliance.console import feed as console_feed
from appliance.console.feed import (
    BULK_CHANGES_MIN,
    FOLLOWED_MAX,
    REPLAY_EVENTS_MAX,
    ChangeFeedSource,
    EventHub,
    FeedEvent,
    console_change,
    sse_message,
)
from appliance.core import state as core
from appliance.core.limits import Limits
from appliance.metrics.feed import WAITERS_MAX, ChangeFeed
from appliance.owner.worker_answers import ObserveResult
from appliance.runner.machine import Machine, encode_command
from tests.console.state_samples import T0, S, definition, finished
from tests.support import wait_for


def test_each_kind_of_feed_event_maps_to_the_page_it_concerns() -> None:
    occurrence = {
        "kind": "occurrence", "occurrence_id": 2, "schedule_id": 1, "state": "Failed",
        "previous": "Running", "attempt": 1, "due": "2027-01-15T08:01:00Z", "index": 9,
    }  # fmt: skip
    assert console_change(occurrence) == {
        "kind": "occurrence",
        "id": 2,
        "schedule_id": 1,
        "state": "Failed",
        "attempt": 1,
        "due_at": "2027-01-15T08:01:00Z",
        "index": 9,
    }
    schedule = {"kind": "schedule", "schedule_id": 3, "change": "disabled", "index": 4}
    assert console_change(schedule) == {
        "kind": "schedule",
        "id": 3,
        "change": "disabled",
        "index": 4,
    }
    assert console_change({"kind": "pause", "change": "paused", "index": 5}) == {
        "kind": "cluster", "paused": True, "index": 5
    }  # fmt: skip
    assert console_change({"kind": "pause", "change": "resumed", "index": 6})["paused"] is False
    owner = {"kind": "owner", "change": "acquired", "node": "v2", "epoch": 3, "index": 7}
    assert console_change(owner) == {"kind": "cluster", "owner": "v2", "index": 7}
    assert console_change({"kind": "from-a-newer-feed"}) is None


class Runner:
    """What the source reads: a real Machine (no store) with its real change feed, and a worker
    that answers output from ``documents``."""

    def __init__(self, events_max: int | None = None) -> None:
        self.machine = Machine(None, Limits(schedules=1024, records=4096, outstanding=1024))
        extra = {} if events_max is None else {"events_max": events_max}
        self.changes = ChangeFeed(self.machine, **extra)
        self.documents: dict[str, tuple[str, dict[str, Any]]] = {}
        self.observed: list[str] = []
        self.index = 0

    def commit(self, command: Any) -> None:
        self.index += 1
        self.machine.apply(self.index, encode_command(command))

    def observe(self, execution_id: str) -> ObserveResult:
        self.observed.append(execution_id)
        status, document = self.documents.get(execution_id, (None, None))
        return ObserveResult(status, document, detail="gone")

    def source(self) -> ChangeFeedSource:
        return ChangeFeedSource(self.changes, self.machine.read, self)

    def running(self, occurrence_id: int = 1) -> None:
        """A running record placed directly in the applied state (the source only reads it)."""
        record = finished(occurrence_id, 1, T0, T0, T0, S.SUCCEEDED)
        self.machine.state.occurrences[occurrence_id] = record._replace(
            state=S.RUNNING, timeline=()
        )


def collect(source: ChangeFeedSource) -> list[FeedEvent]:
    got: list[FeedEvent] = []
    source.start(got.append)
    return got


def test_a_commit_reaches_the_publisher_through_the_change_feed() -> None:
    runner = Runner()
    source = runner.source()
    got = collect(source)
    try:
        runner.commit(core.CreateSchedule(definition("live"), T0))
        wait_for(lambda: got, "the change published", 10.0)
        assert [(e.event, e.data) for e in got] == [
            ("change", {"kind": "schedule", "id": 1, "change": "created", "index": 1})
        ]
        runner.commit(core.DisableSchedule(1, T0))
        runner.commit(core.Pause(T0))
        wait_for(lambda: len(got) == 3, "the disable and the pause", 10.0)
        assert [e.data.get("change", e.data.get("paused")) for e in got[1:]] == ["disabled", True]
    finally:
        source.stop()


def test_news_starts_at_the_feed_cursor_when_the_source_is_built() -> None:
    runner = Runner()
    runner.commit(core.CreateSchedule(definition("before"), T0))
    source = runner.source()  # the page loaded schedule 1 itself: it is no news
    got = collect(source)
    try:
        runner.commit(core.CreateSchedule(definition("after"), T0))
        wait_for(lambda: got, "the second schedule", 10.0)
        assert [e.data["id"] for e in got] == [2]
    finally:
        source.stop()


def test_a_burst_of_changes_is_one_bulk_change() -> None:
    runner = Runner()
    source = runner.source()
    for i in range(BULK_CHANGES_MIN):  # committed before the reader's first look
        runner.commit(core.CreateSchedule(definition(f"s{i}"), T0))
    got = collect(source)
    try:
        wait_for(lambda: got, "the bulk change", 10.0)
        assert [e.data for e in got] == [{"kind": "bulk", "count": BULK_CHANGES_MIN}]
    finally:
        source.stop()


def test_one_change_under_the_bulk_threshold_is_sent_one_by_one() -> None:
    runner = Runner()
    source = runner.source()
    for i in range(BULK_CHANGES_MIN - 1):
        runner.commit(core.CreateSchedule(definition(f"s{i}"), T0))
    got = collect(source)
    try:
        wait_for(lambda: len(got) == BULK_CHANGES_MIN - 1, "every change", 10.0)
        assert {e.data["kind"] for e in got} == {"schedule"}
    finally:
        source.stop()


def test_a_gap_in_the_feed_is_a_bulk_change_so_pages_reload() -> None:
    runner = Runner(events_max=2)
    source = runner.source()
    for i in range(5):  # the feed keeps 2 events: the reader's cursor falls behind what it keeps
        runner.commit(core.CreateSchedule(definition(f"s{i}"), T0))
    got = collect(source)
    try:
        wait_for(lambda: got, "the bulk change", 10.0)
        assert got[0].data["kind"] == "bulk" and got[0].data["gap"] is True
    finally:
        source.stop()


def test_the_reader_takes_no_waiting_slot_of_the_feed() -> None:
    """Management's long polls may hold every waiting slot: the console still hears commits,
    and another request is still refused its wait (the slots are the listener's, untouched)."""
    runner = Runner()
    source = runner.source()
    got = collect(source)
    waiting = [
        threading.Thread(target=lambda: runner.changes.page(runner.changes.cursor, 20_000))
        for _ in range(WAITERS_MAX)
    ]
    try:
        for thread in waiting:
            thread.start()
        wait_for(lambda: runner.changes._waiters == WAITERS_MAX, "the listener's waiters", 10.0)
        assert runner.changes.page(runner.changes.cursor, 1_000).waited is False
        runner.commit(core.CreateSchedule(definition("seen"), T0))  # also ends their waits
        wait_for(lambda: got, "the change published", 10.0)
    finally:
        source.stop()
        for thread in waiting:
            thread.join(30)


def test_followed_output_is_sent_as_it_grows_then_final_and_then_not_asked_again() -> None:
    runner = Runner()
    runner.commit(core.CreateSchedule(definition("out"), T0))
    runner.running()
    eid = "s1-o1-a1"
    runner.documents[eid] = ("running", {"status": "running", "output": {"text": "one\n"}})
    source = runner.source()
    assert source.follow(1)
    got = collect(source)
    try:
        wait_for(lambda: [e for e in got if e.event == "output"], "the first lines", 10.0)
        runner.documents[eid] = (
            "completed",
            {"status": "completed", "output": {"text": "one\ntwo\n"}},
        )
        wait_for(
            lambda: [e for e in got if e.event == "output" and e.data["final"]], "the end", 10.0
        )
        pieces = [
            (e.data["offset"], e.data["text"], e.data["bytes"]) for e in got if e.event == "output"
        ]
        assert pieces == [(0, "one\n", 4), (4, "two\n", 8)]
        assert all(
            e.occurrence_id == 1 and e.data["execution_id"] == eid
            for e in got
            if e.event == "output"
        )
        asked = len(runner.observed)
        wait_for(lambda: not source._output_due.is_set(), "a poll after the end", 10.0)
        source._output_due.set()
        wait_for(lambda: not source._output_due.is_set(), "another poll", 10.0)
        assert len(runner.observed) == asked  # a final report is not fetched again
    finally:
        source.stop()


def test_a_commit_on_a_followed_occurrence_fetches_its_output_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(console_feed, "OUTPUT_POLL_S", 120.0)  # no poll within the test
    runner = Runner()
    runner.commit(core.CreateSchedule(definition("out"), T0))
    runner.running()
    eid = "s1-o1-a1"
    source = runner.source()
    got = collect(source)
    try:
        assert source.follow(1)  # following asks at once: nothing at the worker yet
        wait_for(lambda: runner.observed, "the first look", 10.0)
        runner.documents[eid] = ("completed", {"status": "completed", "output": {"text": "x\n"}})
        runner.commit(core.RecordOutcome(1, 1, "completed", T0 + 5))
        wait_for(
            lambda: [e for e in got if e.event == "output" and e.data["final"]], "the output", 10.0
        )
    finally:
        source.stop()


def test_following_is_bounded() -> None:
    source = Runner().source()
    assert all(source.follow(oid) for oid in range(1, FOLLOWED_MAX + 1))
    assert not source.follow(FOLLOWED_MAX + 1)
    assert source.follow(1)  # a second page on an occurrence already followed
    source.unfollow(2)
    assert source.follow(FOLLOWED_MAX + 1)


def test_the_hub_numbers_messages_and_replays_what_a_stream_missed() -> None:
    sent: list[tuple[bytes, int | None, int | None]] = []
    hub = EventHub(lambda message, oid, event_id: sent.append((message, oid, event_id)))
    hub.publish(FeedEvent("change", {"n": 1}))
    hub.publish(FeedEvent("output", {"n": 2}, occurrence_id=7))
    hub.publish(FeedEvent("change", {"n": 3}))
    assert hub.last_id == 3 and sent[0] == (sse_message("change", {"n": 1}, 1), None, 1)
    assert [event_id for _, _, event_id in sent] == [1, 2, 3]
    assert hub.replay(1, follow=None) == [sse_message("change", {"n": 3}, 3)]
    assert hub.replay(1, follow=7) == [
        sse_message("output", {"n": 2}, 2),
        sse_message("change", {"n": 3}, 3),
    ]
    assert hub.replay(3, follow=None) == []
    assert hub.replay(99, follow=None) is None  # an id from before a restart: reload


def test_a_new_stream_opens_with_what_it_missed_and_the_id_it_reaches_to() -> None:
    hub = EventHub(lambda message, oid, event_id: None)
    assert hub.opening(None, follow=None) == ([], 0)  # from now: nothing to replay
    hub.publish(FeedEvent("change", {"n": 1}))
    hub.publish(FeedEvent("output", {"n": 2}, occurrence_id=7))
    assert hub.opening(None, follow=7) == ([], 2)
    assert hub.opening(1, follow=7) == ([sse_message("output", {"n": 2}, 2)], 2)
    assert hub.opening(1, follow=8) == ([], 2)  # another occurrence's output is not its news
    assert hub.opening(5, follow=None) == (None, 2)  # from before a restart: reload


def test_the_replay_window_is_bounded() -> None:
    hub = EventHub(lambda message, oid, event_id: None)
    for n in range(REPLAY_EVENTS_MAX + 10):
        hub.publish(FeedEvent("change", {"n": n}))
    assert hub.replay(5, follow=None) is None  # it left the window
    assert len(hub.replay(20, follow=None) or []) == REPLAY_EVENTS_MAX + 10 - 20


def test_an_sse_message_is_one_line_of_data_whatever_the_text() -> None:
    message = sse_message("output", {"text": "a\nb\r\n\ndata: x"}, 4)
    lines = message.decode().split("\n")
    assert lines[:2] == ["id: 4", "event: output"]
    assert lines[2].startswith("data: ") and lines[3:] == ["", ""]
