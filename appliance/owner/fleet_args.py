"""The owner's half of a fleet amendment (issue 33): check the operator's arguments against the
fleet in force and build what the core command carries.

Theory of operation: ``add_worker`` and ``remove_worker`` carry the whole worker list in force
after the change, folded here from the genesis and the committed amendments (the apply checks it
against the list the checkpoint holds once a fleet amendment wrote one, and ``base_amendment``
makes the fold a compare-and-set). Values are normalized as the sealed contract writes them (the
origin without a default port, labels sorted), checked by the config's own rules (so every
committed contract is a valid config), and every problem is a 400 naming the field.

A worker's credentials are *named* (environment variables); every voter resolves them from its
own environment. ``check_env`` is the driver's answer to "can this voter use the variable?" (set,
header-safe, different from every other credential): a name it refuses is refused here, before
anything is proposed, so a committed worker is one this owner can talk to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.commands.operator import OperatorError
from appliance.config.common import ENV_NAME_PATTERN, IDENT_BYTES_MAX, IDENT_PATTERN
from appliance.config.contract import worker_to_json
from appliance.config.runner import WORKERS_MAX, RemoteConfig, WorkerSpec
from appliance.config.urls import OriginError, parse_origin
from appliance.core import state as core
from appliance.core.placement import labels_rule
from appliance.core.schema import INVALID, Problems
from appliance.owner.contract_state import remote_in_force

FLEET_ACTIONS = frozenset({"add_worker", "drain_worker", "undrain_worker", "remove_worker"})
EnvCheck = Callable[[str], str | None]  # why a variable cannot serve this voter, or None


def _bad(field: str, message: str) -> OperatorError:
    return OperatorError(400, "invalid_command", f"{field}: {message}")


def _worker_id(args: dict[str, Any]) -> str:
    value = args.get("worker_id")
    if (
        not isinstance(value, str)
        or IDENT_PATTERN.fullmatch(value) is None
        or len(value.encode()) > IDENT_BYTES_MAX
    ):
        raise _bad("worker_id", f"must be an identifier (A-Za-z0-9_.-), at most {IDENT_BYTES_MAX}")
    return value


def _env(args: dict[str, Any], field: str, check_env: EnvCheck | None) -> str | None:
    value = args.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or ENV_NAME_PATTERN.fullmatch(value) is None:
        raise _bad(field, "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    why = None if check_env is None else check_env(value)
    if why is not None:
        raise _bad(field, why)
    return value


def fleet_args(
    action: str,
    args: dict[str, Any],
    state: core.SchedulerState,
    genesis: RemoteConfig,
    check_env: EnvCheck | None = None,
) -> dict[str, Any]:
    """``args`` of a fleet action, checked against the fleet in force, with what its core
    command carries (``worker``, ``workers``)."""
    remote = remote_in_force(genesis, state)
    fleet = core.fleet_state(state)
    ids = [w.worker_id for w in remote.fleet]
    worker_id = _worker_id(args)
    out: dict[str, Any] = {"worker_id": worker_id}
    if action != "add_worker":
        if worker_id in fleet["removed"]:
            raise _bad("worker_id", f"{worker_id} was removed from the fleet")
        if worker_id not in ids:
            raise _bad("worker_id", f"{worker_id} is not a worker of the fleet ({', '.join(ids)})")
        if action == "remove_worker":
            if len(ids) == 1:
                raise _bad("worker_id", f"{worker_id} is the fleet's last worker")
            out["workers"] = [worker_to_json(w) for w in remote.fleet if w.worker_id != worker_id]
        return out
    if worker_id in fleet["removed"]:
        raise _bad("worker_id", f"{worker_id} was removed; a removed worker_id is never reused")
    if worker_id in ids:
        raise _bad("worker_id", f"{worker_id} is already a worker of the fleet")
    if len(ids) >= WORKERS_MAX:
        raise _bad("worker_id", f"the fleet holds {WORKERS_MAX} workers already")
    if not isinstance(args.get("url"), str):
        raise _bad("url", "must be the worker's origin, http(s)://host[:port]")
    try:
        url = parse_origin(args["url"])
    except OriginError as err:
        raise _bad("url", str(err)) from None
    if url in {w.url for w in remote.fleet}:
        raise _bad("url", f"{url.url} is already a worker's origin")
    problems = Problems()
    labels = labels_rule(args.get("labels") or {}, "labels", problems)
    if labels is INVALID:
        path, message = problems.items[0]
        raise _bad(path, message)
    worker = WorkerSpec(
        worker_id,
        url,
        labels,
        _env(args, "bearer_env", check_env),
        _env(args, "admission_bearer_env", check_env),
    )
    out["worker"] = worker_to_json(worker)
    out["workers"] = [*(worker_to_json(w) for w in remote.fleet), out["worker"]]
    return out
