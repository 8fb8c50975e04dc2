"""The structured log schema (appliance.logs) and its human rendering (``--log-format text``)."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from appliance.logs import (
    ENVELOPE,
    EVENTS,
    LogFormatStream,
    add_log_format_argument,
    log_stream,
    render_text,
)
from appliance.runner.logs import DecisionLog
from appliance.runner.worker_client import ObserveResult
from tests.runner.harness import T0, Voter, definition


def test_text_rendering_is_the_same_record_for_humans() -> None:
    sink = io.StringIO()
    log = DecisionLog("v1", LogFormatStream(sink, "text"))
    log.emit("dispatch_accepted", occurrence=2, attempt=1, execution_id="s1-o2-a1", late_ms=12.5)
    line = sink.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    ts, rest = line.split(" ", 1)
    assert ts.endswith("Z") and len(ts) == len("2027-01-15T08:04:01.000Z")
    assert (
        rest == "v1 dispatch_accepted occurrence=2 attempt=1 execution_id=s1-o2-a1 late_ms=12.5\n"
    )


def test_text_quotes_values_with_spaces_and_renders_lists_as_json() -> None:
    record = {"ts": 0, "node": "v1", "event": "selection", "dropped": [[1, "missed", 2]],
              "reason": "no quorum", "hint": None}  # fmt: skip
    assert render_text(record) == (
        '1970-01-01T00:00:00.000Z v1 selection dropped=[[1,"missed",2]] reason="no quorum" '
        "hint=null"
    )


def test_json_format_passes_lines_unchanged_and_text_keeps_foreign_lines() -> None:
    sink = io.StringIO()
    assert log_stream(sink, "json") is sink
    stream = LogFormatStream(sink, "text")
    stream.write('{"ts": 0, "node"')  # a line may arrive in pieces
    stream.write(': "v1", "event": "stopped"}\nTraceback (most recent call last):\n')
    assert (
        sink.getvalue()
        == "1970-01-01T00:00:00.000Z v1 stopped\nTraceback (most recent call last):\n"
    )


def test_only_json_and_text_are_accepted() -> None:
    parser = argparse.ArgumentParser()
    add_log_format_argument(parser)
    assert parser.parse_args([]).log_format == "json"
    assert parser.parse_args(["--log-format", "text"]).log_format == "text"
    with pytest.raises(SystemExit):
        parser.parse_args(["--log-format", "xml"])
    with pytest.raises(ValueError, match="json, text"):
        LogFormatStream(io.StringIO(), "xml")  # type: ignore[arg-type]


def test_every_event_a_working_voter_writes_follows_the_documented_schema() -> None:
    voter = Voter()
    voter.worker.on_observe = lambda eid: ObserveResult("lost")
    with voter:
        voter.command(json.dumps({"action": "create", "definition": definition()}))
        voter.advance_to(T0 + 61)
        voter.wait_state(1, "Unknown")
        voter.advance_to(T0 + 241)
        voter.command(json.dumps({"action": "cancel", "occurrence_id": 99}))
    records = [json.loads(line) for line in voter.log_stream.getvalue().splitlines()]
    seen = {r["event"] for r in records}
    assert {"ownership_acquired", "selection", "claim", "admission", "dispatch_accepted",
            "outcome", "operator"} <= seen  # fmt: skip
    for record in records:
        assert list(record)[:3] == list(ENVELOPE)
        assert record["event"] in EVENTS, record
        extra = set(record) - set(ENVELOPE) - set(EVENTS[record["event"]])
        assert not extra, (record["event"], extra)
