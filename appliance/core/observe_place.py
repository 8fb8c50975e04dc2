"""An observation that claims what it creates on the workers placement chose (issue 33).

Theory of operation: ``ObserveAndClaim`` (appliance/core/observe_claim.py) folds the claims of an
observation into its commit, binding one worker for all of them — right for a fleet of one. A
fleet places each attempt, so ``ObserveAndPlace`` carries one worker per observed schedule
(``placements``: schedule id → worker id, the owner's placement decision made before it
proposes, from the schedules the observation selects slots for). The apply is
``ObserveAndClaim``'s, with each created occurrence's claim naming its schedule's worker; a
schedule the owner placed nowhere (no worker may run it now) has its occurrences left Pending,
listed with the reason, and claimed later by ``ClaimOccurrence`` once a worker fits. Every rule a
claim obeys holds unchanged (the claim is ``ClaimOccurrence``'s own apply): the worker must be
one of the fleet in force that is neither draining nor removed, or the whole command is refused
and changes nothing (the owner then observes alone, as for ``ObserveAndClaim``).

A new log command: proposed only once every voter applies it (the version gate); until then the
owner observes alone and claims on the next pass, as a fleet did before it.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.core.admission import ClaimOccurrence
from appliance.core.binding import Authority, _check_text
from appliance.core.commands import Observe
from appliance.core.observe_claim import (
    ObserveAndClaim,
    ObservedAndClaimed,
    _authority_from_json,
    _authority_to_json,
    _claim_created,
    _claim_now,
    _observe_from_json,
    _observe_to_json,
)
from appliance.core.policy_apply import _observe
from appliance.core.serialisation import register_command_type
from appliance.core.state_errors import InvalidCommand
from appliance.core.txn import Txn, register

PLACEMENTS_MAX = 4096  # schedules in one observation are at most limits.schedules (<= 1024)


@dataclass(frozen=True)
class ObserveAndPlace:
    """``observe``, then claim each created occurrence on its schedule's placed worker."""

    observe: Observe
    epoch: int
    namespace: str
    placements: tuple[tuple[int, str], ...]  # (schedule id, worker id), by schedule id
    authority: Authority


def _check_placements(value: object) -> dict[int, str]:
    if not isinstance(value, tuple) or len(value) > PLACEMENTS_MAX:
        raise InvalidCommand(f"placements: at most {PLACEMENTS_MAX} (schedule, worker) pairs")
    out: dict[int, str] = {}
    for pair in value:
        if not isinstance(pair, tuple) or len(pair) != 2 or type(pair[0]) is not int:
            raise InvalidCommand("placements: each item is [schedule id, worker id]")
        _check_text("placements.worker_id", pair[1])
        if pair[0] in out:
            raise InvalidCommand(f"placements: schedule {pair[0]} is placed twice")
        out[pair[0]] = pair[1]
    return out


@register(ObserveAndPlace, grows=True)
def _observe_and_place(txn: Txn, cmd: ObserveAndPlace) -> ObservedAndClaimed:
    if not isinstance(cmd.observe, Observe) or not isinstance(cmd.authority, Authority):
        raise InvalidCommand("observe_and_place: needs an Observe and an Authority")
    placed = _check_placements(cmd.placements)
    report = _observe(txn, cmd.observe)

    def claim_on_placed_worker(schedule_id: int, occurrence_id: int) -> ClaimOccurrence | str:
        worker = placed.get(schedule_id)
        if worker is None:
            return "placement: no worker placed for its schedule"
        one = ObserveAndClaim(cmd.observe, cmd.epoch, cmd.namespace, worker, cmd.authority)
        return _claim_now(txn, one, occurrence_id)

    return _claim_created(txn, report, claim_on_placed_worker)


def _placements_to_json(value: tuple[tuple[int, str], ...]) -> list[list[object]]:
    return [[schedule_id, worker] for schedule_id, worker in value]


def _placements_from_json(value: object) -> tuple[tuple[int, str], ...]:
    if not isinstance(value, list):
        raise InvalidCommand("placements: must be a list")
    return tuple(tuple(pair) if isinstance(pair, list) else pair for pair in value)  # type: ignore[misc]


register_command_type(
    ObserveAndPlace,
    {
        "observe": (_observe_to_json, _observe_from_json),
        "authority": (_authority_to_json, _authority_from_json),
        "placements": (_placements_to_json, _placements_from_json),
    },
)
