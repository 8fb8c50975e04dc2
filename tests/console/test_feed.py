"""The live source and the hub: what a commit turns into, numbering, bounded replay."""

from __future__ import annotations

from typing import Any

from appliance.console.feed import (
    BULK_CHANGES_MIN,
    REPLAY_EVENTS_MAX,
    EventHub,
    FeedEvent,
    RunnerStateSource,
    changes_between,
    sse_message,
)
from appliance.core import state as core
from appliance.core.limits import Limits
from appliance.runner.machine import Machine, encode_command
from tests.console.state_samples import T0, S, definition, finished
from tests.support import wait_for


def look(st: core.SchedulerState) -> tuple[Any, Any, Any, Any]:
    return dict(st.occurrences), dict(st.schedules), st.extra.get("paused"), None


def test_a_new_state_of_a_record_is_one_change() -> None:
    before = ({1: finished(1, 1, T0, T0, T0 + 1, S.SUCCEEDED)}, {}, None, None)
    moved = finished(2, 1, T0 + 60, T0 + 60, T0 + 61, S.FAILED)
    after = ({**before[0], 2: moved}, {}, None, None)
    assert changes_between(before, after) == [
        {
            "kind": "occurrence",
            "id": 2,
            "schedule_id": 1,
            "state": "Failed",
            "attempt": 1,
            "due_at": "2027-01-15T08:01:00Z",
        }
    ]


def test_schedules_created_updated_deleted_and_a_pause_are_changes() -> None:
    st = core.SchedulerState(
        definition("x").__class__
        and core.SchedulerState(
            __import__("appliance.core.limits", fromlist=["Limits"]).Limits()
        ).limits
    )
    core.apply(st, core.CreateSchedule(definition("a"), T0))
    core.apply(st, core.CreateSchedule(definition("b"), T0))
    before = look(st)
    core.apply(st, core.DisableSchedule(1, T0))
    core.apply(st, core.DeleteSchedule(2, T0))
    core.apply(st, core.CreateSchedule(definition("c"), T0))
    core.apply(st, core.Pause(T0))
    kinds = [(c["kind"], c.get("id"), c.get("change")) for c in changes_between(before, look(st))]
    assert kinds == [
        ("schedule", 1, "updated"),
        ("schedule", 3, "created"),
        ("schedule", 2, "deleted"),
        ("cluster", None, None),
    ]


def test_nothing_changed_is_no_change() -> None:
    state = look(core.SchedulerState(Limits()))
    assert changes_between(state, state) == []


class Runner:
    """What the source reads: a real Machine (no store) and a worker that answers output."""

    def __init__(self) -> None:
        self.machine = Machine(None, Limits(schedules=1024, records=4096, outstanding=1024))
        self.worker = self
        self.documents: dict[str, tuple[str, dict[str, Any]]] = {}
        self.index = 0

    def commit(self, command: Any) -> None:
        self.index += 1
        self.machine.apply(self.index, encode_command(command))

    def observe(self, execution_id: str) -> Any:
        status, document = self.documents.get(execution_id, (None, None))

        class Observed:
            pass

        observed = Observed()
        observed.status, observed.document, observed.detail = status, document, "gone"  # type: ignore[attr-defined]
        return observed


def test_a_commit_reaches_the_publisher_through_the_machine_listener() -> None:
    runner = Runner()
    source = RunnerStateSource(runner)
    got: list[FeedEvent] = []
    source.start(got.append)
    try:
        runner.commit(core.CreateSchedule(definition("live"), T0))
        wait_for(lambda: got, "the change published", 10.0)
        assert got[0].event == "change"
        assert got[0].data == {"kind": "schedule", "id": 1, "change": "created"}
    finally:
        source.stop()


