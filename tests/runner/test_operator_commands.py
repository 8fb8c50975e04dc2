"""The commands beyond the seeds through the real loop and owner (issue 22): stdin documents in,
replies out, over the single-voter Raft with an injected clock and a scripted worker."""

from __future__ import annotations

import json
import threading
from typing import Any

from appliance.core.jitter import jittered_instant_s
from appliance.runner.worker_client import ObserveResult
from tests.runner.harness import T0, Voter, definition, wait_until

NEVER_SOON = "0 0 1 1 *"  # once a year: nothing of its own happens during a test


def send(voter: Voter, **command: Any) -> dict[str, Any]:
    return voter.command(json.dumps(command))


def create(
    voter: Voter, cron: str = "* * * * *", code: str = "console.log(1)", **policy: Any
) -> int:
    body = definition(cron=cron, **policy)
    body["code"] = code
    reply = send(voter, action="create", definition=body)
    assert reply["ok"] is True, reply
    return int(reply["id"])


def codes_sent(voter: Voter) -> list[str]:
    """Wrap the worker so each dispatch's code is kept (the scripted worker keeps bindings)."""
    sent: list[str] = []
    original = voter.worker.execute

    def execute(binding: dict[str, Any], code: str, **kwargs: Any) -> Any:
        sent.append(code)
        return original(binding, code, **kwargs)

    voter.worker.execute = execute  # type: ignore[method-assign]
    return sent


def test_run_now_runs_once_due_at_the_committed_instant_and_a_repeat_gets_the_same_answer():
    with Voter() as v:
        sid = create(v, cron=NEVER_SOON)
        first = send(v, action="run_now", id=sid, request_id="deploy-42")
        assert first["ok"] is True and first["occurrence_id"] == 1 and first["repeated"] is False
        v.advance_to(T0 + 2)
        record = v.wait_state(1, "Succeeded")
        assert record.due_s == T0 + 1  # the instant the owner committed it
        again = send(v, action="run_now", id=sid, request_id="deploy-42")
        assert again["occurrence_id"] == 1 and again["repeated"] is True
        assert v.worker.count("exec") == 1


def test_run_now_refusals_are_definite():
    with Voter() as v:
        reply = send(v, action="run_now", id=9)
        assert reply["ok"] is False and reply["status"] == 400 and "no schedule 9" in str(reply)
        reply = send(v, action="run_now", id=1, request_id="no spaces")
        assert reply["status"] == 400 and "request_id" in reply["error"]["message"]


def test_update_mid_run_keeps_the_running_occurrence_on_its_old_code_and_it_succeeds():
    with Voter() as v:
        sent = codes_sent(v)
        release = threading.Event()
        v.worker.on_observe = lambda eid: ObserveResult(
            "completed" if release.is_set() else "running"
        )
        sid = create(v, code="console.log('old')", overlap="Concurrent")
        v.advance_to(T0 + 60)
        wait_until(lambda: v.state_of(1) == "Running" and sent, "the first dispatch")
        reply = send(v, action="update", id=sid, code="console.log('new')")
        assert reply == {
            "ok": True, "action": "update", "id": sid, "changed": True, "fields": ["code"]
        }  # fmt: skip
        release.set()
        v.advance_to(T0 + 70)
        v.wait_state(1, "Succeeded")
        v.advance_to(T0 + 120)
        v.wait_state(2, "Succeeded")
        assert sent == ["console.log('old')", "console.log('new')"]
        schedule = v.machine.read(lambda st: st.schedules[sid])
        assert schedule.kept == () and schedule.changes[-1].fields == ("code",)


def test_pause_selects_nothing_over_a_minute_boundary_and_resume_adds_nothing_extra():
    with Voter() as v:
        create(v)
        assert send(v, action="pause")["paused"] is True
        assert send(v, action="status")["paused"] == {"since": "2027-01-15T08:00:01Z"}
        for now in (T0 + 60, T0 + 61, T0 + 125):
            v.advance_to(now)
        wait_until(lambda: v.runner.owner._serial.wall_s >= T0 + 125, "the pulse at 08:02:05")
        assert v.record(1) is None
        reply = send(v, action="resume")
        assert reply["ok"] is True and reply["moved"] == [1]
        v.advance_to(T0 + 150)
        assert v.record(1) is None  # nothing of the paused span
        v.advance_to(T0 + 180)
        record = v.wait_state(1, "Succeeded")
        assert record.due_s == T0 + 180 and v.record(2) is None


def test_enable_after_disable_applies_no_backlog():
    with Voter() as v:
        sid = create(v)
        send(v, action="disable", id=sid)
        v.advance_to(T0 + 200)
        assert send(v, action="enable", id=sid)["enabled"] is True
        v.advance_to(T0 + 240)
        record = v.wait_state(1, "Succeeded")
        assert record.due_s == T0 + 240 and v.record(2) is None


