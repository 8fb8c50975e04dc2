"""The contract as genesis plus committed amendments: grant renewal, remote change, limits change.

Theory of operation
-------------------
The contract sealed at a store's creation is the *genesis*; every voter holds the same one (the
genesis digest is compared on every message between voters). Three replicated commands amend it:

* ``RenewGrant`` — a new ``remote.expires_at`` (at most ``GRANT_HORIZON_DAYS_MAX`` days ahead,
  checked when the owner builds it: ``check_grant_horizon``) and, within the binding's bounds, a
  new ``timeout_seconds`` / ``heap_mb`` / ``session``. New claims carry the amended authority;
  bindings already issued keep theirs (a claim's binding is never rewritten). A new
  ``timeout_seconds`` only while no attempt is live: the owner observes attempts until the
  timeout in force.
* ``AmendRemote`` — a new worker ``url`` and/or ``worker_id`` (identity rotation). Refused while
  any attempt is Running, Unknown or Cancelling: every such attempt is bound to the remote in
  force, and the owner talks to one remote, so changing it would strand them. Keeping the old
  remote for exactly those would need the dispatcher to route per attempt; refusing is simpler
  and the operator waits for (or acknowledges) the live attempts first.
* ``AmendLimits`` — new limits: raising always fits; lowering only when the current state fits
  (schedules, records, outstanding, running counted now).

Each command carries ``base_amendment``, the amendment index it was built on — the one the
operator read in ``status`` when they sent it, else the one in force when the owner built it: an
amendment built on a base that is no longer the one in force is refused (a compare-and-set), never
silently merged. The rule is in ``_record``, shared by every amendment kind. The core holds only
the *amended* values (``in_force``: the remote fields set by some amendment, latest wins); the
fields no amendment set are still the genesis, which the owner reads from the sealed contract.
So the apply can check exactly what it knows: a claim whose worker id or authority differs from an
amended value is refused (``binding_mismatch``). Limits live in the ``meta`` part as before, so
a limits amendment simply rewrites it (and ``history`` records it).

The part ``contract/amended`` keeps the index, the values in force and the last
``HISTORY_MAX`` amendments (kind, instant, what changed): a voter restarted with a config equal
to any of those committed states is accepted (appliance/owner/contract_state.py). An older binary
cannot decode the part, so while it exists the store's minimum reader version is
``READER_VERSION_AMENDED`` (appliance/runner/machine.py).

Pure: no clock; every instant travels in the command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from appliance.core.binding import (
    HEAP_MB_RANGE,
    TIMEOUT_SECONDS_RANGE,
    Binding,
    _check_int,
    _check_text,
    expires_at_s,
    instant_text,
)
from appliance.core.canonical import canonical_json
from appliance.core.limits import Limits, limits_to_json, parse_limits
from appliance.core.occurrence import INT_MAX
from appliance.core.runner_errors import BindingMismatch, RunnerRefusal
from appliance.core.serialisation import register_command_type
from appliance.core.state_errors import InvalidCommand
from appliance.core.state_model import SchedulerState
from appliance.core.state_parts import _PART_KINDS, register_part_kind
from appliance.core.txn import Txn, _check_instant, register

CONTRACT_KIND: Final = "contract"
CONTRACT_PART: Final = "contract/amended"
HISTORY_MAX: Final = 8
# The remote fields an amendment may set, as the sealed contract names them.
GRANT_FIELDS: Final = ("expires_at", "timeout_seconds", "heap_mb", "session")
REMOTE_FIELDS: Final = ("url", "worker_id")
# Every key an amendment may set in the sealed remote (issue 33 adds the fleet's ``workers``).
REMOTE_CONTRACT_KEYS: Final = (*GRANT_FIELDS, *REMOTE_FIELDS, "workers")
URL_BYTES_MAX: Final = 2048
# How far ahead a renewal may set the grant: five years (of 365.25 days, in whole days). A grant
# is a bound on how long the cluster may launch work without an operator looking again; a typo
# such as 9999-12-31 would remove it.
GRANT_HORIZON_DAYS_MAX: Final = 1826
GRANT_HORIZON_S_MAX: Final = GRANT_HORIZON_DAYS_MAX * 86_400


class AmendmentRefused(RunnerRefusal):
    code = "amendment_refused"


class StaleAmendment(AmendmentRefused):
    code = "stale_amendment"


# ---- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenewGrant:
    base_amendment: int
    expires_at: str
    at_s: int
    timeout_seconds: int | None = None
    heap_mb: int | None = None
    session: str | None = None


@dataclass(frozen=True)
class AmendRemote:
    base_amendment: int
    at_s: int
    url: str | None = None
    worker_id: str | None = None


@dataclass(frozen=True)
class AmendLimits:
    base_amendment: int
    limits: Limits
    at_s: int


@dataclass(frozen=True)
class Amended:
    """The value of an applied amendment: its index and what it set."""

    amendment: int
    kind: str
    changes: dict[str, Any]


# ---- the part ----------------------------------------------------------------------------------


def amendment_part(get: Any) -> dict[str, Any] | None:
    value = get(CONTRACT_PART)
    return value if isinstance(value, dict) else None


def amendment_index(state: SchedulerState) -> int:
    part = amendment_part(state.extra.get)
    return 0 if part is None else int(part["amendment"])


def remote_in_force(state: SchedulerState) -> dict[str, Any]:
    """The remote fields set by committed amendments (``{}`` before the first): the rest are the
    genesis contract's."""
    part = amendment_part(state.extra.get)
    return {} if part is None else dict(part["in_force"])


