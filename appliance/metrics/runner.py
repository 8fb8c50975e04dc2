"""A voter's Prometheus metrics: most collected at scrape time, a few recorded as events.

Theory of operation
-------------------
Almost everything an operator needs is already in state the voter keeps: the replicated scheduler
state (occurrences by state, per-schedule drop counters, the ownership epoch, the checkpoint size),
the replication status (role, term, commit and applied index) and the store. Those are read when
Prometheus scrapes, by :class:`RunnerCollector`, from a :class:`RunnerSource`; nothing is copied or
kept in step, so the numbers cannot drift from the state, and two voters that applied the same
commands report the same replicated numbers (drops, states, epoch) after a failover.

Only what happens *between* states needs recording as it happens, by :class:`RunnerMetrics`:
dispatch latency (due instant → engine accepted), admissions granted/refused by reason, proposal
commit latency, and the slots selected per schedule (seen through the machine's ``on_applied``
hook, so every voter counts the same committed selections). The runner calls the ``record_*``
methods; :mod:`appliance.metrics.hooks` derives them from the decision log and wraps the
replication, for a runner that has no explicit calls.

Cardinality is bounded: the only unbounded-looking label is the schedule id, and schedules are at
most ``limits.schedules`` (≤ 1024); ids of deleted schedules are pruned at scrape time. Nothing is
labelled by occurrence. Admission reasons are a closed set (the core's refusal codes plus
``not_owner``, ``uncertain`` and ``other``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from appliance.core import state as core
from appliance.core.limits import CHECKPOINT_BYTES_MAX
from appliance.core.occurrence import OccurrenceState

T = TypeVar("T")

RAFT_ROLES: Final = ("leader", "follower", "candidate")
ADMISSION_REASONS: Final = frozenset(
    {*core.ADMISSION_REFUSAL_CODES, "not_owner", "uncertain", "other"}
)
# Seconds; dispatch spans sub-second (a warm pool) to minutes (a catch-up after downtime).
DISPATCH_BUCKETS_S: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
COMMIT_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


@dataclass(frozen=True)
class VoterView:
    """One voter as seen from this one (the Raft status route of each peer)."""

    node_id: str
    reachable: bool
    role: str | None = None
    term: int | None = None
    commit_index: int | None = None
    applied_index: int | None = None
    lag_entries: int | None = None  # this voter's commit index minus the peer's applied index

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node_id,
            "reachable": self.reachable,
            "role": self.role,
            "term": self.term,
            "commit_index": self.commit_index,
            "applied_index": self.applied_index,
            "lag_entries": self.lag_entries,
        }


class RunnerSource(Protocol):
    """What the collector reads at scrape time (see ``appliance.metrics.wiring``)."""

    def raft_status(self) -> Mapping[str, Any]:
        """node_id, role, term, leader_id, commit_index, applied_index, last_log_index."""
        ...

    def read(self, fn: Callable[[core.SchedulerState], T]) -> T:
        """``fn`` applied to the replicated state under the machine's lock."""
        ...

    def acquired_epoch(self) -> int | None:
        """The epoch this voter holds as acquired owner, or None."""
        ...

    def grant_seconds_left(self) -> float:
        """Seconds until ``remote.expires_at`` on the runner's clock (negative once past)."""
        ...

    def log_entries(self) -> int | None:
        """Entries in the durable Raft log, or None when unknown."""
        ...

    def voters(self) -> list[VoterView]:
        """The other voters, probed (bounded, cached) — empty for a single voter."""
        ...


