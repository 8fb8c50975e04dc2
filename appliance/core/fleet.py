"""The fleet's amendments: add, drain, undrain and remove a worker (issue 33).

Theory of operation
-------------------
The worker set is part of the sealed contract (``remote.workers``, or the one worker of
``remote.url`` + ``remote.worker_id``) and changes only by committed amendments, built like the
others (appliance/core/amendments.py): each carries ``base_amendment`` (a compare-and-set against
the amendment in force) and is recorded with its index in the ``contract/amended`` part.

* ``AddWorker`` — a new worker (id, origin, labels, the names of its credentials). The command
  carries the whole worker list in force after it; the apply checks it against the list the
  part holds once any fleet amendment wrote one (before that the list is the genesis, which
  every voter holds identically and the owner folds, as it does for the genesis url).
  Refused: an id that is in the fleet or was ever removed (a removed ``worker_id`` is never
  reused: its claims and permits may still be in the log, the checkpoint or a worker's store),
  an origin already in the fleet, more than ``FLEET_WORKERS_MAX`` workers.
* ``DrainWorker`` / ``UndrainWorker`` — no new placements on it / placements again. Live
  attempts finish where they are. Not part of the contract a config states (a drained worker is
  still configured): kept in the part's ``fleet`` member, not in the remote in force.
* ``RemoveWorker`` — the worker leaves the fleet. Refused while any attempt bound to it is
  claimed, Running, Unknown or Cancelling (checked here, at apply, over the committed claims: the
  owner's view may lag), and when it is the last worker. Its id joins ``removed`` for good.

History entries record deltas (``{"add_worker": {…}}``, ``{"remove_worker": id}``), so the part
stays small however often the fleet changes; the in-force list is the one full copy. A claim must
name a worker of the fleet in force that is neither draining nor removed
(``check_claim_worker`` in amendments.py).

Pure: no clock; every instant travels in the command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from appliance.core.amendments import (
    URL_BYTES_MAX,
    Amended,
    AmendmentRefused,
    _record,
    amendment_part,
)
from appliance.core.binding import IDENT_V2
from appliance.core.placement import check_labels, labels_json
from appliance.core.runner_parts import admission_of
from appliance.core.serialisation import register_command_type
from appliance.core.state_errors import InvalidCommand
from appliance.core.state_model import SchedulerState
from appliance.core.txn import Txn, _check_instant, register

FLEET_WORKERS_MAX: Final = 64  # the config's remote.workers limit
WORKER_KEYS: Final = ("worker_id", "url", "labels", "bearer_env", "admission_bearer_env")
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


# ---- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AddWorker:
    base_amendment: int
    at_s: int
    worker: dict[str, Any]  # one entry of remote.workers, as the contract seals it
    workers: tuple[dict[str, Any], ...]  # the fleet in force after it, in order


@dataclass(frozen=True)
class DrainWorker:
    base_amendment: int
    at_s: int
    worker_id: str


@dataclass(frozen=True)
class UndrainWorker:
    base_amendment: int
    at_s: int
    worker_id: str


@dataclass(frozen=True)
class RemoveWorker:
    base_amendment: int
    at_s: int
    worker_id: str
    workers: tuple[dict[str, Any], ...]  # the fleet in force after it, in order


# ---- reading the part ----------------------------------------------------------------------------


def fleet_state(state: SchedulerState) -> dict[str, list[str]]:
    """``{"draining": [...], "removed": [...]}`` (empty before the first fleet amendment)."""
    part = amendment_part(state.extra.get)
    fleet = (part or {}).get("fleet") or {}
    return {"draining": list(fleet.get("draining", ())), "removed": list(fleet.get("removed", ()))}


def workers_in_force(state: SchedulerState) -> list[dict[str, Any]] | None:
    """The worker list a fleet amendment wrote, or None (the genesis list is in force)."""
    part = amendment_part(state.extra.get)
    return None if part is None else part["in_force"].get("workers")


def needs_fleet_reader(state: SchedulerState) -> bool:
    """True once the checkpoint holds what a binary before the fleet cannot read: a fleet
    amendment, or a definition with ``placement``."""
    part = amendment_part(state.extra.get)
    return bool(state.placed_schedules) or (part is not None and "fleet" in part)


# ---- checks --------------------------------------------------------------------------------------


def check_worker(field: str, value: Any) -> dict[str, Any]:
    """One worker entry's shape and bounds (``InvalidCommand`` naming the field)."""
    if not isinstance(value, dict) or set(value) != set(WORKER_KEYS):
        raise InvalidCommand(f"{field}: must be an object with exactly {', '.join(WORKER_KEYS)}")
    worker_id = value["worker_id"]
    if not isinstance(worker_id, str) or IDENT_V2.fullmatch(worker_id) is None:
        raise InvalidCommand(
            f"{field}.worker_id: must be 1-128 characters of A-Za-z0-9_.- starting with a "
            "letter or digit"
        )
    url = value["url"]
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidCommand(f"{field}.url: must be an http:// or https:// URL")
    if len(url.encode()) > URL_BYTES_MAX:
        raise InvalidCommand(f"{field}.url: longer than {URL_BYTES_MAX} bytes")
    try:
        labels = check_labels(f"{field}.labels", value["labels"])
    except ValueError as err:
        raise InvalidCommand(str(err)) from None
    for name in ("bearer_env", "admission_bearer_env"):
        env = value[name]
        if env is not None and (not isinstance(env, str) or ENV_NAME.fullmatch(env) is None):
            raise InvalidCommand(f"{field}.{name}: must be null or an environment variable name")
    return {**value, "labels": labels_json(labels)}


