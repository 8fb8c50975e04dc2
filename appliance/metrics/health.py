"""Cluster health as one document, and the warnings an operator must act on.

Theory of operation. ``health_document`` is a pure function of what one voter knows at one
instant: its own Raft status, the probed peers, the replicated state figures, whether it holds
acquired ownership, the worker probe and the grant's remaining seconds. The warnings are the
conditions that need a human, each with a stable ``code`` (for scripts and alert rules), a
``severity`` (``critical``, ``warning``, ``notice``) and a sentence (for people).

The warnings are a small framework: each is produced by a rule, a pure function of
``HealthInputs`` registered with ``@warning_rule``; ``warnings_for`` runs every rule and sorts the
result most severe first. Another area adds a warning by writing one rule (and, if it needs an
input the document does not have yet, putting it in ``HealthInputs.extra`` by name). The rules
here:

- ``no_quorum`` (critical): fewer reachable voters (this one included) than a majority — no
  mutation, no admission, no new schedule can commit;
- ``quorum_at_risk`` (warning): exactly a majority is reachable — one more loss stops everything;
- ``voter_unreachable`` (warning): one per peer that does not answer the probe;
- ``no_leader`` (critical): this voter knows no leader (an election is running or quorum is gone);
- ``grant_expired`` (critical) / ``grant_expiring``: the grant in force (the genesis
  ``remote.expires_at`` or the latest committed ``renew_grant``) has passed / is under
  30 days (notice), 7 days (warning) or 1 day (critical) away — after it no permit is granted and
  nothing runs;
- ``checkpoint_near_cap``: the checkpoint budget is at or above ``CHECKPOINT_WARNING_BYTES`` (80 %
  of the 4 MiB cap) — creation and observation will soon be refused;
- ``paused`` (warning): an operator paused scheduling (``admin pause``): nothing is selected or
  started until ``resume``;
- ``unknown_occurrences``: Unknown records hold running reservations until the engine's outcome
  arrives or an operator acknowledges them (``acknowledge_stopped``), never by themselves;
- ``worker_unreachable`` / ``worker_refuses_bearer``: dispatch cannot succeed;
- ``compaction_behind``: the Raft log holds over twice what compaction keeps it to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from appliance.core.limits import CHECKPOINT_BYTES_MAX
from appliance.metrics.runner import StateFigures, VoterView

DAY_S: Final = 24 * 3600
# (days left under which the grant is warned, severity); the first matching tier wins.
GRANT_TIERS: Final = ((1, "critical"), (7, "warning"), (30, "notice"))
GRANT_WARNING_S: Final = 30 * DAY_S  # the earliest tier
CHECKPOINT_WARNING_BYTES: Final = CHECKPOINT_BYTES_MAX * 4 // 5  # 80 % of the cap
UNKNOWN_IDS_SHOWN_MAX: Final = 16


@dataclass(frozen=True)
class WorkerView:
    """The worker as the owner sees it: ``reachable`` (an HTTP answer), ``authorized``."""

    url: str
    reachable: bool
    authorized: bool
    detail: str = ""
    worker_id: str | None = None  # set for a fleet's worker (issue 33)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": self.url,
            "reachable": self.reachable,
            "authorized": self.authorized,
            "detail": self.detail,
        }
        if self.worker_id is not None:
            out["worker_id"] = self.worker_id
        return out


@dataclass(frozen=True)
class HealthInputs:
    node_id: str
    raft: dict[str, Any]
    peers: list[VoterView]
    figures: StateFigures
    unknown_ids: list[int]
    acquired_epoch: int | None
    grant_expires_at: str
    grant_seconds_left: float
    worker: WorkerView | None
    voters_total: int
    # Every worker of the fleet in force, probed (issue 33); ``worker`` is the first of them.
    workers: list[WorkerView] = field(default_factory=list)
    # Inputs other areas' warning rules need (e.g. growth, reconfiguration), by name.
    extra: dict[str, Any] = field(default_factory=dict)
    compaction_behind: str | None = None  # issue 19: the log grows faster than it is compacted
    store_bytes: int | None = None  # the runner store on disk (database, -wal, -shm)
    log_entries: int | None = None
    paused_at: str | None = None  # issue 35: since when scheduling is paused (RFC 3339), if it is


Severity = Literal["critical", "warning", "notice"]
SEVERITIES: Final = ("critical", "warning", "notice")  # most urgent first


@dataclass(frozen=True)
class HealthWarning:
    """One condition an operator must act on: a stable ``code``, how urgent, and a sentence."""

    code: str
    severity: Severity
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "message": self.message}


WarningRule = Callable[[HealthInputs], Iterable[HealthWarning]]
WARNING_RULES: list[WarningRule] = []


def warning_rule(rule: WarningRule) -> WarningRule:
    """Register ``rule`` (a pure function of ``HealthInputs``); the order of registration is the
    order of its warnings within one severity. Other areas add their rules with this decorator
    in a module imported by ``appliance.metrics`` users (see the module docstring)."""
    WARNING_RULES.append(rule)
    return rule


def warnings_for(
    h: HealthInputs, rules: Sequence[WarningRule] | None = None
) -> list[dict[str, str]]:
    """Every rule's warnings, most severe first (stable within a severity)."""
    found = [w for rule in (WARNING_RULES if rules is None else rules) for w in rule(h)]
    found.sort(key=lambda w: SEVERITIES.index(w.severity))
    return [w.to_json() for w in found]


