"""The version gate (SPEC §11): a new command kind is proposed only once every voter applies it,
and a voter that meets a kind it cannot apply stops instead of diverging."""

from __future__ import annotations

import json

import pytest

from appliance.capabilities import (
    BASELINE_COMMAND_KINDS,
    BINARY_VERSION,
    COMMAND_KIND_BYTES_MAX,
    COMMAND_KINDS_MAX,
    Capabilities,
    capabilities_from_json,
    command_kinds,
    gate_refusal,
    local_capabilities,
)
from appliance.core import state as core
from appliance.core.definition import parse_definition
from appliance.core.limits import Limits
from appliance.runner.machine import Accepted, Machine, UnsupportedCommand, encode_command

# Two binaries, played by their command sets: "old" lacks a kind that "new" added. The kind is a
# real one (so the new binary really applies it); only the sets are made up.
ADDED = "ObserveAndClaim"
OLD = Capabilities("0.0.9", BASELINE_COMMAND_KINDS - {ADDED})
NEW = Capabilities(BINARY_VERSION, BASELINE_COMMAND_KINDS)
OLD_BASELINE = BASELINE_COMMAND_KINDS - {ADDED}
VOTERS = ("v1", "v2", "v3")


def test_this_binary_applies_every_baseline_kind() -> None:
    assert command_kinds() >= BASELINE_COMMAND_KINDS
    assert local_capabilities() == Capabilities(BINARY_VERSION, command_kinds())


def test_a_baseline_kind_is_always_allowed_even_with_no_reports() -> None:
    assert gate_refusal("Observe", VOTERS, {}) is None


def test_a_new_kind_waits_for_every_voter_of_the_configuration() -> None:
    reports = {"v1": NEW, "v2": OLD, "v3": None}
    refusal = gate_refusal(ADDED, VOTERS, reports, baseline=OLD_BASELINE)
    assert refusal is not None
    assert "v2 (binary 0.0.9)" in refusal and "v3 (no report yet)" in refusal
    assert "v1" not in refusal.split("not yet:")[1]
    # v2 upgraded, v3 reported: now it may be proposed.
    everyone = dict.fromkeys(VOTERS, NEW)
    assert gate_refusal(ADDED, VOTERS, everyone, baseline=OLD_BASELINE) is None


def test_a_report_round_trips_and_malformed_ones_name_the_field() -> None:
    assert capabilities_from_json(NEW.to_json()) == NEW
    at_limit = {"binary": "1", "commands": [f"K{i}" for i in range(COMMAND_KINDS_MAX)]}
    assert len(capabilities_from_json(at_limit).commands) == COMMAND_KINDS_MAX
    over = {"binary": "1", "commands": [f"K{i}" for i in range(COMMAND_KINDS_MAX + 1)]}
    with pytest.raises(ValueError, match=r"capabilities\.commands"):
        capabilities_from_json(over)
    longest = {"binary": "1", "commands": ["k" * COMMAND_KIND_BYTES_MAX]}
    assert capabilities_from_json(longest).commands == {"k" * COMMAND_KIND_BYTES_MAX}
    with pytest.raises(ValueError, match=r"capabilities\.commands"):
        capabilities_from_json({"binary": "1", "commands": ["k" * (COMMAND_KIND_BYTES_MAX + 1)]})
    with pytest.raises(ValueError, match=r"capabilities\.binary"):
        capabilities_from_json({"commands": []})


def _create(at_s: int) -> bytes:
    definition = parse_definition(
        {
            "name": "n",
            "code": "1",
            "cron": "* * * * *",
            "timezone": "UTC",
            "policy": {
                "missed": "Skip",
                "overlap": "Skip",
                "retry": {"max_retries": 0, "delay_seconds": 0},
            },
        },
        Limits(),
        "definition",
    )
    return encode_command(core.CreateSchedule(definition, at_s))


def test_an_older_binary_stops_at_a_kind_it_cannot_apply_and_changes_nothing() -> None:
    old = Machine(None, Limits(), known_kinds=frozenset({"DisableSchedule"}))
    new = Machine(None, Limits())
    entry = _create(1_800_000_000)
    assert isinstance(new.apply(1, entry), Accepted)
    with pytest.raises(UnsupportedCommand) as caught:
        old.apply(1, entry)
    message = str(caught.value)
    assert "log entry 1" in message and "CreateSchedule" in message and BINARY_VERSION in message
    assert old.applied_index == 0 and old.read(lambda st: len(st.schedules)) == 0
    assert new.read(lambda st: len(st.schedules)) == 1


def test_a_malformed_command_of_a_known_shape_is_still_an_ordinary_refusal() -> None:
    machine = Machine(None, Limits())
    refused = machine.apply(1, json.dumps({"command": "DisableSchedule"}).encode())
    assert not isinstance(refused, Accepted)
    assert machine.applied_index == 1


# ---- issue 36, finding 2: learners that never reported ----------------------------------------


def test_a_learner_that_never_reported_is_left_out_of_the_gate() -> None:
    """Three learners added and never started must not hold back every newer command: a learner
    counts in no quorum, and one that later meets a kind it cannot apply stops (SPEC §11)."""
    members = (*VOTERS, "v4", "v5", "v6")
    reports = {**dict.fromkeys(VOTERS, NEW), "v4": None}
    learners = frozenset({"v4", "v5", "v6"})
    assert gate_refusal(ADDED, members, reports, baseline=OLD_BASELINE, learners=learners) is None


def test_a_learner_that_reported_an_older_binary_holds_the_gate_naming_the_remedy() -> None:
    members = (*VOTERS, "v4")
    reports = {**dict.fromkeys(VOTERS, NEW), "v4": OLD}
    refusal = gate_refusal(
        ADDED, members, reports, baseline=OLD_BASELINE, learners=frozenset({"v4"})
    )
    assert refusal is not None
    assert "v4 (learner, binary 0.0.9): upgrade it, or remove it (remove_voter)" in refusal
    assert "finish upgrading" not in refusal


def test_each_voter_holding_the_gate_is_named_with_its_own_remedy() -> None:
    reports = {"v1": NEW, "v2": OLD, "v3": None}
    refusal = gate_refusal(ADDED, VOTERS, reports, baseline=OLD_BASELINE)
    assert refusal is not None
    assert "v2 (binary 0.0.9): upgrade it" in refusal
    assert "v3 (no report yet): is it running and reachable? start it" in refusal


def test_a_learner_is_promoted_only_once_it_reported_every_committed_kind() -> None:
    from appliance.capabilities import promotion_refusal

    committed = frozenset({"RunNow", "Pause"})
    silent = promotion_refusal("v4", None, committed)
    assert silent is not None and "'v4' has not caught up: it has not reported" in silent
    assert "start it" in silent
    older = Capabilities("0.0.9", BASELINE_COMMAND_KINDS | {"Pause"})
    lacking = promotion_refusal("v4", older, committed)
    assert lacking is not None
    assert "'v4' runs appliance 0.0.9, which cannot apply RunNow" in lacking
    assert f"this voter runs {BINARY_VERSION}" in lacking and "Pause" not in lacking
    assert promotion_refusal("v4", older, frozenset({"Pause"})) is None
    assert promotion_refusal("v4", NEW, frozenset()) is None