def history(state: SchedulerState) -> list[dict[str, Any]]:
    part = amendment_part(state.extra.get)
    return [] if part is None else list(part["history"])


def needs_amended_reader(state: SchedulerState) -> bool:
    return CONTRACT_PART in state.extra


def _record(
    txn: Txn,
    base: int,
    kind: str,
    at_s: int,
    changes: dict[str, Any],
    *,
    in_force: dict[str, Any] | None = None,
    fleet: dict[str, Any] | None = None,
) -> Amended:
    """Commit one amendment: the next index, the remote keys it sets (``in_force``: the keys of
    ``changes`` that are remote fields, unless given), its history entry (``changes``). The
    fleet's operational state (``fleet``: draining and removed worker ids, appliance/core/
    fleet.py) is carried along unchanged unless given."""
    _check_instant("at_s", at_s)
    part = amendment_part(txn.extra) or {"amendment": 0, "in_force": {}, "history": []}
    current = int(part["amendment"])
    if type(base) is not int or base != current:
        raise StaleAmendment(
            f"base_amendment: {base!r}, but the contract in force is amendment {current}; "
            "read status and amend again"
        )
    if current >= INT_MAX:
        raise InvalidCommand("amendment: the amendment index space is exhausted")
    index = current + 1
    remote_changes = (
        {k: v for k, v in changes.items() if k in REMOTE_CONTRACT_KEYS}
        if in_force is None
        else in_force
    )
    entry = {"amendment": index, "kind": kind, "at": instant_text(at_s), "changes": changes}
    value = {
        "amendment": index,
        "in_force": {**part["in_force"], **remote_changes},
        "history": [*part["history"], entry][-HISTORY_MAX:],
    }
    fleet_state = part.get("fleet") if fleet is None else fleet
    if fleet_state is not None:
        value["fleet"] = fleet_state
    txn.put_extra(CONTRACT_PART, value)
    return Amended(index, kind, changes)


def check_grant_horizon(expires_at: str, at_s: int) -> str:
    """``expires_at`` when it is at most ``GRANT_HORIZON_DAYS_MAX`` days after ``at_s`` (exactly
    at the horizon passes); ``AmendmentRefused`` naming the field otherwise.

    Checked when the owner builds a ``RenewGrant``, never in its apply: a voter of an earlier
    binary applies ``RenewGrant`` without this rule, and apply must stay identical on every voter
    (a rule added to an existing kind's apply would make voters of two binaries disagree)."""
    if expires_at_s(expires_at) - at_s > GRANT_HORIZON_S_MAX:
        raise AmendmentRefused(
            f"expires_at: {expires_at} is more than {GRANT_HORIZON_DAYS_MAX} days (5 years) after "
            f"now ({instant_text(at_s)}); renew for at most that, and again before it passes"
        )
    return expires_at


# ---- applies -----------------------------------------------------------------------------------


@register(RenewGrant)
def _renew_grant(txn: Txn, cmd: RenewGrant) -> Amended:
    _check_instant("at_s", cmd.at_s)
    if not isinstance(cmd.expires_at, str) or not cmd.expires_at.endswith("Z"):
        raise InvalidCommand("expires_at: must be an RFC 3339 instant in UTC (…Z)")
    if expires_at_s(cmd.expires_at) <= cmd.at_s:
        raise AmendmentRefused(
            f"expires_at: {cmd.expires_at} is not later than now ({instant_text(cmd.at_s)})"
        )
    changes: dict[str, Any] = {"expires_at": cmd.expires_at}
    if cmd.timeout_seconds is not None:
        _check_int("timeout_seconds", cmd.timeout_seconds, *TIMEOUT_SECONDS_RANGE)
        # The owner observes each attempt until the timeout in force, so it changes only while
        # no attempt is live (an attempt keeps the timeout of its binding).
        live = txn.state.counts().running
        if live:
            raise AmendmentRefused(
                f"timeout_seconds: {live} attempt(s) are Running, Unknown or Cancelling; renew "
                "without timeout_seconds, or change it once they ended"
            )
        changes["timeout_seconds"] = cmd.timeout_seconds
    if cmd.heap_mb is not None:
        _check_int("heap_mb", cmd.heap_mb, *HEAP_MB_RANGE)
        changes["heap_mb"] = cmd.heap_mb
    if cmd.session is not None:
        _check_text("session", cmd.session, empty=True)
        changes["session"] = cmd.session
    return _record(txn, cmd.base_amendment, "renew_grant", cmd.at_s, changes)


