"""Dispatch lateness is measured from the due time only for live slots (issue 35, item 7)."""

from __future__ import annotations

from appliance.core.occurrence import Occurrence, OccurrenceState, TimelineEntry
from appliance.metrics import RunnerMetrics
from appliance.metrics.hooks import observe_decision
from appliance.owner.lateness import LIVE_CREATION_S_MAX, lateness_base

S = OccurrenceState
DUE = 1_800_000_000


def record(created_at: int, reason: str = "created", *later: TimelineEntry) -> Occurrence:
    timeline = (TimelineEntry(S.PENDING, created_at, 1, reason), *later)
    return Occurrence(1, 1, DUE, S.RUNNING, timeline[-1].attempt, timeline=timeline)


def test_a_slot_observed_on_time_is_live_and_measured_from_its_due_instant() -> None:
    assert lateness_base(record(DUE), 1) == (DUE, True)
    assert lateness_base(record(DUE + LIVE_CREATION_S_MAX), 1) == (DUE, True)  # at the limit


def test_a_caught_up_backfilled_or_run_now_slot_is_measured_from_its_creation() -> None:
    late = DUE + LIVE_CREATION_S_MAX + 1  # one past the limit: a catch-up
    assert lateness_base(record(late), 1) == (late, False)
    assert lateness_base(record(DUE + 490_758, "backfill"), 1) == (DUE + 490_758, False)
    assert lateness_base(record(DUE, "run_now"), 1) == (DUE, False)


def test_a_retry_is_measured_from_its_claim() -> None:
    retried = record(
        DUE,
        "created",
        TimelineEntry(S.RUNNING, DUE + 1, 1, "claim"),
        TimelineEntry(S.PENDING, DUE + 5, 2, "retry"),
        TimelineEntry(S.RUNNING, DUE + 125, 2, "claim"),
    )
    assert lateness_base(retried, 2) == (DUE + 125, False)


def test_only_live_dispatches_reach_the_due_time_histogram() -> None:
    metrics = RunnerMetrics()
    observe_decision(metrics, "dispatch_accepted", {"late_ms": 1500.0, "slot": "live"})
    observe_decision(metrics, "dispatch_accepted", {"late_ms": 490_758_000.0, "slot": "backlog"})
    sample = metrics.registry.get_sample_value
    assert sample("appliance_dispatch_latency_seconds_count") == 1
    assert sample("appliance_dispatch_latency_seconds_sum") == 1.5
    assert sample("appliance_dispatch_backlog_latency_seconds_count") == 1