def _majority(h: HealthInputs) -> tuple[int, int]:
    return 1 + sum(1 for p in h.peers if p.reachable), h.voters_total // 2 + 1


@warning_rule
def _quorum(h: HealthInputs) -> Iterator[HealthWarning]:
    reachable, majority = _majority(h)
    if reachable < majority:
        yield HealthWarning(
            "no_quorum",
            "critical",
            f"only {reachable} of {h.voters_total} voters reachable from {h.node_id}; "
            f"{majority} are needed to commit anything",
        )
    elif h.voters_total > 1 and reachable == majority:
        yield HealthWarning(
            "quorum_at_risk",
            "warning",
            f"{reachable} of {h.voters_total} voters reachable from {h.node_id}, exactly a "
            "majority: losing one more stops every mutation and admission",
        )


@warning_rule
def _unreachable_voters(h: HealthInputs) -> Iterator[HealthWarning]:
    for peer in h.peers:
        if not peer.reachable:
            yield HealthWarning(
                "voter_unreachable",
                "warning",
                f"voter {peer.node_id} does not answer {h.node_id}'s probe; check its process "
                "and the network path to its cluster port",
            )


@warning_rule
def _leader(h: HealthInputs) -> Iterator[HealthWarning]:
    if not h.raft.get("leader_id"):
        yield HealthWarning("no_leader", "critical", f"{h.node_id} knows no Raft leader")


@warning_rule
def _grant(h: HealthInputs) -> Iterator[HealthWarning]:
    left_s = h.grant_seconds_left
    if left_s <= 0:
        yield HealthWarning(
            "grant_expired",
            "critical",
            f"remote.expires_at ({h.grant_expires_at}) has passed: no permit is granted",
        )
        return
    for days, severity in GRANT_TIERS:
        if left_s < days * DAY_S:
            yield HealthWarning(
                "grant_expiring",
                severity,
                f"remote.expires_at ({h.grant_expires_at}) is {left_s / DAY_S:.1f} days away "
                f"(under {days}); renew the grant before it passes (appliance admin renew-grant)",
            )
            return


@warning_rule
def _paused(h: HealthInputs) -> Iterator[HealthWarning]:
    if h.paused_at is not None:
        yield HealthWarning(
            "paused",
            "warning",
            f"scheduling is paused cluster-wide since {h.paused_at}: no occurrence is selected or "
            "started (running work continues); next runs are held until "
            "'appliance admin resume'",
        )


@warning_rule
def _checkpoint(h: HealthInputs) -> Iterator[HealthWarning]:
    budget = h.figures.budget_bytes
    if budget >= CHECKPOINT_WARNING_BYTES:
        yield HealthWarning(
            "checkpoint_near_cap",
            "warning",
            f"the checkpoint budget is {budget} of {CHECKPOINT_BYTES_MAX} bytes; delete "
            "schedules or lower limits.records before creation is refused",
        )