@register(AmendRemote)
def _amend_remote(txn: Txn, cmd: AmendRemote) -> Amended:
    _check_instant("at_s", cmd.at_s)
    changes: dict[str, Any] = {}
    if cmd.url is not None:
        if not isinstance(cmd.url, str) or not cmd.url.startswith(("http://", "https://")):
            raise InvalidCommand("url: must be an http:// or https:// URL")
        if len(cmd.url.encode()) > URL_BYTES_MAX:
            raise InvalidCommand(f"url: longer than {URL_BYTES_MAX} bytes")
        changes["url"] = cmd.url
    if cmd.worker_id is not None:
        _check_text("worker_id", cmd.worker_id)
        changes["worker_id"] = cmd.worker_id
    if not changes:
        raise InvalidCommand("amend_remote: give url, worker_id or both")
    part = amendment_part(txn.extra) or {"in_force": {}}
    if part["in_force"].get("workers") is not None:
        raise AmendmentRefused(
            "remote: the remote in force is a fleet (workers); change it with add_worker, "
            "drain_worker or remove_worker"
        )
    if cmd.worker_id in (part.get("fleet") or {}).get("removed", ()):
        raise AmendmentRefused(f"worker_id: {cmd.worker_id} was removed and is never reused")
    live = txn.state.counts().running
    if live:
        raise AmendmentRefused(
            f"remote: {live} attempt(s) bound to the current remote are Running, Unknown or "
            "Cancelling; wait until they end (or acknowledge them) and amend again"
        )
    return _record(txn, cmd.base_amendment, "amend_remote", cmd.at_s, changes)


@register(AmendLimits)
def _amend_limits(txn: Txn, cmd: AmendLimits) -> Amended:
    _check_instant("at_s", cmd.at_s)
    new = cmd.limits
    if not isinstance(new, Limits):
        raise InvalidCommand("limits: must be Limits")
    parse_limits(limits_to_json(new), "limits")  # ranges and running <= outstanding <= records
    counts = txn.state.counts()
    now = {
        "schedules": len(txn.state.schedules),
        "records": counts.records,
        "outstanding": counts.outstanding,
        "running": counts.running,
    }
    for field, count in now.items():
        if getattr(new, field) < count:
            raise AmendmentRefused(
                f"limits.{field}: {getattr(new, field)} is below the current {count}; "
                "lower it only once the state fits"
            )
    txn.limits = new
    changes = {"limits": limits_to_json(new)}
    return _record(txn, cmd.base_amendment, "amend_limits", cmd.at_s, changes)


# ---- the claim rule ----------------------------------------------------------------------------


def check_claim_contract(get: Any, binding: Binding) -> None:
    """A claim must carry the amended worker id and authority (the genesis ones otherwise)."""
    part = amendment_part(get)
    if part is None:
        return
    in_force = part["in_force"]
    for field, value in in_force.items():
        if field in GRANT_FIELDS:
            carried = getattr(binding.authority, field)
            name = f"authority.{field}"
        elif field == "worker_id" and value is not None:
            carried, name = binding.worker_id, "worker_id"
        else:
            # The url is where the owner sends, not part of the binding; a fleet's workers
            # (and a worker_id a fleet amendment cleared) are checked by check_claim_worker.
            continue
        if carried != value:
            raise BindingMismatch(
                f"binding.{name}: {carried!r} differs from the committed contract "
                f"(amendment {part['amendment']}: {value!r})"
            )
    check_claim_worker(part, binding.worker_id)


def check_claim_worker(part: dict[str, Any], worker_id: str) -> None:
    """A claim binds a worker of the fleet in force that takes new placements (issue 33): never a
    removed or draining one, and once a fleet amendment wrote the worker list, one of it (before
    that, the genesis workers are the owner's to know, as the genesis url is)."""
    fleet = part.get("fleet") or {}
    if worker_id in fleet.get("removed", ()):
        raise BindingMismatch(f"binding.worker_id: worker {worker_id!r} was removed from the fleet")
    if worker_id in fleet.get("draining", ()):
        raise BindingMismatch(
            f"binding.worker_id: worker {worker_id!r} is draining (no new placements)"
        )
    workers = part["in_force"].get("workers")
    if workers is not None and worker_id not in {w["worker_id"] for w in workers}:
        raise BindingMismatch(
            f"binding.worker_id: {worker_id!r} is not a worker of the fleet in force "
            f"(amendment {part['amendment']})"
        )


# ---- wire codecs -------------------------------------------------------------------------------


def _limits_from_json(value: Any) -> Limits:
    if not isinstance(value, dict) or set(value) != set(limits_to_json(Limits())):
        raise InvalidCommand("limits: must give every limits field")
    if any(type(v) is not int for v in value.values()):
        raise InvalidCommand("limits: every field must be an integer")
    return Limits(**value)


def _register() -> None:
    if CONTRACT_KIND in _PART_KINDS:
        return
    register_part_kind(CONTRACT_KIND, lambda value: len(canonical_json(value)))
    register_command_type(RenewGrant)
    register_command_type(AmendRemote)
    register_command_type(AmendLimits, {"limits": (limits_to_json, _limits_from_json)})


_register()
