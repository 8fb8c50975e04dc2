"""Ownership epochs, the takeover fence, and the one-time seeding of the initial schedules.

Theory of operation
-------------------
Election alone does not fence the old owner (SPEC §6, seeds/000). A newly elected leader first
commits a current-term barrier, then ``AcquireOwnership``: one committed transition that raises
the ownership epoch by one and, in the same apply, performs the takeover:

* Every reserving occurrence (Running, Unknown, Cancelling) whose current attempt holds no permit
  is fenced: admission requires the claim's epoch to equal the current epoch, every existing
  claim is now of an older epoch, and no permit exists — so that attempt is provably never
  admitted and never launched. Running/Unknown go back to ``Pending`` as the next attempt without
  spending a retry (``FenceNotLaunched`` in the table), Cancelling ends ``Cancelled``; a record
  whose schedule was deleted ends ``Cancelled`` too. (SPEC §6 speaks of "unadmitted claims";
  Unknown and Cancelling ones are fenced as well, because the same proof holds for them.)
* Attempts holding a permit stay valid (seeds/000: "An admission ordered before takeover remains
  valid"): Running/Unknown are listed for re-observation, Cancelling for resumption.

Terms only grow: an ``AcquireOwnership`` with a lower term than the recorded one (or another node
in the same term, which Raft makes impossible) is refused. Because ownership and admission are in
the same checkpoint and applied in one serialized order, an ``Admit`` either precedes the takeover
(its permit is then kept) or follows it (and is refused as ``stale_epoch``): they cannot race.

Initial schedules: ``SeedInitialSchedules`` is applied once per store, by the first owner that
gets to it (the loop proposes it right after acquiring, before any operator command, so the ids
are 1…N in config order); afterwards it is refused (``already_seeded``), so deleted initial
schedules never come back.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.core.binding import check_node_id
from appliance.core.commands import CreateSchedule
from appliance.core.definition import Definition, definition_to_json
from appliance.core.occurrence import INT_MAX, Event, transition
from appliance.core.policy_apply import _create_schedule
from appliance.core.runner_errors import AlreadySeeded, NotAcquired, StaleTerm
from appliance.core.runner_parts import (
    OWNERSHIP_PART,
    AdmissionRecord,
    Fence,
    Ownership,
    admission_of,
    admission_part,
    admission_to_json,
    ownership_of,
    ownership_to_json,
)
from appliance.core.serialisation import definition_from_checkpoint, register_command_type
from appliance.core.state_errors import InvalidCommand
from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import S
from appliance.core.txn import Txn, _check_instant, register


@dataclass(frozen=True)
class AcquireOwnership:
    node_id: str
    term: int
    at_s: int


@dataclass(frozen=True)
class SeedInitialSchedules:
    definitions: tuple[Definition, ...]
    at_s: int


@dataclass(frozen=True)
class Takeover:
    """The value of an applied :class:`AcquireOwnership`."""

    epoch: int
    fenced: tuple[tuple[int, int], ...]  # (occurrence id, the fenced attempt)
    reobserve: tuple[int, ...]  # Running/Unknown occurrences whose attempt holds a permit
    resume_cancelling: tuple[int, ...]  # Cancelling occurrences whose attempt holds a permit
    needs_seed: bool  # the store's initial schedules are not created yet


def current_ownership(state: SchedulerState) -> Ownership | None:
    return ownership_of(state.extra.get)


def current_epoch(state: SchedulerState) -> int:
    ownership = current_ownership(state)
    return 0 if ownership is None else ownership.epoch


@register(AcquireOwnership)
def _acquire_ownership(txn: Txn, cmd: AcquireOwnership) -> Takeover:
    _check_instant("at_s", cmd.at_s)
    check_node_id("node_id", cmd.node_id)
    if type(cmd.term) is not int or not 1 <= cmd.term <= INT_MAX:
        raise InvalidCommand(f"term: must be an integer in [1, {INT_MAX}]")
    previous = ownership_of(txn.extra)
    if previous is not None:
        if cmd.term < previous.term:
            raise StaleTerm(f"term: {cmd.term} is below the recorded term {previous.term}")
        if cmd.term == previous.term and cmd.node_id != previous.node:
            raise StaleTerm(f"term: {cmd.term} is already held by {previous.node!r}")
        if previous.epoch >= INT_MAX:
            raise InvalidCommand("epoch: the ownership epoch space is exhausted")
    epoch = 1 if previous is None else previous.epoch + 1
    seeded = previous is not None and previous.seeded
    txn.put_extra(
        OWNERSHIP_PART, ownership_to_json(Ownership(cmd.node_id, cmd.term, epoch, cmd.at_s, seeded))
    )
    fenced: list[tuple[int, int]] = []
    reobserve: list[int] = []
    resume: list[int] = []
    state = txn.state
    for oid in sorted(state.occurrences):
        record = state.occurrences[oid]
        if not record.reserving:
            continue
        admission = admission_of(txn.extra, oid) or AdmissionRecord()
        if admission.permit_for(record.attempt) is not None:
            (resume if record.state is S.CANCELLING else reobserve).append(oid)
            continue
        result = transition(record, Event.FENCED_NOT_LAUNCHED, cmd.at_s)
        if result.state is S.PENDING and txn.schedule(record.schedule_id) is None:
            result = transition(result, Event.SCHEDULE_DELETED, cmd.at_s)
        txn.put_occurrence(result)
        fence = Fence(record.attempt, epoch, cmd.at_s, "takeover")
        txn.put_extra(admission_part(oid), admission_to_json(AdmissionRecord(fence=fence)))
        fenced.append((oid, record.attempt))
    return Takeover(epoch, tuple(fenced), tuple(reobserve), tuple(resume), not seeded)


@register(SeedInitialSchedules, grows=True)
def _seed_initial_schedules(txn: Txn, cmd: SeedInitialSchedules) -> tuple[int, ...]:
    _check_instant("at_s", cmd.at_s)
    ownership = ownership_of(txn.extra)
    if ownership is None:
        raise NotAcquired("seed: the initial schedules are created by the first acquired owner")
    if ownership.seeded:
        raise AlreadySeeded("seed: the initial schedules were created once already")
    if not isinstance(cmd.definitions, tuple):
        raise InvalidCommand("definitions: must be a tuple of Definition")
    ids = tuple(_create_schedule(txn, CreateSchedule(d, cmd.at_s)) for d in cmd.definitions)
    txn.put_extra(
        OWNERSHIP_PART,
        ownership_to_json(
            Ownership(
                ownership.node, ownership.term, ownership.epoch, ownership.acquired_at_s, True
            )
        ),
    )
    return ids


register_command_type(AcquireOwnership)
register_command_type(
    SeedInitialSchedules,
    {
        "definitions": (
            lambda ds: [definition_to_json(d) for d in ds],
            lambda ds: tuple(definition_from_checkpoint(d) for d in ds),
        )
    },
)