def _check_list(workers: Any) -> list[dict[str, Any]]:
    if not isinstance(workers, tuple | list) or not 1 <= len(workers) <= FLEET_WORKERS_MAX:
        raise InvalidCommand(f"workers: must hold from 1 to {FLEET_WORKERS_MAX} workers")
    checked = [check_worker(f"workers[{i}]", w) for i, w in enumerate(workers)]
    for key in ("worker_id", "url"):
        values = [w[key] for w in checked]
        if len(set(values)) != len(values):
            raise InvalidCommand(f"workers: a {key} is given twice")
    return checked


def _fleet_of(txn: Txn) -> tuple[dict[str, Any], list[str], list[str]]:
    part = amendment_part(txn.extra) or {"amendment": 0, "in_force": {}, "history": []}
    fleet = part.get("fleet") or {}
    return part, list(fleet.get("draining", ())), list(fleet.get("removed", ()))


def _in_force_after(part: dict[str, Any], workers: list[dict[str, Any]]) -> dict[str, Any]:
    """The remote keys the fleet amendment sets: the list, and (the first time, on a one-worker
    genesis) ``url`` and ``worker_id`` cleared, so the remote in force is a fleet."""
    out: dict[str, Any] = {"workers": workers}
    if "workers" not in part["in_force"]:
        out.update(url=None, worker_id=None)
    return out


def _require_known(part: dict[str, Any], worker_id: Any, removed: list[str]) -> str:
    if not isinstance(worker_id, str) or IDENT_V2.fullmatch(worker_id) is None:
        raise InvalidCommand("worker_id: must be a worker identifier")
    if worker_id in removed:
        raise AmendmentRefused(f"worker_id: {worker_id} was removed from the fleet")
    listed = part["in_force"].get("workers")
    if listed is not None and worker_id not in {w["worker_id"] for w in listed}:
        raise AmendmentRefused(f"worker_id: {worker_id} is not a worker of the fleet in force")
    return worker_id


def bound_live_attempts(state: SchedulerState, worker_id: str) -> list[int]:
    """The occurrences whose current attempt is claimed (Running, Unknown or Cancelling) and
    bound to ``worker_id``, from the committed claims."""
    out = []
    for oid, record in state.occurrences.items():
        if not record.reserving:
            continue
        admission = admission_of(state.extra.get, oid)
        claim = None if admission is None else admission.claim_for(record.attempt)
        if claim is not None and claim.worker_id == worker_id:
            out.append(oid)
    return sorted(out)


# ---- applies -----------------------------------------------------------------------------------


