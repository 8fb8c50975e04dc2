"""``NoteCapacityWait``: the owner records in an occurrence's history that its claimed attempt
waits for the worker's capacity (issue 17, "Paced dispatch").

Theory of operation (docs/runner-core.md, "Paced dispatch"). The owner claims what the running
limit allows and dispatches no more than the worker says it can hold; a claimed attempt beyond
that waits, Running and unsent, until a slot frees. This command makes the wait visible in the
replicated history: each listed attempt that is still its record's current attempt, Running and
claimed in the command's epoch gets one timeline entry ``capacity_wait`` (state unchanged); any
other is skipped (it moved on before the note committed). Nothing else changes, so the note can
never create Unknown, spend a retry or drop a slot. The entry moves bytes within the record's
charge (the timeline is bounded and charged at its maximum), so the command never grows the
checkpoint. A new log command kind: the owner proposes it only once every voter applies it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from appliance.core.occurrence import INT_MAX, Event, transition
from appliance.core.runner_errors import StaleEpoch
from appliance.core.runner_parts import admission_of, ownership_of
from appliance.core.serialisation import register_command_type
from appliance.core.state_errors import InvalidCommand
from appliance.core.state_parts import S
from appliance.core.txn import Txn, _check_instant, register

NOTE_ATTEMPTS_MAX: Final = 4096  # attempts one note may list (a burst's claims, in one entry)


@dataclass(frozen=True)
class NoteCapacityWait:
    """The owner of ``epoch`` holds back these claimed ``(occurrence_id, attempt)`` pairs until
    the worker has room for them."""

    epoch: int
    attempts: tuple[tuple[int, int], ...]
    at_s: int


def _check_int(name: str, value: Any) -> None:
    if type(value) is not int or not 0 <= value <= INT_MAX:
        raise InvalidCommand(f"{name}: must be an integer in [0, {INT_MAX}], got {value!r}")


@register(NoteCapacityWait)
def _note_capacity_wait(txn: Txn, cmd: NoteCapacityWait) -> tuple[int, ...]:
    _check_instant("at_s", cmd.at_s)
    _check_int("epoch", cmd.epoch)
    if not isinstance(cmd.attempts, tuple) or not 0 < len(cmd.attempts) <= NOTE_ATTEMPTS_MAX:
        raise InvalidCommand(f"attempts: must list 1 to {NOTE_ATTEMPTS_MAX} attempts")
    ownership = ownership_of(txn.extra)
    current = 0 if ownership is None else ownership.epoch
    if cmd.epoch != current:
        raise StaleEpoch(f"epoch: {cmd.epoch} is not the current ownership epoch {current}")
    noted = []
    for pair in cmd.attempts:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InvalidCommand("attempts: every entry is [occurrence_id, attempt]")
        occurrence_id, attempt = pair
        _check_int("attempts.occurrence_id", occurrence_id)
        _check_int("attempts.attempt", attempt)
        record = txn.occurrence(occurrence_id)
        if record is None or record.state is not S.RUNNING or record.attempt != attempt:
            continue  # it moved on before the note committed: nothing to say about it
        admission = admission_of(txn.extra, occurrence_id)
        claim = None if admission is None else admission.claim_for(attempt)
        if claim is None or claim.epoch != cmd.epoch or occurrence_id in noted:
            continue
        txn.put_occurrence(transition(record, Event.CAPACITY_WAIT, cmd.at_s))
        noted.append(occurrence_id)
    return tuple(noted)


def _attempts_to_json(value: tuple[tuple[int, int], ...]) -> list[list[int]]:
    return [list(pair) for pair in value]


def _attempts_from_json(value: Any) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list) or not all(
        isinstance(pair, list) and len(pair) == 2 for pair in value
    ):
        raise InvalidCommand("attempts: expected a list of [occurrence_id, attempt]")
    return tuple((pair[0], pair[1]) for pair in value)


register_command_type(NoteCapacityWait, {"attempts": (_attempts_to_json, _attempts_from_json)})
