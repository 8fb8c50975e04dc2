"""The switch to charging rules 2 is a committed, gated command: the owner proposes it once after
it acquires ownership and only when every voter can apply it; replaying the log gives the same
checkpoint and budget; an older binary stops at it; the store then refuses older readers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.capabilities import BASELINE_COMMAND_KINDS, command_kinds
from appliance.core import state as core
from appliance.core.limits import Limits
from appliance.runner.machine import Machine, UnsupportedCommand, encode_command
from appliance.store.versions import BINARY_READER_VERSION, READER_VERSION_CHARGING
from tests.runner.harness import Voter, definition, wait_until
from tests.store.helpers import open_runner


def _commands(voter: Voter) -> list[tuple[int, bytes]]:
    """The log's command entries as (index, data): a one-byte tag, 1 for a command."""
    last = voter.storage.last_index()
    entries = voter.storage.entries(1, last + 1)
    return [(index, data[1:]) for index, _term, data in entries if data[:1] == b"\x01"]


def _kinds(voter: Voter) -> list[str]:
    return [json.loads(data)["command"] for _index, data in _commands(voter)]


def test_adopt_charging_is_a_gated_kind() -> None:
    assert "AdoptCharging" in command_kinds()
    assert "AdoptCharging" not in BASELINE_COMMAND_KINDS


def test_the_owner_switches_once_after_acquiring_and_the_log_replays_identically() -> None:
    with Voter() as v:
        wait_until(lambda: v.machine.read(core.charging_rules) == 2, "charging rules 2")
        # Applied before the loop logs the answer: wait for the log line too.
        adopted = wait_until(lambda: v.events("charging_adopted"), "the charging decision")
        assert adopted == [{**adopted[0], "rules": 2}]
        v.restart()  # a new acquisition: the checkpoint names rules 2 already
        wait_until(lambda: v.events("ownership_acquired")[1:], "the second acquisition")
        v.advance_to(v.clock.now_s() + 1)
        wait_until(lambda: v.events("ownership_acquired")[1:], "the second acquisition")
        assert _kinds(v).count("AdoptCharging") == 1
        expected = (v.machine.read(core.to_json), v.machine.read(lambda st: st.budget_bytes))
        entries = _commands(v)

    replayed = Machine(None, v.cfg.limits)
    for index, data in entries:
        replayed.apply(index, data)
    assert (core.to_json(replayed.state), replayed.state.budget_bytes) == expected
    reloaded = core.from_json(core.to_json(replayed.state))
    assert reloaded.budget_bytes == expected[1]

    # A binary from before the switch stops at the entry instead of charging by rules 1.
    older = Machine(None, v.cfg.limits, known_kinds=command_kinds() - {"AdoptCharging"})
    with pytest.raises(UnsupportedCommand, match="AdoptCharging"):
        for index, data in entries:
            older.apply(index, data)
    assert core.charging_rules(older.state) == 1


def test_while_a_voter_lacks_the_kind_nothing_is_proposed_then_it_goes() -> None:
    allowed = {"yes": False}

    def gate(kind: str) -> str | None:
        if kind == "AdoptCharging" and not allowed["yes"]:
            return "AdoptCharging waits for voter-2 (binary 0.0.9)"
        return None

    with Voter(gate=gate) as v:
        wait_until(lambda: v.events("ownership_acquired"), "ownership")
        reply = v.command(json.dumps({"action": "create", "definition": definition()}))
        assert reply["ok"] is True
        for _ in range(3):  # ticks observe (after asking the gate): still nothing proposed
            cursor = v.machine.read(lambda st: st.progress[1].cursor_s)
            v.advance_to(v.clock.now_s() + 60)
            wait_until(
                lambda c=cursor: v.machine.read(lambda st: st.progress[1].cursor_s) > c, "a tick"
            )
        assert "AdoptCharging" not in _kinds(v)
        assert v.machine.read(core.charging_rules) == 1
        allowed["yes"] = True
        v.runner.wake()
        wait_until(lambda: v.machine.read(core.charging_rules) == 2, "charging rules 2")
        assert _kinds(v).count("AdoptCharging") == 1


def test_the_store_refuses_older_readers_once_it_names_rules_2(tmp_path: Path) -> None:
    assert BINARY_READER_VERSION >= READER_VERSION_CHARGING  # later readers (the fleet) too
    store = open_runner(tmp_path)
    try:
        machine = Machine(store, Limits())
        machine.apply(1, encode_command(core.AcquireOwnership("n1", 1, 1_000)))
        assert machine.flush(5.0)
        assert store.min_reader_version() < READER_VERSION_CHARGING
        machine.apply(2, encode_command(core.AdoptCharging(2)))
        assert machine.flush(5.0)
        assert store.min_reader_version() == READER_VERSION_CHARGING
        machine.apply(3, encode_command(core.DisableSchedule(9, 1_001)))  # refused: still 3
        assert machine.flush(5.0)
        assert store.min_reader_version() == READER_VERSION_CHARGING
        expected = (core.to_json(machine.state), machine.state.budget_bytes)
        assert machine.close()
    finally:
        store.close()
    reopened = open_runner(tmp_path)
    try:
        again = Machine(reopened, Limits())
        assert (core.to_json(again.state), again.state.budget_bytes) == expected
        assert core.charging_rules(again.state) == 2
    finally:
        reopened.close()
