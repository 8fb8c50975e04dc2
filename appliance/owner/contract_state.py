"""The contract in force: the sealed genesis with the committed amendments folded in.

Theory of operation: the core keeps only what amendments set (appliance/core/amendments.py); the
fields no amendment touched are the genesis, which every voter holds identically (the sealed
contract, compared by digest on every message between voters). This module folds the two for the
owner (``remote_in_force``: the worker URL, identity and authority new claims use; limits are the
state's own) and for startup (``committed_contracts``: every committed state of the contract the
checkpoint still remembers, so a voter restarted with its genesis config or with a config equal
to any of them starts and says which one it runs).

Everything here reads committed state; nothing reads the config file for these values except the
genesis fallback, which the digest check makes identical to the sealed one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from appliance.config.contract import worker_from_json
from appliance.config.rfc3339 import format_utc, parse_rfc3339
from appliance.config.runner import RemoteConfig
from appliance.config.urls import parse_origin
from appliance.core import state as core
from appliance.core.amendments import REMOTE_CONTRACT_KEYS, amendment_part
from appliance.core.limits import limits_to_json


def remote_in_force(genesis: RemoteConfig, state: core.SchedulerState) -> RemoteConfig:
    """``genesis`` with every committed remote amendment applied (latest wins); a fleet
    amendment replaces ``url`` + ``worker_id`` by the worker list in force (issue 33)."""
    amended = core.remote_in_force(state)
    if not amended:
        return genesis
    changes: dict[str, Any] = {}
    for field, value in amended.items():
        if field == "url":
            changes["url"] = None if value is None else parse_origin(value)
        elif field == "expires_at":
            changes["expires_at"] = parse_rfc3339(value)
        elif field == "workers":
            changes["workers"] = tuple(worker_from_json(w) for w in value)
        else:
            changes[field] = value
    return replace(genesis, **changes)


def fleet_view(genesis: RemoteConfig, state: core.SchedulerState) -> list[dict[str, Any]]:
    """Every worker in force with its labels and whether it takes new placements: what
    ``status``, health and ``admin list`` show (the owner adds reachability)."""
    remote = remote_in_force(genesis, state)
    draining = set(core.fleet_state(state)["draining"])
    return [
        {
            "worker_id": w.worker_id,
            "url": w.url.url,
            "labels": dict(w.labels),
            "state": "draining" if w.worker_id in draining else "active",
        }
        for w in remote.fleet
    ]


def normalized_expiry(text: str) -> str:
    """An operator's RFC 3339 instant as the contract writes it (UTC, ``Z``, whole seconds), so
    what the amendment commits equals what every claim formats (``format_utc``)."""
    return format_utc(parse_rfc3339(text))


def contract_summary(genesis: RemoteConfig, state: core.SchedulerState) -> dict[str, Any]:
    """What ``status`` shows: the amendment index, what is in force and the latest amendment
    (``admin store inspect`` shows the remembered history)."""
    remote = remote_in_force(genesis, state)
    part = amendment_part(state.extra.get)
    fleet = core.fleet_state(state)
    return {
        "amendment": 0 if part is None else part["amendment"],
        "grant_expires_at": format_utc(remote.expires_at),
        "remote": {
            # The one-worker form keeps its two fields; a fleet lists its workers instead.
            **(
                {"url": remote.url.url, "worker_id": remote.worker_id}
                if not remote.workers and remote.url is not None
                else {"workers": [w.worker_id for w in remote.workers]}
            ),
            "draining": fleet["draining"],
            "removed": fleet["removed"],
            "timeout_seconds": remote.timeout_seconds,
            "heap_mb": remote.heap_mb,
            "session": remote.session,
        },
        "limits": limits_to_json(state.limits),
        "last_amendment": _last(part),
    }


def _last(part: dict[str, Any] | None) -> dict[str, Any] | None:
    if part is None or not part["history"]:
        return None
    entry = part["history"][-1]
    return {"amendment": entry["amendment"], "kind": entry["kind"], "at": entry["at"]}


def _fold(contract: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``contract`` with one amendment's changes (or the keys in force) applied. A remote key
    set to None is cleared (a fleet amendment clears ``url`` and ``worker_id``); the fleet's
    deltas add or remove a worker; drain state is not part of a config, so it is skipped."""
    out = {**contract, "remote": dict(contract["remote"])}
    remote = out["remote"]
    for field, value in changes.items():
        if field == "limits":
            out["limits"] = dict(value)
        elif field in ("add_worker", "remove_worker"):
            remote["workers"] = _fold_fleet(remote, field, value)
            remote.pop("url", None)
            remote.pop("worker_id", None)
        elif field not in REMOTE_CONTRACT_KEYS:
            continue  # drain_worker / undrain_worker
        elif value is None:
            remote.pop(field, None)
        else:
            remote[field] = value
    return out


def _fold_fleet(remote: dict[str, Any], kind: str, value: Any) -> list[dict[str, Any]]:
    workers = remote.get("workers")
    if workers is None:  # a one-worker remote becomes a fleet of that worker
        workers = [
            {
                "worker_id": remote.get("worker_id"),
                "url": remote.get("url"),
                "labels": {},
                "bearer_env": None,
                "admission_bearer_env": None,
            }
        ]
    if kind == "add_worker":
        return [*workers, value]
    return [w for w in workers if w["worker_id"] != value]


def committed_contracts(
    genesis: dict[str, Any], part: dict[str, Any] | None, limits_now: dict[str, Any]
) -> list[tuple[int, dict[str, Any]]]:
    """(amendment index, sealed-contract JSON) for the genesis (index 0), each committed
    amendment the part remembers and, always, the one in force. Once the history dropped its
    oldest entries the states before them cannot be rebuilt, so only the genesis and the states
    from the in-force one back are listed."""
    if part is None:
        return [(0, genesis)]
    history = part["history"]
    in_force = _fold(genesis, {**part["in_force"], "limits": limits_now})
    if not history or history[0]["amendment"] != 1:
        return [(0, genesis), (part["amendment"], in_force)]
    states = [(0, genesis)]
    contract = genesis
    for entry in history:
        contract = _fold(contract, entry["changes"])
        states.append((entry["amendment"], contract))
    return states


def differing_fields(expected: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """Dotted names (``remote.url``, ``limits.records``, ``voters``) where two contracts differ."""
    out: list[str] = []
    for key in sorted(set(expected) | set(given)):
        a, b = expected.get(key), given.get(key)
        if isinstance(a, dict) and isinstance(b, dict) and key in ("remote", "limits"):
            out.extend(
                f"{key}.{sub}" for sub in sorted(set(a) | set(b)) if a.get(sub) != b.get(sub)
            )
        elif a != b:
            out.append(key)
    return out