class RunnerMetrics:
    """The process registry of a voter and its event recorders (thread-safe)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.dispatch_latency = Histogram(
            "appliance_dispatch_latency_seconds",
            "Real seconds from a live slot's due instant to the engine accepting its first "
            "attempt (backfilled, caught-up, run_now and retried attempts are not counted here)",
            buckets=DISPATCH_BUCKETS_S,
            registry=self.registry,
        )
        # Issue 35: a backfill's 490,758 s in the histogram above made its p99 useless.
        self.backlog_latency = Histogram(
            "appliance_dispatch_backlog_latency_seconds",
            "Real seconds from the instant a backfilled, caught-up, run_now or retried attempt "
            "became runnable (its creation, or its retry's claim) to the engine accepting it",
            buckets=DISPATCH_BUCKETS_S,
            registry=self.registry,
        )
        self.admissions = Counter(
            "appliance_admissions",
            "Admission answers of this voter: result granted|refused, reason a closed set of codes",
            ["result", "reason"],
            registry=self.registry,
        )
        self.proposal_commit = Histogram(
            "appliance_proposal_commit_seconds",
            "Seconds from proposing a command to its commit and local apply on this voter",
            buckets=COMMIT_BUCKETS_S,
            registry=self.registry,
        )
        self.proposals = Counter(
            "appliance_proposals",
            "Proposals of this voter by outcome: committed, not_leader, lost, uncertain",
            ["outcome"],
            registry=self.registry,
        )
        # Paced dispatch (appliance/owner/pacing.py): claimed attempts held back until
        # the worker has room; a wait is never an Unknown and never a drop.
        self.capacity_waits = Counter(
            "appliance_dispatch_capacity_waits",
            "Claimed attempts this voter held back, unsent, until the worker had capacity",
            registry=self.registry,
        )
        self.waiting_for_capacity = Gauge(
            "appliance_dispatch_waiting_for_capacity",
            "Claimed attempts waiting, unsent, for the worker's capacity now (this owner)",
            registry=self.registry,
        )
        # The fleet (issue 33), labelled by ``worker`` (at most 64 workers in force).
        self.worker_claims = Counter(
            "appliance_worker_claims",
            "Attempts this voter claimed on each worker of the fleet (placement's choices)",
            ["worker"],
            registry=self.registry,
        )
        self.worker_reachable = Gauge(
            "appliance_worker_reachable",
            "1 while the worker answers this owner, 0 once it is unreachable (past the threshold)",
            ["worker"],
            registry=self.registry,
        )
        self.worker_failovers = Counter(
            "appliance_worker_failover_fences",
            "Attempts of an unreachable worker fenced without a permit and placed again",
            ["worker"],
            registry=self.registry,
        )
        self._lock = threading.Lock()
        self._selected: dict[int, int] = {}  # schedule id -> slots selected (pruned at scrape)
        self._workers_seen: set[str] = set()

    # -- event recorders (the runner calls these; see hooks.py for the derived form) --

    def record_dispatch_accepted(self, late_s: float, *, live: bool = True) -> None:
        histogram = self.dispatch_latency if live else self.backlog_latency
        histogram.observe(max(0.0, late_s))

    def record_admission(self, status: int, refusal: str | None = None) -> None:
        if status == 200:
            self.admissions.labels("granted", "none").inc()
            return
        if status == 409:
            reason = "not_owner"
        elif status == 503:
            reason = "uncertain"
        else:
            reason = refusal if refusal in ADMISSION_REASONS else "other"
        self.admissions.labels("refused", reason).inc()

    def record_capacity_wait(self, waiting: int, began: bool) -> None:
        """An attempt began waiting for the worker's capacity (``began``) or the count moved."""
        if began:
            self.capacity_waits.inc()
        self.waiting_for_capacity.set(max(0, waiting))

    def record_worker_claim(self, worker: str) -> None:
        self.worker_claims.labels(worker).inc()
        with self._lock:
            first = worker not in self._workers_seen
            self._workers_seen.add(worker)
        if first:  # a worker placement chose answers, as far as this owner knows
            self.worker_reachable.labels(worker).set(1)

    def record_worker_reachable(self, worker: str, reachable: bool) -> None:
        with self._lock:
            self._workers_seen.add(worker)
        self.worker_reachable.labels(worker).set(1 if reachable else 0)

    def record_worker_failover(self, worker: str) -> None:
        self.worker_failovers.labels(worker).inc()

    def record_proposal(self, seconds: float, outcome: str) -> None:
        self.proposals.labels(outcome).inc()
        if outcome == "committed":
            self.proposal_commit.observe(max(0.0, seconds))

    def on_applied(self, index: int, command: Any, result: Any) -> None:
        """``Machine.on_applied`` listener: count the slots each committed observation selected."""
        value = getattr(result, "value", None)
        if not isinstance(value, core.ObserveReport) or not value.created:
            return
        with self._lock:
            for schedule_id, _occurrence_id, _due_s in value.created:
                self._selected[schedule_id] = self._selected.get(schedule_id, 0) + 1

    def selected(self, live_schedule_ids: set[int]) -> dict[int, int]:
        """Slots selected per live schedule; forgets deleted schedules (bounded cardinality)."""
        with self._lock:
            for sid in [s for s in self._selected if s not in live_schedule_ids]:
                del self._selected[sid]
            return dict(self._selected)

    def attach(self, source: RunnerSource) -> RunnerCollector:
        collector = RunnerCollector(source, self)
        self.registry.register(collector)
        return collector


