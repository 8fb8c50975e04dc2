"""Cluster health as one document, and the warnings an operator must act on.

Theory of operation. ``health_document`` is a pure function of what one voter knows at one
instant: its own Raft status, the probed peers, the replicated state figures, whether it holds
acquired ownership, the worker probe and the grant's remaining seconds. The warnings are the
conditions that need a human, each with a stable ``code`` (for scripts and alert rules) and a
sentence (for people):

- ``no_quorum``: fewer reachable voters (this one included) than a majority — no mutation, no
  admission, no new schedule can commit;
- ``no_leader``: this voter knows no leader (an election is running or quorum is gone);
- ``grant_expired`` / ``grant_expiring``: ``remote.expires_at`` has passed / is less than
  ``GRANT_WARNING_S`` (7 days) away — after it no permit is granted and nothing runs;
- ``checkpoint_near_cap``: the checkpoint budget is at or above ``CHECKPOINT_WARNING_BYTES`` (80 %
  of the 4 MiB cap) — creation and observation will soon be refused;
- ``unknown_occurrences``: Unknown records hold running reservations until the engine's outcome
  arrives or an operator acknowledges them (``acknowledge_stopped``), never by themselves;
- ``worker_unreachable`` / ``worker_refuses_bearer``: dispatch cannot succeed;
- ``compaction_behind``: the Raft log holds over twice what compaction keeps it to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from appliance.core.limits import CHECKPOINT_BYTES_MAX
from appliance.metrics.runner import StateFigures, VoterView

GRANT_WARNING_S: Final = 7 * 24 * 3600
CHECKPOINT_WARNING_BYTES: Final = CHECKPOINT_BYTES_MAX * 4 // 5  # 80 % of the cap
UNKNOWN_IDS_SHOWN_MAX: Final = 16


@dataclass(frozen=True)
class WorkerView:
    """The worker as the owner sees it: ``reachable`` (an HTTP answer), ``authorized``."""

    url: str
    reachable: bool
    authorized: bool
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "reachable": self.reachable,
            "authorized": self.authorized,
            "detail": self.detail,
        }


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
    compaction_behind: str | None = None  # issue 19: the log grows faster than it is compacted
    store_bytes: int | None = None  # the runner store on disk (database, -wal, -shm)
    log_entries: int | None = None


def _warning(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


def warnings_for(h: HealthInputs) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    reachable = 1 + sum(1 for p in h.peers if p.reachable)
    majority = h.voters_total // 2 + 1
    if reachable < majority:
        out.append(
            _warning(
                "no_quorum",
                f"only {reachable} of {h.voters_total} voters reachable from {h.node_id}; "
                f"{majority} are needed to commit anything",
            )
        )
    if not h.raft.get("leader_id"):
        out.append(_warning("no_leader", f"{h.node_id} knows no Raft leader"))
    if h.grant_seconds_left <= 0:
        out.append(
            _warning(
                "grant_expired",
                f"remote.expires_at ({h.grant_expires_at}) has passed: no permit is granted",
            )
        )
    elif h.grant_seconds_left < GRANT_WARNING_S:
        days = h.grant_seconds_left / 86400
        out.append(
            _warning(
                "grant_expiring",
                f"remote.expires_at ({h.grant_expires_at}) is {days:.1f} days away; renew the "
                "grant before it passes",
            )
        )
    budget = h.figures.budget_bytes
    if budget >= CHECKPOINT_WARNING_BYTES:
        out.append(
            _warning(
                "checkpoint_near_cap",
                f"the checkpoint budget is {budget} of {CHECKPOINT_BYTES_MAX} bytes; delete "
                "schedules or lower limits.records before creation is refused",
            )
        )
    if h.unknown_ids:
        shown = ", ".join(str(i) for i in h.unknown_ids[:UNKNOWN_IDS_SHOWN_MAX])
        more = "" if len(h.unknown_ids) <= UNKNOWN_IDS_SHOWN_MAX else ", ..."
        out.append(
            _warning(
                "unknown_occurrences",
                f"{len(h.unknown_ids)} Unknown occurrence(s) await an operator ({shown}{more}): "
                "establish that the work stopped, then acknowledge_stopped",
            )
        )
    if h.compaction_behind:
        out.append(_warning("compaction_behind", h.compaction_behind))
    if h.worker is not None and not h.worker.reachable:
        out.append(_warning("worker_unreachable", f"the worker at {h.worker.url} does not answer"))
    elif h.worker is not None and not h.worker.authorized:
        out.append(
            _warning("worker_refuses_bearer", f"the worker at {h.worker.url} refuses the bearer")
        )
    return out


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
        "log": {
            "store_bytes": h.store_bytes,
            "entries": h.log_entries,
            "first_index": h.raft.get("log_first_index"),
            "last_index": h.raft.get("last_log_index"),
            "snapshot_index": h.raft.get("snapshot_index"),
            "snapshot_age_s": h.raft.get("snapshot_age_s"),
        },
        "unknown_occurrences": h.unknown_ids[:UNKNOWN_IDS_SHOWN_MAX],
        "worker": None if h.worker is None else h.worker.to_json(),
        "warnings": warnings_for(h),
    }


def _own_lag(raft: dict[str, Any]) -> int | None:
    commit, applied = raft.get("commit_index"), raft.get("applied_index")
    if isinstance(commit, int) and isinstance(applied, int):
        return max(0, commit - applied)
    return None