@warning_rule
def _unknown(h: HealthInputs) -> Iterator[HealthWarning]:
    if h.unknown_ids:
        shown = ", ".join(str(i) for i in h.unknown_ids[:UNKNOWN_IDS_SHOWN_MAX])
        more = "" if len(h.unknown_ids) <= UNKNOWN_IDS_SHOWN_MAX else ", ..."
        yield HealthWarning(
            "unknown_occurrences",
            "warning",
            f"{len(h.unknown_ids)} Unknown occurrence(s) await an operator ({shown}{more}): "
            "establish that the work stopped, then acknowledge_stopped",
        )


@warning_rule
def _compaction(h: HealthInputs) -> Iterator[HealthWarning]:
    if h.compaction_behind:
        yield HealthWarning("compaction_behind", "warning", h.compaction_behind)


@warning_rule
def _worker(h: HealthInputs) -> Iterator[HealthWarning]:
    workers = h.workers or ([] if h.worker is None else [h.worker])
    # One unreachable worker of several is a warning (placement goes elsewhere); the only one,
    # or every one, is critical: nothing can run.
    every = all(not w.reachable for w in workers)
    for worker in workers:
        name = (
            f"worker {worker.worker_id} at {worker.url}"
            if worker.worker_id
            else (f"the worker at {worker.url}")
        )
        if not worker.reachable:
            severity: Severity = "critical" if every else "warning"
            yield HealthWarning("worker_unreachable", severity, f"{name} does not answer")
        elif not worker.authorized:
            yield HealthWarning("worker_refuses_bearer", "critical", f"{name} refuses the bearer")


def health_document(h: HealthInputs) -> dict[str, Any]:
    self_view = {
        "node": h.node_id,
        "reachable": True,
        "role": h.raft.get("role"),
        "term": h.raft.get("term"),
        "commit_index": h.raft.get("commit_index"),
        "applied_index": h.raft.get("applied_index"),
        "lag_entries": _own_lag(h.raft),
        "self": True,
    }
    return {
        "node": h.node_id,
        "leader": h.raft.get("leader_id"),
        "voters": [self_view, *({**p.to_json(), "self": False} for p in h.peers)],
        "ownership": {
            "node": h.figures.ownership_node,
            "epoch": h.figures.ownership_epoch,
            "acquired_here": h.acquired_epoch is not None,
        },
        "grant": {"expires_at": h.grant_expires_at, "seconds_left": int(h.grant_seconds_left)},
        "checkpoint": {
            "bytes": h.figures.checkpoint_bytes,
            "budget_bytes": h.figures.budget_bytes,
            "bytes_max": CHECKPOINT_BYTES_MAX,
        },
        "counts": {
            "records": h.figures.records,
            "outstanding": h.figures.outstanding,
            "running": h.figures.running,
            "by_state": h.figures.by_state,
        },
        "log": _log_view(h),
        "retention": {"retained_through": h.figures.retained_through},
        "unknown_occurrences": h.unknown_ids[:UNKNOWN_IDS_SHOWN_MAX],
        "paused": None if h.paused_at is None else {"since": h.paused_at},
        "worker": None if h.worker is None else h.worker.to_json(),
        "workers": [w.to_json() for w in h.workers],
        "warnings": warnings_for(h),
    }


def _log_view(h: HealthInputs) -> dict[str, Any]:
    """The replicated log's growth and compaction: the built-in Raft's store, or etcd's keys."""
    view = {
        "store_bytes": h.store_bytes,
        "entries": h.log_entries,
        "first_index": h.raft.get("log_first_index"),
        "last_index": h.raft.get("last_log_index"),
        "snapshot_index": h.raft.get("snapshot_index"),
        "snapshot_age_s": h.raft.get("snapshot_age_s"),
    }
    if h.raft.get("backend") == "etcd":  # the log keys under the prefix (docs/etcd.md)
        view["first_index"] = h.raft.get("first_log_index")
        view["last_index"] = h.raft.get("commit_index")
        view["snapshots_written"] = h.raft.get("snapshots_written")
        view["compact_revision"] = h.raft.get("compact_revision")
    return view


def _own_lag(raft: dict[str, Any]) -> int | None:
    commit, applied = raft.get("commit_index"), raft.get("applied_index")
    if isinstance(commit, int) and isinstance(applied, int):
        return max(0, commit - applied)
    return None