@dataclass(frozen=True)
class StateFigures:
    """What one scrape reads from the replicated state, under one lock acquisition."""

    by_state: dict[str, int]
    records: int
    outstanding: int
    running: int
    schedules: dict[int, tuple[bool, tuple[int, int, int]]]  # id -> (enabled, dropped)
    ownership_node: str | None
    ownership_epoch: int
    checkpoint_bytes: int
    budget_bytes: int
    retained_through: int = 0  # W: every occurrence id at or below it left the checkpoint


def state_figures(st: core.SchedulerState) -> StateFigures:
    counts = st.counts()
    owner = core.current_ownership(st)
    return StateFigures(
        by_state=dict(counts.by_state),
        records=counts.records,
        outstanding=counts.outstanding,
        running=counts.running,
        schedules={
            sid: (st.schedules[sid].enabled, st.progress[sid].dropped) for sid in st.schedules
        },
        ownership_node=None if owner is None else owner.node,
        ownership_epoch=0 if owner is None else owner.epoch,
        checkpoint_bytes=st.size_bytes,
        budget_bytes=st.budget_bytes,
        retained_through=st.retained_through(),
    )


def _gauge(name: str, doc: str, value: float | None) -> Iterator[GaugeMetricFamily]:
    if value is not None:
        yield GaugeMetricFamily(name, doc, value=value)


