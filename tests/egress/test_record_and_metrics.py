"""Records are bounded wherever they travel, and the worker counts them in its metrics."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from prometheus_client import generate_latest

from appliance.egress.record import (
    RECORD_TEXT_BYTES_MAX,
    RECORD_URL_BYTES_MAX,
    RECORDS_MAX,
    REPORT_BYTES_MAX,
    bounded_report,
    make_record,
    record_bytes,
)
from appliance.engine.model import ExecutionReport, ExecutionStatus
from appliance.metrics.worker import WorkerMetrics
from tests.egress.conftest import INVOCATION, make_gate


def record(n: int = 1, **fields: object) -> dict[str, object]:
    base = {
        "n": n,
        "hop": 0,
        "method": "GET",
        "url": "https://a.example/x",
        "decision": "allow",
        "status": 200,
        "ms": 12,
    }
    return make_record(**{**base, **fields})  # type: ignore[arg-type]


def test_texts_are_bounded_and_one_line() -> None:
    long = record(url="https://a.example/" + "p" * 5000, reason="r\n" * 1000, error="e" * 5000)
    assert len(long["url"].encode()) <= RECORD_URL_BYTES_MAX
    assert len(long["reason"].encode()) <= RECORD_TEXT_BYTES_MAX and "\n" not in long["reason"]
    assert len(long["error"].encode()) <= RECORD_TEXT_BYTES_MAX


def test_bounded_report_rechecks_what_a_child_sends() -> None:
    hostile = {
        "requests": [
            {
                "n": -1,
                "decision": "yes",
                "status": "200",
                "url": "x" * 9000,
                "ms": 2**60,
                "credentials": ["OK", 5, "N" * 500],
            },
            "not a record",
        ],
        "over_limit": "many",
    }
    report = bounded_report(hostile)
    assert report is not None
    (only,) = report["requests"]
    assert only["n"] == 0 and only["decision"] == "refused" and only["status"] is None
    assert only["ms"] == 0 and only["credentials"] == ["OK"]
    assert report["over_limit"] == 0
    assert bounded_report("nope") is None and bounded_report(None) is None


def test_the_report_is_capped_and_the_rest_counted() -> None:
    records = [record(n, reason="r" * 200, error="e" * 200) for n in range(1, RECORDS_MAX + 50)]
    report = bounded_report({"requests": records, "over_limit": 3})
    assert report is not None
    assert len(json.dumps(report["requests"]).encode()) <= REPORT_BYTES_MAX
    kept = len(report["requests"])
    assert kept + report["records_dropped"] == len(records)
    assert report["over_limit"] == 3


def test_an_attempt_stops_recording_at_the_cap_and_counts() -> None:
    gate = make_gate(max_requests=256)
    attempt = gate.open_attempt(INVOCATION, time.monotonic() + 5)
    big = record(reason="r" * 250, error="e" * 250)
    fits = REPORT_BYTES_MAX // record_bytes(big)
    for _ in range(fits + 5):
        attempt.add_record(dict(big))
    report = attempt.report()
    assert len(report["requests"]) == fits and report["records_dropped"] == 5


def metrics_text(metrics: WorkerMetrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_terminal_reports_count_egress_requests_by_decision() -> None:
    metrics = WorkerMetrics()
    egress = {
        "requests": [
            record(1),
            record(2, decision="deny", status=None),
            record(3, decision="refused", status=None),
            record(4, ms=1500),
        ],
        "over_limit": 2,
        "records_dropped": 0,
    }
    metrics.on_report(ExecutionReport("s1-o1-a1", ExecutionStatus.RUNNING, egress=egress))
    assert 'appliance_egress_requests_total{decision="allow"} 0.0' in metrics_text(metrics)
    metrics.on_report(ExecutionReport("s1-o1-a1", ExecutionStatus.COMPLETED, egress=egress))
    text = metrics_text(metrics)
    assert 'appliance_egress_requests_total{decision="allow"} 2.0' in text
    assert 'appliance_egress_requests_total{decision="deny"} 1.0' in text
    assert 'appliance_egress_requests_total{decision="refused"} 3.0' in text
    assert "appliance_egress_request_duration_seconds_count 2.0" in text
    assert 'appliance_egress_request_duration_seconds_bucket{le="2.5"} 2.0' in text
    assert 'appliance_egress_request_duration_seconds_bucket{le="1.0"} 1.0' in text


def test_reports_without_egress_count_nothing() -> None:
    metrics = WorkerMetrics()
    metrics.on_report(ExecutionReport("s1-o1-a1", ExecutionStatus.FAILED))
    metrics.on_report(SimpleNamespace(status=ExecutionStatus.COMPLETED))
    assert "appliance_egress_request_duration_seconds_count 0.0" in metrics_text(metrics)
