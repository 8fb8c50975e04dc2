"""Whether this binary, with this configuration, may open a store: a pure function of facts.

Every refusal says what differs and what the operator can do. There is no automatic migration:
the only ways forward are the binary that understands the store, the configuration it was sealed
with, or a new store: an empty data_dir for a worker, ``appliance admin store recover`` for a
voter (a voter that has run before must never start on an empty data_dir: it would vote on an
empty log; docs/voter-recovery.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.store.versions import KNOWN_SCHEMA_VERSIONS
from migrations_guard.facts import StoreFacts

PROBLEMS_SHOWN_MAX = 10


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reasons: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        if self.allowed:
            return "store accepted"
        return "store refused: " + " | ".join(self.reasons)


def differing_keys(stored: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Top-level keys whose values differ (or that only one side has), sorted."""
    keys = set(stored) | set(expected)
    return sorted(k for k in keys if stored.get(k, _MISSING) != expected.get(k, _MISSING))


_MISSING = object()


# What replaces a store this binary cannot open, by kind (docs/recovery.md).
VOTER_FRESH_START = (
    "move the data_dir aside and run `appliance admin store recover` for this voter (never "
    "start a voter that has run before on an empty data_dir: it would vote on an empty log; "
    "a single voter has no one to recover from and needs its backup; see docs/voter-recovery.md)"
)
WORKER_FRESH_START = (
    "move it aside and start with an empty data_dir (the worker loses its admission records, "
    "so first confirm that no accepted work is still running)"
)


def fresh_start(kind: str | None) -> str:
    if kind == "worker":
        return WORKER_FRESH_START
    if kind == "runner":
        return VOTER_FRESH_START
    return f"for a voter: {VOTER_FRESH_START}; for a worker: {WORKER_FRESH_START}"


def _damage_reason(facts: StoreFacts) -> str:
    shown = list(facts.problems[:PROBLEMS_SHOWN_MAX])
    more = len(facts.problems) - len(shown)
    if more > 0:
        shown.append(f"and {more} more")
    return (
        f"{facts.path} is damaged: " + "; ".join(shown) + ". Do not edit it by hand; restore "
        "this data_dir from a backup taken while the process was stopped, or "
        + fresh_start(facts.kind)
    )


def decide(
    facts: StoreFacts,
    expected_digest: str | None,
    binary_reader_version: int,
    *,
    expected_kind: str | None = None,
    expected_contract: dict[str, Any] | None = None,
) -> Decision:
    """Accept or refuse ``facts``.

    ``expected_digest`` is the digest of the configured contract (``None``: an offline check that
    only verifies the store on its own). ``expected_contract``, when given, lets a digest mismatch
    name the top-level keys that differ.
    """
    reasons: list[str] = []
    if facts.problems:
        reasons.append(_damage_reason(facts))
    if expected_kind is not None and facts.kind is not None and facts.kind != expected_kind:
        reasons.append(
            f"{facts.path} is a {facts.kind} store, not a {expected_kind} store; point data_dir "
            f"at the {expected_kind}'s own directory"
        )
    known = KNOWN_SCHEMA_VERSIONS.get(facts.kind or "", ())
    if facts.kind is not None and facts.schema_version not in known:
        reasons.append(
            f"{facts.path} has {facts.kind} schema version {facts.schema_version}, which this "
            f"binary does not know (it reads {', '.join(map(str, known))}); there is no automatic "
            f"migration: run the binary that created it (appliance {facts.created_by_version}) "
            f"or {fresh_start(facts.kind)}"
        )
    if facts.min_reader_version is not None and facts.min_reader_version > binary_reader_version:
        reasons.append(
            f"{facts.path} needs reader version {facts.min_reader_version} but this binary reads "
            f"up to {binary_reader_version}: the store holds states this binary cannot read (such "
            "as an unresolved Cancelling, a compacted log whose early entries live only in a "
            "snapshot, a pause, a jittered or updated schedule, or run_now request ids). Run a "
            "binary at least as new as the one that wrote it "
            f"(appliance {facts.created_by_version} or later), or resolve or acknowledge those "
            "occurrences with that binary before rolling back"
        )
    if (
        expected_digest is not None
        and facts.contract_digest is not None
        and facts.contract_digest != expected_digest
    ):
        detail = ""
        if facts.contract is not None and expected_contract is not None:
            keys = differing_keys(facts.contract, expected_contract)
            detail = f" (differing top-level keys: {', '.join(keys) or 'none'})"
        reasons.append(
            f"{facts.path} was sealed with contract digest {facts.contract_digest}, the "
            f"configuration gives {expected_digest}{detail}. The contract (voters, limits, "
            "initial schedules, remote) is fixed at first start and must be identical on every "
            "replica: restore the configuration it was sealed with, or " + fresh_start(facts.kind)
        )
    return Decision(allowed=not reasons, reasons=tuple(reasons))
