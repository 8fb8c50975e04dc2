"""The replicated state machine's checkpoint: complete after its first transition, and safe to lag.

A voter killed right after its first committed command (the ownership acquisition, which touches
only the ``ownership`` part) must be able to restart: the first transition therefore writes every
part of the initial state, not only the touched ones. The checkpoint is written off the driver
thread and may lag the applied state; replaying the log after its applied index catches up.
"""

from __future__ import annotations

from pathlib import Path

from appliance.core import state as core
from appliance.core.definition import parse_definition
from appliance.core.limits import Limits
from appliance.runner.machine import Accepted, Machine, encode_command
from tests.store.helpers import open_runner

DEFINITION = {
    "name": "job",
    "code": "1",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}


def test_a_store_whose_only_transition_is_the_ownership_acquisition_reopens(
    tmp_path: Path,
) -> None:
    store = open_runner(tmp_path)
    machine = Machine(store, Limits())
    result = machine.apply(1, encode_command(core.AcquireOwnership("n1", 1, 1_000)))
    assert isinstance(result, Accepted)
    expected = core.to_json(machine.state)
    assert machine.close()
    store.close()

    reopened = open_runner(tmp_path)
    try:
        again = Machine(reopened, Limits())
        assert again.applied_index == 1
        assert core.to_json(again.state) == expected
        _applied, parts = reopened.load_checkpoint()
        assert "meta" in parts and "ownership" in parts
    finally:
        reopened.close()


def test_later_transitions_write_only_the_parts_they_touch(tmp_path: Path) -> None:
    store = open_runner(tmp_path)
    try:
        machine = Machine(store, Limits())
        machine.apply(1, encode_command(core.AcquireOwnership("n1", 1, 1_000)))
        assert machine.flush(5.0)
        written: list[set[str]] = []
        original = store.save_transition

        def recording(index, upserts, deletes=(), **kwargs):  # type: ignore[no-untyped-def]
            written.append(set(upserts))
            return original(index, upserts, deletes, **kwargs)

        store.save_transition = recording  # type: ignore[method-assign]
        machine.apply(2, encode_command(core.AcquireOwnership("n2", 2, 2_000)))
        assert machine.close()
        assert written and written[0] != set(machine.state.part_names())
    finally:
        store.close()


def commands() -> list[bytes]:
    create = core.CreateSchedule(parse_definition(DEFINITION, Limits()), 1_000)
    return [
        encode_command(c)
        for c in (
            core.AcquireOwnership("n1", 1, 1_000),
            create,
            core.DisableSchedule(1, 1_100),
            core.DeleteSchedule(1, 1_200),
            core.AcquireOwnership("n2", 2, 1_300),
        )
    ]


def test_a_checkpoint_behind_the_applied_state_catches_up_by_replaying_the_log(
    tmp_path: Path,
) -> None:
    # The checkpoint lags the applied state by what its writer had not written yet (here:
    # everything after index 2, as if the process died first). A restart resumes from the
    # checkpoint's applied index and re-applies the committed entries after it: the same state.
    log = commands()
    store = open_runner(tmp_path)
    original = store.save_transition

    def dies_after_two(index, upserts, deletes=(), **kwargs):  # type: ignore[no-untyped-def]
        if index <= 2:
            original(index, upserts, deletes, **kwargs)

    store.save_transition = dies_after_two  # type: ignore[method-assign]
    machine = Machine(store, Limits())
    for index, data in enumerate(log, start=1):
        machine.apply(index, data)
        machine.flush(5.0)  # one write per transition, so the cut falls exactly after index 2
    expected = core.to_json(machine.state)
    machine.close()
    store.close()

    reopened = open_runner(tmp_path)
    try:
        again = Machine(reopened, Limits())
        assert again.applied_index == 2
        for index, data in enumerate(log, start=1):
            if index > again.applied_index:
                again.apply(index, data)
        assert core.to_json(again.state) == expected
        assert again.close()
    finally:
        reopened.close()


def test_the_checkpoint_holds_every_applied_transition_once_the_machine_is_closed(
    tmp_path: Path,
) -> None:
    store = open_runner(tmp_path)
    machine = Machine(store, Limits())
    for index, data in enumerate(commands(), start=1):
        machine.apply(index, data)
    expected = core.to_json(machine.state)
    assert machine.close()
    store.close()
    reopened = open_runner(tmp_path)
    try:
        again = Machine(reopened, Limits())
        assert again.applied_index == len(commands())
        assert core.to_json(again.state) == expected
        again.close()
    finally:
        reopened.close()


def test_a_pause_raises_the_stores_minimum_reader_version_to_the_commands_reader(
    tmp_path: Path,
) -> None:
    from appliance.store.versions import READER_VERSION_BASELINE, READER_VERSION_COMMANDS

    store = open_runner(tmp_path)
    try:
        machine = Machine(store, Limits())
        machine.apply(1, encode_command(core.AcquireOwnership("n1", 1, 1_000)))
        assert machine.flush(10.0)
        assert store.min_reader_version() == READER_VERSION_BASELINE
        assert isinstance(machine.apply(2, encode_command(core.Pause(1_001))), Accepted)
        assert machine.flush(10.0)
        assert store.min_reader_version() == READER_VERSION_COMMANDS
        assert machine.close()
    finally:
        store.close()