# Adding (and draining) writes more of the contract part: they are growth commands, refused
# beyond the growth budget, so the part never eats the headroom completions rely on.
@register(AddWorker, grows=True)
def _add_worker(txn: Txn, cmd: AddWorker) -> Amended:
    _check_instant("at_s", cmd.at_s)
    worker = check_worker("worker", cmd.worker)
    if not isinstance(cmd.workers, tuple | list):
        raise InvalidCommand("workers: must be a list of workers")
    part, draining, removed = _fleet_of(txn)
    worker_id = worker["worker_id"]
    if worker_id in removed:
        raise AmendmentRefused(
            f"worker_id: {worker_id} was removed from the fleet; a removed worker_id is never "
            "reused (choose a new one)"
        )
    listed = part["in_force"].get("workers")
    if listed is None:  # the genesis fleet, as the owner folded it
        before = [check_worker(f"workers[{i}]", w) for i, w in enumerate(cmd.workers[:-1])]
    else:
        before = listed
    if worker_id in {w["worker_id"] for w in before}:
        raise AmendmentRefused(f"worker_id: {worker_id} is already a worker of the fleet")
    if worker["url"] in {w["url"] for w in before}:
        raise AmendmentRefused(f"url: {worker['url']} is already a worker's origin")
    workers = _check_list(cmd.workers)
    if workers != [*before, worker]:
        raise InvalidCommand("workers: must be the fleet in force followed by the new worker")
    return _record(
        txn,
        cmd.base_amendment,
        "add_worker",
        cmd.at_s,
        {"add_worker": worker},
        in_force=_in_force_after(part, workers),
        fleet={"draining": draining, "removed": removed},
    )


@register(DrainWorker, grows=True)
def _drain_worker(txn: Txn, cmd: DrainWorker) -> Amended:
    _check_instant("at_s", cmd.at_s)
    part, draining, removed = _fleet_of(txn)
    worker_id = _require_known(part, cmd.worker_id, removed)
    if worker_id in draining:
        raise AmendmentRefused(f"worker_id: {worker_id} is already draining")
    return _record(
        txn,
        cmd.base_amendment,
        "drain_worker",
        cmd.at_s,
        {"drain_worker": worker_id},
        in_force={},
        fleet={"draining": sorted([*draining, worker_id]), "removed": removed},
    )


@register(UndrainWorker)
def _undrain_worker(txn: Txn, cmd: UndrainWorker) -> Amended:
    _check_instant("at_s", cmd.at_s)
    part, draining, removed = _fleet_of(txn)
    worker_id = _require_known(part, cmd.worker_id, removed)
    if worker_id not in draining:
        raise AmendmentRefused(f"worker_id: {worker_id} is not draining")
    return _record(
        txn,
        cmd.base_amendment,
        "undrain_worker",
        cmd.at_s,
        {"undrain_worker": worker_id},
        in_force={},
        fleet={"draining": [w for w in draining if w != worker_id], "removed": removed},
    )


@register(RemoveWorker)
def _remove_worker(txn: Txn, cmd: RemoveWorker) -> Amended:
    _check_instant("at_s", cmd.at_s)
    part, draining, removed = _fleet_of(txn)
    worker_id = _require_known(part, cmd.worker_id, removed)
    workers = _check_list(cmd.workers)
    listed = part["in_force"].get("workers")
    if listed is not None and workers != [w for w in listed if w["worker_id"] != worker_id]:
        raise InvalidCommand("workers: must be the fleet in force without the removed worker")
    if worker_id in {w["worker_id"] for w in workers}:
        raise InvalidCommand(f"workers: still lists {worker_id}")
    live = bound_live_attempts(txn.state, worker_id)
    if live:
        shown = ", ".join(str(oid) for oid in live[:8]) + (" …" if len(live) > 8 else "")
        raise AmendmentRefused(
            f"worker_id: {len(live)} attempt(s) bound to {worker_id} are claimed, Running, "
            f"Unknown or Cancelling (occurrences {shown}); drain it, wait until they end (or "
            "acknowledge them) and remove it again"
        )
    return _record(
        txn,
        cmd.base_amendment,
        "remove_worker",
        cmd.at_s,
        {"remove_worker": worker_id},
        in_force=_in_force_after(part, workers),
        fleet={
            "draining": [w for w in draining if w != worker_id],
            "removed": sorted([*removed, worker_id]),
        },
    )


# ---- wire codecs ---------------------------------------------------------------------------------

_WORKERS_CODEC: Final = (list, lambda value: tuple(value) if isinstance(value, list) else value)


def _register() -> None:
    from appliance.core.serialisation import COMMAND_TYPES

    if "AddWorker" in COMMAND_TYPES:
        return
    register_command_type(AddWorker, {"workers": _WORKERS_CODEC})
    register_command_type(DrainWorker)
    register_command_type(UndrainWorker)
    register_command_type(RemoveWorker, {"workers": _WORKERS_CODEC})


_register()