def test_a_jittered_slot_is_dispatched_at_its_jittered_instant_with_the_slot_as_due_time():
    with Voter() as v:
        sid = create(v, jitter_seconds=50)
        slot = T0 + 60
        wait = jittered_instant_s(sid, slot, 50, slot + 60)
        assert wait > slot
        v.advance_to(slot)
        wait_until(lambda: v.record(1) is not None, "the slot's record")
        assert v.record(1).not_before_s == wait and v.worker.count("exec") == 0
        v.advance_to(wait)
        v.wait_state(1, "Succeeded")
        binding = v.worker.calls[0][1]
        assert binding["due_time"] == "2027-01-15T08:01:00Z"


def test_backfill_preview_creates_nothing_and_backfill_creates_the_missing_slots():
    with Voter() as v:
        sid = create(v, cron="*/10 * * * *", overlap="Queue")
        v.advance_to(T0 + 5)
        span = {"id": sid, "start": "2027-01-15T07:00:00Z", "end": "2027-01-15T07:30:00Z"}
        preview = send(v, action="backfill_preview", **span)
        assert preview["ok"] is True and preview["preview"] is True
        assert [c["due"] for c in preview["created"]] == [
            "2027-01-15T07:00:00Z",
            "2027-01-15T07:10:00Z",
            "2027-01-15T07:20:00Z",
            "2027-01-15T07:30:00Z",
        ]
        assert v.record(1) is None
        done = send(v, action="backfill", **span)
        assert [c["occurrence_id"] for c in done["created"]] == [1, 2, 3, 4]
        v.advance_to(T0 + 10)
        v.wait_state(4, "Succeeded")
        assert send(v, action="backfill", **span)["existing"] == [
            c["due"] for c in preview["created"]
        ]


def test_the_version_gate_holds_the_new_commands_and_a_jittered_definition():
    asked: list[str] = []

    def gate(kind: str) -> str | None:
        asked.append(kind)
        new = {"RunNow", "Pause", "policy.jitter_seconds"}
        return (
            f"command {kind} is not proposed until every voter can apply it"
            if kind in new
            else None
        )

    def unnamed(**policy: Any) -> dict[str, Any]:  # a named one is a CreateNamedSchedule
        return {k: v for k, v in definition(**policy).items() if k != "name"}

    with Voter(gate=gate) as v:
        plain = send(v, action="create", definition=unnamed())
        assert plain["ok"] is True
        jittered = send(v, action="create", definition=unnamed(jitter_seconds=5))
        assert jittered["ok"] is False and jittered["status"] == 400
        assert "policy.jitter_seconds" in jittered["error"]["message"]
        refused = send(v, action="run_now", id=1)
        assert refused["status"] == 400 and "RunNow" in refused["error"]["message"]
        assert send(v, action="pause")["status"] == 400
        assert v.machine.read(lambda st: len(st.schedules)) == 1  # nothing reached the log
        assert {"CreateSchedule", "policy.jitter_seconds", "RunNow", "Pause"} <= set(asked)


def test_backfill_rounds_start_up_and_end_down_to_whole_seconds_both_inclusive():
    """A fraction of a second past a slot puts that slot outside the window (issue 36, finding
    4: ``…T07:00:00.999999999Z`` created the 07:00:00 slot, before ``start``); nanoseconds count
    even where a parser keeps only microseconds."""
    with Voter() as v:
        sid = create(v, cron="*/10 * * * *", overlap="Queue")
        v.advance_to(T0 + 5)

        def dues(start: str, end: str) -> list[str]:
            reply = send(v, action="backfill_preview", id=sid, start=start, end=end)
            assert reply["ok"] is True, reply
            return [c["due"] for c in reply["created"]]

        assert dues("2027-01-15T07:00:00.999999999Z", "2027-01-15T07:20:00Z") == [
            "2027-01-15T07:10:00Z",
            "2027-01-15T07:20:00Z",
        ]
        assert dues("2027-01-15T07:00:00.000000001Z", "2027-01-15T07:10:00Z") == [
            "2027-01-15T07:10:00Z"
        ]
        # Exactly on a whole second, both ends stay inclusive (trailing zeros are no fraction).
        assert dues("2027-01-15T07:00:00.000Z", "2027-01-15T07:10:00.000000000Z") == [
            "2027-01-15T07:00:00Z",
            "2027-01-15T07:10:00Z",
        ]
        # ``end`` rounds down: a fraction past a slot keeps it, just short of one drops it.
        assert dues("2027-01-15T07:00:00Z", "2027-01-15T07:10:00.999999999Z")[-1] == (
            "2027-01-15T07:10:00Z"
        )
        assert dues("2027-01-15T07:00:00Z", "2027-01-15T07:09:59.999999999Z") == [
            "2027-01-15T07:00:00Z"
        ]
        # An offset is honoured with a fraction too (08:00:00.5+01:00 is 07:00:00.5Z).
        assert dues("2027-01-15T08:00:00.5+01:00", "2027-01-15T07:10:00Z") == [
            "2027-01-15T07:10:00Z"
        ]
        # A window inside one second holds no whole second: refused, naming the fields.
        empty = send(
            v,
            action="backfill",
            id=sid,
            start="2027-01-15T07:10:00.2Z",
            end="2027-01-15T07:10:00.8Z",
        )
        assert empty["ok"] is False and empty["status"] == 400, empty
        assert "start" in empty["error"]["message"] and "whole second" in empty["error"]["message"]
        assert v.record(1) is None
