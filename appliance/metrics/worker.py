"""The worker's Prometheus metrics: engine outcomes, pool pressure and store sizes.

Theory of operation. Engine outcomes are events: the engine calls every listener on each
transition of an execution, and :class:`WorkerMetrics` counts the terminal ones by status (plus the
executions a new incarnation found unfinished and marked ``lost``). A terminal report also
carries the attempt's egress records (issue 32): each is counted by decision in
``appliance_egress_requests_total`` and, when it was sent, timed in
``appliance_egress_request_duration_seconds``; calls refused past ``max_requests`` count as
``refused``. Pool pressure and store sizes
are state, read at scrape time: ``Engine.stats()`` (running, queued, reserved, limits, saturation
and queueing counts) and a read-only connection to the worker's SQLite file (invocation records,
receipts, execution records and the bytes of captured output they hold). The read-only
connection never takes the store's write lock and is bounded by a short busy timeout, so a scrape
cannot delay an exec or a cancel.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

import apsw
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from appliance.egress.record import bounded_report
from appliance.protocol.v1 import FINISHED_STATUS_ORDER

ENGINE_OUTCOMES: Final = FINISHED_STATUS_ORDER
EGRESS_DECISIONS: Final = ("allow", "deny", "refused")
# Egress requests take from a millisecond (loopback) to request_timeout_ms (600 s at most).
EGRESS_DURATION_BUCKETS_S: Final = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
STORE_BUSY_TIMEOUT_MS: Final = 200


class WorkerMetrics:
    """One worker process's registry: ``attach(engine, store_path)`` once the engine exists."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.executions = Counter(
            "appliance_engine_executions",
            "Executions that reached a terminal status in this worker process, by outcome "
            "(lost: left unfinished by an earlier incarnation, found at start-up)",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in ENGINE_OUTCOMES:
            self.executions.labels(outcome)  # export zeros: rate() needs the series to exist
        self.egress_requests = Counter(
            "appliance_egress_requests",
            "Egress requests (fetch calls and followed redirect hops) of finished attempts, by "
            "decision (allow: the policy allowed it; deny: the policy denied it or gave no "
            "usable answer; refused: the worker refused it before asking)",
            ["decision"],
            registry=self.registry,
        )
        for decision in EGRESS_DECISIONS:
            self.egress_requests.labels(decision)
        self.egress_duration = Histogram(
            "appliance_egress_request_duration_seconds",
            "Duration of allowed egress requests (decision, connection, response and body)",
            buckets=EGRESS_DURATION_BUCKETS_S,
            registry=self.registry,
        )

    def on_report(self, report: Any) -> None:
        """Engine listener: count terminal reports (the pool delivers one per execution)."""
        status = getattr(getattr(report, "status", None), "value", None)
        if status in ENGINE_OUTCOMES and status != "lost":
            self.executions.labels(status).inc()
            self.record_egress(bounded_report(getattr(report, "egress", None)))

    def record_egress(self, egress: dict[str, Any] | None) -> None:
        if egress is None:
            return
        for record in egress["requests"]:
            self.egress_requests.labels(record["decision"]).inc()
            if record["decision"] == "allow":
                self.egress_duration.observe(record["ms"] / 1000)
        if egress["over_limit"]:
            self.egress_requests.labels("refused").inc(egress["over_limit"])

    def record_lost(self, execution_ids: Iterable[str]) -> None:
        self.executions.labels("lost").inc(len(list(execution_ids)))

    def attach(self, engine: Any, store_path: Path | str | None) -> None:
        engine.add_listener(self.on_report)
        self.registry.register(WorkerCollector(engine, store_path))


class WorkerCollector(Collector):
    def __init__(self, engine: Any, store_path: Path | str | None) -> None:
        self._engine = engine
        self._store_path = None if store_path is None else str(store_path)

    def collect(self) -> Iterator[Any]:
        yield from self._pool()
        if self._store_path is not None:
            yield from self._store()

    def _pool(self) -> Iterator[Any]:
        stats = self._engine.stats()
        for name, value, doc in (
            ("running", stats.running, "Executions holding an engine slot"),
            ("queued", stats.queued, "Accepted executions waiting for a slot (queue depth)"),
            ("reserved", stats.reserved, "Slots reserved for executions being launched"),
            ("max_concurrent", stats.max_concurrent, "Engine slots (engine.max_concurrent)"),
            ("max_queued", stats.max_queued, "Queue capacity (engine.max_queued)"),
            ("warm_children", stats.warm_children, "Pre-started V8 children ready to run"),
            ("live_children", stats.live_children, "Live V8 child processes"),
        ):
            yield GaugeMetricFamily(f"appliance_engine_pool_{name}", doc, value=value)
        for name, value, doc in (
            (
                "saturation_events",
                stats.saturation_events,
                "Submissions refused because slots and queue were full",
            ),
            ("queued_events", stats.queued_events, "Submissions that had to wait in the queue"),
            ("submitted", stats.submitted_total, "Submissions accepted by the engine"),
        ):
            yield CounterMetricFamily(f"appliance_engine_pool_{name}", doc, value=value)

    def _store(self) -> Iterator[Any]:
        try:
            counts = _store_counts(self._store_path or "")
        except apsw.Error:
            return  # busy or closing: skip this scrape's store figures rather than block
        yield GaugeMetricFamily(
            "appliance_worker_store_bytes",
            "Bytes on disk of the worker store (database, -wal and -shm)",
            value=_file_bytes(self._store_path or ""),
        )
        yield GaugeMetricFamily(
            "appliance_worker_retained_through",
            "The retention floor W the worker recorded: records at or below it are pruned and "
            "every invocation at or below it is refused (docs/worker.md)",
            value=counts[4],
        )
        for name, value, doc in (
            ("invocations", counts[0], "Invocation records (reservation, permit, consumption)"),
            ("receipts", counts[1], "Invocation records holding a submission receipt"),
            ("executions", counts[2], "Execution records"),
            ("output_bytes", counts[3], "Bytes of captured console output stored"),
        ):
            yield GaugeMetricFamily(f"appliance_worker_store_{name}", doc, value=value)


def _file_bytes(path: str) -> int:
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += Path(path + suffix).stat().st_size
        except OSError:
            continue
    return total


def _store_counts(path: str) -> tuple[int, int, int, int, int]:
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.set_busy_timeout(STORE_BUSY_TIMEOUT_MS)
        # Records are canonical JSON (no whitespace): an absent receipt is exactly this text.
        invocations, receipts = conn.execute(
            "SELECT count(*), coalesce(sum(instr(CAST(record AS TEXT), '\"receipt\":null') = 0), 0)"
            " FROM invocation"
        ).fetchall()[0]
        executions, output_bytes = conn.execute(
            "SELECT count(*), coalesce(sum(length(output)), 0) FROM execution"
        ).fetchall()[0]
        floor = conn.execute(
            "SELECT value FROM meta WHERE key = 'retained_through'"
        ).fetchall()  # a figure only: the store verifies its checksum where it decides
    finally:
        conn.close()
    retained = int(floor[0][0]) if floor and str(floor[0][0]).isdigit() else 0
    return int(invocations), int(receipts), int(executions), int(output_bytes), retained
