"""The owner's half of a contract amendment: check and normalize the operator's arguments.

Theory of operation: an amendment row of the command table (``renew_grant``, ``amend_remote``,
``amend_limits``) builds its core command from the arguments plus ``base_amendment``: the one the
operator sent (the index ``status`` showed them; the CLI always sends it), else the index of the
amendment in force when the owner read the committed state. The apply refuses the command if
another amendment committed since that base (appliance/core/amendments.py), so two operators never
overwrite each other unseen. Values are normalized here the way the sealed contract writes them
(the expiry in UTC with ``Z``, the worker origin without a default port), so a config file equal
to an amended contract digests equal to it, and checked against the config's own rules (so
every committed contract is also a valid config). Every problem is a 400 naming the field.
"""

from __future__ import annotations

from typing import Any

from appliance.commands.operator import OperatorError
from appliance.config.common import IDENT_BYTES_MAX, IDENT_PATTERN
from appliance.config.rfc3339 import parse_rfc3339
from appliance.config.runner import SESSION_BYTES_MAX, SESSION_PATTERN, RemoteConfig
from appliance.config.urls import OriginError, parse_origin
from appliance.core import state as core
from appliance.core.errors import InvalidConfig
from appliance.core.limits import limits_to_json, parse_limits
from appliance.owner.contract_state import normalized_expiry, remote_in_force
from appliance.owner.fleet_args import FLEET_ACTIONS, EnvCheck, fleet_args


def _bad(field: str, message: str) -> OperatorError:
    return OperatorError(400, "invalid_command", f"{field}: {message}")


def _text(args: dict[str, Any], field: str, pattern: Any, bytes_max: int, what: str) -> None:
    value = args.get(field)
    if value is None:
        return
    if (
        not isinstance(value, str)
        or pattern.fullmatch(value) is None
        or len(value.encode()) > bytes_max
    ):
        raise _bad(field, f"must be {what}, at most {bytes_max} bytes")


def amendment_args(
    action: str,
    args: dict[str, Any],
    state: core.SchedulerState,
    genesis: RemoteConfig | None = None,
    check_env: EnvCheck | None = None,
) -> dict[str, Any]:
    """``args`` checked and normalized, with ``base_amendment`` (the operator's, passed through,
    or the amendment in force) and, for ``amend_limits``, the full ``limits`` (fields left out
    keep their value); for the fleet's actions, what appliance/owner/fleet_args.py adds, from
    ``genesis`` and the committed amendments."""
    if action in FLEET_ACTIONS:
        if genesis is None:
            raise _bad("worker_id", "the fleet in force is not known here")
        out = fleet_args(action, args, state, genesis, check_env)
        base = args.get("base_amendment")
        out["base_amendment"] = core.amendment_index(state) if base is None else base
        return out
    out = {k: v for k, v in args.items() if v is not None}
    # The operator's base when given (the apply refuses it if stale), else the one in force.
    out.setdefault("base_amendment", core.amendment_index(state))
    if action == "renew_grant":
        text = out.get("expires_at")
        if not isinstance(text, str):
            raise _bad("expires_at", "must be an RFC 3339 instant with an offset")
        try:
            out["expires_at"] = normalized_expiry(text)
            parse_rfc3339(out["expires_at"])
        except ValueError as err:
            raise _bad("expires_at", str(err)) from None
        _text(out, "session", SESSION_PATTERN, SESSION_BYTES_MAX, "printable ASCII, no spaces")
    elif action == "amend_remote":
        if genesis is not None and remote_in_force(genesis, state).workers:
            raise _bad(
                "url",
                "the remote is a fleet (workers): change it with add_worker, drain_worker, "
                "undrain_worker or remove_worker",
            )
        if "url" not in out and "worker_id" not in out:
            raise _bad("url", "give url, worker_id or both")
        if "url" in out:
            if not isinstance(out["url"], str):
                raise _bad("url", "must be a string")
            try:
                out["url"] = parse_origin(out["url"]).url
            except OriginError as err:
                raise _bad("url", str(err)) from None
        _text(out, "worker_id", IDENT_PATTERN, IDENT_BYTES_MAX, "an identifier (A-Za-z0-9_.-)")
    elif action == "amend_limits":
        given = {k: out.pop(k) for k in list(out) if k in limits_to_json(state.limits)}
        if not given:
            raise _bad("limits", "give at least one limits field")
        try:
            out["limits"] = parse_limits({**limits_to_json(state.limits), **given}, "limits")
        except InvalidConfig as err:
            path, message = err.problems[0]
            raise _bad(path, message) from None
        if out["limits"] == state.limits:
            raise _bad("limits", "the given values are the limits in force")
    return out
