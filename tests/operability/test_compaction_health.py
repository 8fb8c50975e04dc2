"""Issue 19's health warning and metrics: growth that outpaces compaction, store figures."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from appliance.config.runner import RaftTimings
from appliance.metrics.health import warnings_for
from appliance.metrics.voter import compaction_behind
from tests.operability.test_health_warnings import HEALTHY


def test_the_log_may_reach_twice_what_compaction_keeps_it_to_and_no_more() -> None:
    cfg = SimpleNamespace(raft=RaftTimings(snapshot_entries=100, trailing_entries=50))
    assert compaction_behind(300, cfg) is None
    message = compaction_behind(301, cfg)
    assert message is not None and "301 entries" in message
    assert compaction_behind(None, cfg) is None  # an etcd voter has no local log
    inputs = replace(HEALTHY, compaction_behind=message)
    assert [w["code"] for w in warnings_for(inputs)] == ["compaction_behind"]
    assert [w["code"] for w in warnings_for(HEALTHY)] == []


def test_the_health_document_shows_the_log_and_store_figures() -> None:
    from appliance.metrics.health import health_document

    raft = {
        **HEALTHY.raft,
        "log_first_index": 5001,
        "last_log_index": 7000,
        "snapshot_index": 5000,
        "snapshot_age_s": 12.5,
    }
    document = health_document(replace(HEALTHY, raft=raft, store_bytes=123456, log_entries=2000))
    assert document["log"] == {
        "store_bytes": 123456,
        "entries": 2000,
        "first_index": 5001,
        "last_index": 7000,
        "snapshot_index": 5000,
        "snapshot_age_s": 12.5,
    }
