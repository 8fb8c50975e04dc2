"""Issue 19 item 7's remaining figures: the retention floor W (runner health and metrics), the
worker store's bytes and W (worker metrics), and etcd's compaction state (health and metrics)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from appliance.metrics.health import health_document
from appliance.metrics.voter import RunnerReader
from appliance.metrics.worker import WorkerCollector
from appliance.store.versions import WORKER_FILE_NAME
from tests.operability.test_health_warnings import HEALTHY
from tests.store.helpers import open_worker


def test_health_shows_the_retention_floor() -> None:
    figures = replace(HEALTHY.figures, retained_through=41)
    document = health_document(replace(HEALTHY, figures=figures))
    assert document["retention"] == {"retained_through": 41}


def test_health_shows_etcds_compaction_state() -> None:
    raft = {
        **HEALTHY.raft,
        "backend": "etcd",
        "commit_index": 9000,
        "first_log_index": 7001,
        "snapshot_index": 8000,
        "snapshots_written": 3,
        "compact_revision": 12345,
    }
    document = health_document(replace(HEALTHY, raft=raft, store_bytes=None, log_entries=2000))
    assert document["log"] == {
        "store_bytes": None,
        "entries": 2000,
        "first_index": 7001,
        "last_index": 9000,
        "snapshot_index": 8000,
        "snapshot_age_s": None,
        "snapshots_written": 3,
        "compact_revision": 12345,
    }


def test_an_etcd_voters_log_entries_are_its_kept_keys() -> None:
    status = {"backend": "etcd", "commit_index": 9000, "first_log_index": 7001}
    runner = SimpleNamespace(replication=SimpleNamespace(status=lambda: status))
    assert RunnerReader(runner).log_entries() == 2000
    status["first_log_index"] = None
    assert RunnerReader(runner).log_entries() is None


def test_worker_metrics_show_the_store_bytes_and_w(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with open_worker(data_dir) as store:
        store.prune_through(17, rows_max=1)
    path = data_dir / WORKER_FILE_NAME
    families = {f.name: f for f in WorkerCollector(None, path)._store()}
    on_disk = sum(
        p.stat().st_size
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"))
        if p.exists()
    )
    assert families["appliance_worker_store_bytes"].samples[0].value == on_disk > 0
    assert families["appliance_worker_retained_through"].samples[0].value == 17
