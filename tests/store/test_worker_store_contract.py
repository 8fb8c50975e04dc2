"""One suite, two stores: the in-memory worker store keeps every rule of the SQLite one.

The launch core runs over ``WorkerStore`` in the process and over ``MemoryWorkerStore`` in the
system simulator; a rule only the SQLite store kept would make the simulator check a different
worker. The rules are tests/store/test_worker_store.py's, run here with the memory store opened
in place of the file (the tests about files, checksums and fsync pragmas stay SQLite-only).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.protocol.v1 import Invocation
from appliance.worker.memory_store import MemoryDisk, MemoryStores, MemoryWorkerStore
from tests.store import test_worker_store as suite

PORTABLE = (
    "test_a_reservation_is_created_once_and_returned_after",
    "test_a_different_binding_for_a_reserved_invocation_is_refused",
    "test_an_invocation_of_another_namespace_is_refused",
    "test_a_permit_needs_a_reservation_and_is_idempotent",
    "test_consume_needs_a_permit_and_creates_the_execution_record",
    "test_a_second_consume_is_refused_also_after_a_restart",
    "test_a_permit_from_an_earlier_incarnation_cannot_be_consumed",
    "test_a_fence_before_consume_wins_and_blocks_consume",
    "test_a_fence_after_consume_records_that_it_came_too_late",
    "test_a_fence_before_any_reservation_blocks_the_later_exec",
    "test_a_receipt_needs_a_consumed_invocation_and_is_idempotent",
    "test_a_finished_execution_never_changes_again",
    "test_execution_output_is_bounded_exactly_at_the_limit",
    "test_every_open_records_a_new_incarnation_and_keeps_the_old_ones",
    "test_executions_left_running_by_a_dead_incarnation_are_listed",
)


@pytest.mark.parametrize("name", PORTABLE)
def test_the_memory_store_keeps_the_rule(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = MemoryStores()

    def open_worker(data_dir: Path, *, now_ms: int = 1_000, worker_id: str = "w1"):
        return stores.open(data_dir, namespace="ns", now_ms=now_ms)

    monkeypatch.setattr(suite, "open_worker", open_worker)
    getattr(suite, name)(tmp_path)


def test_unsynced_writes_survive_a_process_crash_but_not_a_power_loss() -> None:
    inv = Invocation("ns", 3, 17, 1)
    disk = MemoryDisk()
    store = MemoryWorkerStore.open(disk, namespace="ns", incarnation_id="a", now_ms=1)
    store.reserve(inv, {"b": 1}, now_ms=2)
    store.record_permit(inv, {"p": 1}, now_ms=3)
    store.consume(inv, execution_id="e1", now_ms=4)
    store.record_receipt(inv, {"r": 1}, now_ms=5, durable=False)
    store.update_execution("e1", status="running", now_ms=6, durable=False)
    again = MemoryWorkerStore.open(disk, namespace="ns", incarnation_id="b", now_ms=7)
    assert again.get(inv).receipt == {"r": 1}  # a process crash: the OS kept the pages
    disk.lose_unsynced()  # the incarnation record of "b" was durable: it covered them
    assert disk.current["executions"]["e1"].status == "running"
    store = MemoryWorkerStore.open(disk, namespace="ns", incarnation_id="c", now_ms=8)
    other = Invocation("ns", 3, 18, 1)
    store.reserve(other, {"b": 2}, now_ms=9)
    store.record_permit(other, {"p": 2}, now_ms=10)
    store.consume(other, execution_id="e2", now_ms=11)
    store.record_receipt(other, {"r": 2}, now_ms=12, durable=False)
    disk.lose_unsynced()
    reopened = MemoryWorkerStore.open(disk, namespace="ns", incarnation_id="d", now_ms=13)
    assert reopened.get(other).consumed is not None  # consume was durable
    assert reopened.get(other).receipt is None  # the receipt alone was not
