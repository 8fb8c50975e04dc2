"""The owner never proposes a command kind that some voter has not reported it can apply: the
operator gets a definite refusal naming the voters, and nothing reaches the log."""

from __future__ import annotations

import json

from tests.runner.harness import Voter, definition


def gate_holding_back(kind: str):  # type: ignore[no-untyped-def]
    def refusal(candidate: str) -> str | None:
        return f"{candidate} waits for v2 (binary 0.0.9)" if candidate == kind else None

    return refusal


def test_a_gated_kind_is_refused_definitely_and_never_proposed() -> None:
    with Voter(gate=gate_holding_back("CreateNamedSchedule")) as v:
        log_before = v.storage.last_index()
        reply = v.command(json.dumps({"action": "create", "definition": definition()}))
        assert reply["ok"] is False and reply["status"] == 400
        assert "waits for v2 (binary 0.0.9)" in reply["error"]["message"]
        assert "outcome" not in reply  # definite, not uncertain
        assert v.storage.last_index() == log_before
        assert v.machine.read(lambda st: len(st.schedules)) == 0
        # Kinds the gate lets through still go: a disable of a missing id is a core refusal.
        other = v.command(json.dumps({"action": "disable", "id": 7}))
        assert other["ok"] is False and "gated" not in json.dumps(other)
        assert v.storage.last_index() == log_before + 1