def test_a_burst_of_changes_is_one_bulk_change() -> None:
    runner = Runner()
    source = RunnerStateSource(runner)
    got: list[FeedEvent] = []
    source.start(got.append)
    try:
        runner.commit(core.CreateSchedule(definition("first"), T0))
        wait_for(lambda: got, "the first change", 10.0)  # the source has looked once
        got.clear()
        with runner.machine.lock:  # the whole burst lands before the source looks again
            for i in range(BULK_CHANGES_MIN):
                runner.commit(core.CreateSchedule(definition(f"s{i}"), T0))
        wait_for(lambda: got, "the bulk change", 10.0)
        assert [e.data for e in got] == [{"kind": "bulk", "count": BULK_CHANGES_MIN}]
    finally:
        source.stop()


def test_followed_output_is_sent_as_it_grows_then_final() -> None:
    runner = Runner()
    runner.commit(core.CreateSchedule(definition("out"), T0))
    # A running record placed directly in the applied state: the source only reads it.
    record = finished(1, 1, T0, T0, T0, S.SUCCEEDED)._replace(state=S.RUNNING, timeline=())
    runner.machine.state.occurrences[1] = record
    eid = "s1-o1-a1"
    runner.documents[eid] = ("running", {"output": {"text": "one\n"}})
    source = RunnerStateSource(runner)
    got: list[FeedEvent] = []
    assert source.follow(1)
    source.start(got.append)
    try:
        wait_for(lambda: [e for e in got if e.event == "output"], "the first lines", 10.0)
        runner.documents[eid] = ("completed", {"output": {"text": "one\ntwo\n"}})
        wait_for(
            lambda: [e for e in got if e.event == "output" and e.data["final"]], "the end", 10.0
        )
        pieces = [(e.data["offset"], e.data["text"]) for e in got if e.event == "output"]
        assert pieces == [(0, "one\n"), (4, "two\n")]
        assert all(e.occurrence_id == 1 for e in got if e.event == "output")
    finally:
        source.stop()


def test_following_is_bounded() -> None:
    from appliance.console.feed import FOLLOWED_MAX

    source = RunnerStateSource(Runner())
    assert all(source.follow(oid) for oid in range(1, FOLLOWED_MAX + 1))
    assert not source.follow(FOLLOWED_MAX + 1)
    assert source.follow(1)  # a second page on an occurrence already followed
    source.unfollow(2)
    assert source.follow(FOLLOWED_MAX + 1)


def test_the_hub_numbers_messages_and_replays_what_a_stream_missed() -> None:
    sent: list[tuple[bytes, int | None]] = []
    hub = EventHub(lambda message, oid: sent.append((message, oid)))
    hub.publish(FeedEvent("change", {"n": 1}))
    hub.publish(FeedEvent("output", {"n": 2}, occurrence_id=7))
    hub.publish(FeedEvent("change", {"n": 3}))
    assert hub.last_id == 3 and sent[0][0] == sse_message("change", {"n": 1}, 1)
    assert hub.replay(1, follow=None) == [sse_message("change", {"n": 3}, 3)]
    assert hub.replay(1, follow=7) == [
        sse_message("output", {"n": 2}, 2),
        sse_message("change", {"n": 3}, 3),
    ]
    assert hub.replay(3, follow=None) == []
    assert hub.replay(99, follow=None) is None  # an id from before a restart: reload


def test_the_replay_window_is_bounded() -> None:
    hub = EventHub(lambda message, oid: None)
    for n in range(REPLAY_EVENTS_MAX + 10):
        hub.publish(FeedEvent("change", {"n": n}))
    assert hub.replay(5, follow=None) is None  # it left the window
    assert len(hub.replay(20, follow=None) or []) == REPLAY_EVENTS_MAX + 10 - 20


def test_an_sse_message_is_one_line_of_data_whatever_the_text() -> None:
    message = sse_message("output", {"text": "a\nb\r\n\ndata: x"}, 4)
    lines = message.decode().split("\n")
    assert lines[:2] == ["id: 4", "event: output"]
    assert lines[2].startswith("data: ") and lines[3:] == ["", ""]
