"""The replicated state machine's checkpoint is complete after its first transition.

A voter killed right after its first committed command (the ownership acquisition, which touches
only the ``ownership`` part) must be able to restart: the first transition therefore writes every
part of the initial state, not only the touched ones.
"""

from __future__ import annotations

from pathlib import Path

from appliance.core import state as core
from appliance.core.limits import Limits
from appliance.runner.machine import Accepted, Machine, encode_command
from tests.store.helpers import open_runner


def test_a_store_whose_only_transition_is_the_ownership_acquisition_reopens(
    tmp_path: Path,
) -> None:
    store = open_runner(tmp_path)
    machine = Machine(store, Limits())
    result = machine.apply(1, encode_command(core.AcquireOwnership("n1", 1, 1_000)))
    assert isinstance(result, Accepted)
    expected = core.to_json(machine.state)
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
        written: list[set[str]] = []
        original = store.save_transition

        def recording(index, upserts, deletes=(), **kwargs):  # type: ignore[no-untyped-def]
            written.append(set(upserts))
            return original(index, upserts, deletes, **kwargs)

        store.save_transition = recording  # type: ignore[method-assign]
        machine.apply(2, encode_command(core.AcquireOwnership("n2", 2, 2_000)))
        assert written and written[0] != set(machine.state.part_names())
    finally:
        store.close()
