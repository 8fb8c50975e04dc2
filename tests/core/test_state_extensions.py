"""Room for the runner: new commands and parts slot into the same state and commit.

The runner issue adds ownership, claims and admission permits as more commands on this state.
This test plays that part with a toy "claim binding" to prove the seams: a registered command
gets the all-or-nothing apply, its parts are sized, serialized, reloaded, and retired with the
record they are bound to.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from appliance.core.errors import CoreError
from appliance.core.limits import Limits
from appliance.core.state import (
    _PART_KINDS,
    Claim,
    RecordOutcome,
    Txn,
    apply,
    from_json,
    on_retire,
    register,
    register_part_kind,
)
from tests.core.test_state import MINUTE, T0, new_state, observe, observe_command, rejected

BINDING_BYTES_MAX = 256


@dataclass(frozen=True)
class BindWorker:
    occurrence_id: int
    attempt: int
    worker: str


if "toybinding" not in _PART_KINDS:
    register_part_kind("toybinding", lambda value: BINDING_BYTES_MAX)

    @register(BindWorker)
    def _bind_worker(txn: Txn, cmd: BindWorker) -> str:
        record = txn.require_occurrence(cmd.occurrence_id, cmd.attempt)
        if record.state.value != "Running":
            raise CoreError("binding: only a Running attempt can be bound")
        name = f"toybinding/{cmd.occurrence_id}"
        if txn.extra(name) is not None:
            raise CoreError("binding: already bound")
        txn.put_extra(name, {"attempt": cmd.attempt, "worker": cmd.worker}, BINDING_BYTES_MAX)
        return name

    @on_retire
    def _drop_binding(txn: Txn, occurrence_id: int) -> None:
        name = f"toybinding/{occurrence_id}"
        if txn.extra(name) is not None:
            txn.delete_extra(name)


def test_an_extension_command_writes_sized_parts_that_reload_and_retire_with_their_record():
    state = new_state(Limits(records=1, outstanding=1, running=1))
    observe(state, T0)
    apply(state, Claim(1, 1, T0 + 1))
    applied = apply(state, BindWorker(1, 1, "worker-a"))
    assert applied.touched == {"toybinding/1"}
    assert state.extra["toybinding/1"] == {"attempt": 1, "worker": "worker-a"}
    assert state.size_bytes == len(state.to_json())
    rejected(state, BindWorker(1, 1, "worker-b"), CoreError)  # changes nothing
    again = from_json(state.to_json())
    assert again.extra == state.extra
    assert again.budget_bytes == state.budget_bytes
    apply(state, RecordOutcome(1, 1, "completed", T0 + 2))
    report = apply(state, observe_command(state, T0 + MINUTE)).value
    assert report.retired == (1,)
    assert "toybinding/1" not in state.extra
    assert "toybinding/1" not in state.part_names()
    assert state.size_bytes == len(state.to_json())


def test_part_kinds_of_the_core_cannot_be_taken():
    with pytest.raises(ValueError):
        register_part_kind("occurrence", len)