class RunnerCollector(Collector):
    """Scrape-time metrics of a voter, read from its ``RunnerSource``."""

    def __init__(self, source: RunnerSource, metrics: RunnerMetrics) -> None:
        self._source = source
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        yield from self._raft()
        figures = self._source.read(state_figures)
        yield from self._ownership(figures)
        yield from self._occurrences(figures)
        yield from self._schedules(figures)
        yield from self._store(figures)
        yield from _gauge(
            "appliance_grant_expiry_seconds",
            "Seconds until remote.expires_at (negative once expired: no permit is granted)",
            self._source.grant_seconds_left(),
        )

    def _raft(self) -> Iterator[Any]:
        status = self._source.raft_status()
        role = GaugeMetricFamily(
            "appliance_raft_role", "1 for this voter's current Raft role", labels=["role"]
        )
        for name in RAFT_ROLES:
            role.add_metric([name], 1.0 if status.get("role") == name else 0.0)
        yield role
        for key, doc in (
            ("term", "Current Raft term"),
            ("commit_index", "Highest log index known committed"),
            ("applied_index", "Highest log index applied to the local state"),
            ("last_log_index", "Index of the last entry in the local log"),
            ("snapshot_index", "Index the log is compacted to (first kept entry - 1)"),
            ("compactions", "Log compactions since this process started"),
            ("snapshots_installed", "Leader snapshots installed since this process started"),
            ("snapshot_age_s", "Seconds since the last compaction or snapshot install"),
        ):
            yield from _gauge(f"appliance_raft_{key}", doc, status.get(key))
        if status.get("backend") == "etcd":
            for key, doc in (
                ("first_log_index", "Lowest log key kept under the prefix (the rest is compacted)"),
                ("snapshots_written", "Snapshots this voter wrote into etcd (as the leader)"),
                ("compact_revision", "The revision etcd's history was last compacted to"),
            ):
                yield from _gauge(f"appliance_etcd_{key}", doc, status.get(key))
        reachable = GaugeMetricFamily(
            "appliance_raft_voter_reachable",
            "1 when the peer voter's Raft status route answered the last probe",
            labels=["voter"],
        )
        lag = GaugeMetricFamily(
            "appliance_raft_follower_lag_entries",
            "This voter's commit index minus the peer's applied index (reachable peers)",
            labels=["voter"],
        )
        for view in self._source.voters():
            reachable.add_metric([view.node_id], 1.0 if view.reachable else 0.0)
            if view.lag_entries is not None:
                lag.add_metric([view.node_id], float(view.lag_entries))
        yield reachable
        yield lag

    def _ownership(self, f: StateFigures) -> Iterator[Any]:
        yield GaugeMetricFamily(
            "appliance_ownership_epoch",
            "The replicated ownership epoch (0 before the first acquisition)",
            value=f.ownership_epoch,
        )
        acquired = self._source.acquired_epoch()
        yield GaugeMetricFamily(
            "appliance_ownership_acquired",
            "1 when this voter is the acquired owner (it schedules and admits)",
            value=1.0 if acquired is not None else 0.0,
        )

    def _occurrences(self, f: StateFigures) -> Iterator[Any]:
        by_state = GaugeMetricFamily(
            "appliance_occurrences", "Retained occurrence records by state", labels=["state"]
        )
        for state in OccurrenceState:
            by_state.add_metric([state.value], float(f.by_state.get(state.value, 0)))
        yield by_state
        yield GaugeMetricFamily(
            "appliance_occurrences_unknown",
            "Occurrences in Unknown: they hold a running reservation until an operator resolves "
            "them (acknowledge_stopped) or the engine's real outcome arrives",
            value=f.by_state.get(OccurrenceState.UNKNOWN.value, 0),
        )
        for key, doc in (
            ("records", "Retained occurrence records (limits.records)"),
            ("outstanding", "Non-terminal occurrence records (limits.outstanding)"),
            ("running", "Running + Cancelling + Unknown (limits.running)"),
        ):
            yield GaugeMetricFamily(f"appliance_occurrences_{key}", doc, value=getattr(f, key))

    def _schedules(self, f: StateFigures) -> Iterator[Any]:
        yield GaugeMetricFamily(
            "appliance_schedules", "Schedules defined (limits.schedules)", value=len(f.schedules)
        )
        dropped = CounterMetricFamily(
            "appliance_schedule_slots_dropped",
            "Calendar slots dropped per schedule and reason (missed, overlap, capacity); "
            "replicated, so every voter reports the same totals",
            labels=["schedule", "reason"],
        )
        for sid in sorted(f.schedules):
            for reason, count in zip(core.DROP_REASONS, f.schedules[sid][1], strict=True):
                dropped.add_metric([str(sid), reason.value], float(count))
        yield dropped
        selected = CounterMetricFamily(
            "appliance_schedule_slots_selected",
            "Calendar slots selected into occurrences per schedule (committed observations "
            "applied since this process started)",
            labels=["schedule"],
        )
        for sid, count in sorted(self._metrics.selected(set(f.schedules)).items()):
            selected.add_metric([str(sid)], float(count))
        yield selected

    def _store(self, f: StateFigures) -> Iterator[Any]:
        yield GaugeMetricFamily(
            "appliance_checkpoint_bytes",
            "Size of the checkpoint serialized as JSON",
            value=f.checkpoint_bytes,
        )
        yield GaugeMetricFamily(
            "appliance_checkpoint_budget_bytes",
            "Bytes the checkpoint may reach without another creation or observation",
            value=f.budget_bytes,
        )
        yield GaugeMetricFamily(
            "appliance_checkpoint_bytes_max",
            "The checkpoint cap (4 MiB)",
            value=CHECKPOINT_BYTES_MAX,
        )
        yield GaugeMetricFamily(
            "appliance_retained_through",
            "The retention floor W: every occurrence id at or below it left the checkpoint; the "
            "worker is told it and prunes its records at or below it (docs/worker.md)",
            value=f.retained_through,
        )
        yield from _gauge(
            "appliance_store_log_entries",
            "Entries in the durable Raft log",
            self._source.log_entries(),
        )
        store_bytes = getattr(self._source, "store_bytes", None)
        yield from _gauge(
            "appliance_store_bytes",
            "Bytes on disk of the runner store (database, -wal and -shm)",
            store_bytes() if store_bytes is not None else None,
        )
