"""An observation that claims what it creates: one commit from the due instant to the dispatch.

Theory of operation
-------------------
The owner's path from a due instant to the dispatch was two commits: ``Observe`` creates the
Pending occurrence, then ``ClaimOccurrence`` binds it to an attempt. Each commit is a quorum round
trip with its fsyncs, the largest part of that latency (docs/runner.md, "Benchmark"), so
``ObserveAndClaim`` does both in one apply. It applies the carried ``Observe`` exactly as that
command would, then claims each occurrence the observation created, in creation order, through
the apply of ``ClaimOccurrence`` itself, with the binding that command would carry: derived here
from the committed schedule and record plus the owner's fields in the command (epoch, namespace,
worker, authority) by ``claim_binding``, which ``binding_for`` uses too.

A created occurrence whose claim the rules would refuse now stays Pending and is listed with the
reason; the owner claims it later with ``ClaimOccurrence``, as before. The claim rules are checked
first, without writing, so a refused claim changes nothing and the command as a whole is refused
only when the observation is (all-or-nothing still holds: every write after the checks is one
that cannot be refused).

The at-most-once argument is unchanged: the claim is committed before any dispatch (the owner
dispatches only what the applied result lists), carries the full binding, and is checked against
the ownership epoch at apply time, so a deposed owner's late command claims nothing.

Overlap: for a schedule that is not Concurrent, the claim rules read committed indexes (active
work, the Queue head) that do not yet hold records created in this apply. Such a schedule's new
occurrence is therefore claimed here only when it is the schedule's only live record — then it
is the head and nothing else is active, whatever those indexes say — and otherwise left Pending.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.core.admission import ClaimOccurrence, _claim_occurrence, claim_binding
from appliance.core.binding import (
    Authority,
    check_binding,
    check_binding_v2,
    expires_at_s,
)
from appliance.core.claims import ClaimBlock, claim_block
from appliance.core.commands import Observe, ObserveReport
from appliance.core.errors import CoreError
from appliance.core.occurrence import Occurrence
from appliance.core.policy_apply import _observe
from appliance.core.runner_parts import ownership_of
from appliance.core.serialisation import command_from_json, command_to_json, register_command_type
from appliance.core.state_errors import InvalidCommand
from appliance.core.state_parts import CHARGING_V2, S
from appliance.core.txn import Txn, register


@dataclass(frozen=True)
class ObserveAndClaim:
    """``observe``, then claim what it created for the owner of ``epoch`` (see module doc)."""

    observe: Observe
    epoch: int
    namespace: str
    worker_id: str
    authority: Authority


@dataclass(frozen=True)
class ObservedAndClaimed(ObserveReport):
    """The value of an applied :class:`ObserveAndClaim`: the observation's report (so whatever
    reads observation results reads this one too), and the claims made with it."""

    claimed: tuple[Occurrence, ...]  # Running now, bound; the owner dispatches exactly these
    unclaimed: tuple[tuple[int, str], ...]  # (occurrence id, why it stays Pending)

    @property
    def report(self) -> ObserveReport:
        return ObserveReport(self.created, self.dropped, self.ignored, self.retired)


def _claim_now(txn: Txn, cmd: ObserveAndClaim, occurrence_id: int) -> ClaimOccurrence | str:
    """The claim to apply for a just-created occurrence, or why it stays Pending. Reads only."""
    ownership = ownership_of(txn.extra)
    if ownership is None or ownership.epoch != cmd.epoch:
        return "stale_epoch: the command's epoch is not the current ownership epoch"
    record = txn.require_occurrence(occurrence_id)
    schedule = txn.require_schedule(record.schedule_id)
    if record.state is not S.PENDING:
        return f"occurrence {record.id} is {record.state.value}"
    # A just-created record is its schedule's newest: it is first in line (nothing reserving, no
    # older Pending) exactly when it is the schedule's only live record, this apply included.
    block = claim_block(
        retry_waiting=record.retry_waiting,
        running=txn.running,
        running_max=txn.limits.running,
        overlap=schedule.definition.policy.overlap,
        first_in_line=txn.nonterminal(schedule.id) == 1,
    )
    if block is ClaimBlock.RETRY_WAITING:
        return f"occurrence {record.id} is {record.state.value}"
    if block is ClaimBlock.RUNNING_LIMIT:
        return f"running: limit of {txn.limits.running} reached"
    if block is ClaimBlock.OVERLAP:
        return f"overlap: schedule {schedule.id} has other live occurrences"
    at_s = cmd.observe.at_s
    binding = claim_binding(
        record,
        schedule.definition,
        owner=ownership.node,
        epoch=cmd.epoch,
        namespace=cmd.namespace,
        worker_id=cmd.worker_id,
        authority=cmd.authority,
    )
    try:
        check_binding(binding)
        if txn.rules == CHARGING_V2:
            check_binding_v2(binding)
        if at_s >= expires_at_s(binding.authority.expires_at):
            return f"grant_expired: authority.expires_at ({binding.authority.expires_at})"
    except CoreError as err:  # pure checks: nothing was written
        return str(err)
    return ClaimOccurrence(record.id, record.attempt, cmd.epoch, binding, at_s)


@register(ObserveAndClaim, grows=True)
def _observe_and_claim(txn: Txn, cmd: ObserveAndClaim) -> ObservedAndClaimed:
    if not isinstance(cmd.observe, Observe) or not isinstance(cmd.authority, Authority):
        raise InvalidCommand("observe_and_claim: needs an Observe and an Authority")
    report = _observe(txn, cmd.observe)
    return _claim_created(txn, report, lambda _schedule_id, oid: _claim_now(txn, cmd, oid))


def _claim_created(
    txn: Txn,
    report: ObserveReport,
    claim_for: Callable[[int, int], ClaimOccurrence | str],
) -> ObservedAndClaimed:
    """Claim each occurrence the observation created, as ``claim_for(schedule id, occurrence
    id)`` says: a claim, or the reason it stays Pending (shared by ObserveAndPlace)."""
    claimed: list[Occurrence] = []
    unclaimed: list[tuple[int, str]] = []
    for schedule_id, occurrence_id, _due_s in report.created:
        claim = claim_for(schedule_id, occurrence_id)
        if isinstance(claim, str):
            unclaimed.append((occurrence_id, claim))
            continue
        # Every rule ClaimOccurrence checks holds by construction here; should one still refuse,
        # the whole command is refused and changes nothing (the owner then observes alone).
        claimed.append(_claim_occurrence(txn, claim))
    return ObservedAndClaimed(
        report.created,
        report.dropped,
        report.ignored,
        report.retired,
        tuple(claimed),
        tuple(unclaimed),
    )


def _observe_to_json(observe: Observe) -> dict:
    return command_to_json(observe)


def _observe_from_json(value: object) -> Observe:
    if not isinstance(value, dict) or value.get("command") != "Observe":
        raise InvalidCommand("observe: must be an Observe command")
    observe = command_from_json(value)
    if not isinstance(observe, Observe):
        raise InvalidCommand("observe: must be an Observe command")
    return observe


def _authority_to_json(authority: Authority) -> dict:
    return {
        "expires_at": authority.expires_at,
        "timeout_seconds": authority.timeout_seconds,
        "heap_mb": authority.heap_mb,
        "session": authority.session,
    }


def _authority_from_json(value: object) -> Authority:
    names = ("expires_at", "timeout_seconds", "heap_mb", "session")
    if not isinstance(value, dict) or set(value) != set(names):
        raise InvalidCommand(f"authority: must be an object with exactly {', '.join(names)}")
    return Authority(**value)


register_command_type(
    ObserveAndClaim,
    {
        "observe": (_observe_to_json, _observe_from_json),
        "authority": (_authority_to_json, _authority_from_json),
    },
)
