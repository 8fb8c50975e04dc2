"""The checkpoint writer: merged writes in apply order, bounded, and fatal on a failed write."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

import pytest

from appliance.runner.checkpoint_writer import CheckpointWriter, Transition, merge


class GatedStore:
    """Records every save; each save waits until ``gate`` is set."""

    def __init__(self, *, fail: BaseException | None = None) -> None:
        self.saves: list[tuple[int, dict[str, bytes], frozenset[str], int | None]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail = fail

    def save_transition(
        self,
        applied_index: int,
        upserts: Mapping[str, bytes],
        deletes: Iterable[str] = (),
        *,
        min_reader_version: int | None = None,
    ) -> None:
        self.entered.set()
        self.gate.wait(5.0)
        if self.fail is not None:
            raise self.fail
        self.saves.append((applied_index, dict(upserts), frozenset(deletes), min_reader_version))


def t(index: int, upserts: dict[str, bytes], deletes: tuple[str, ...] = (), version=None):
    return Transition(index, upserts, frozenset(deletes), version)


def test_a_merge_equals_the_transitions_applied_in_order() -> None:
    merged = merge(
        [
            t(5, {"a": b"1", "b": b"1"}),
            t(6, {"a": b"2"}, deletes=("c",), version=2),
            t(7, {"c": b"3"}, deletes=("b",)),  # c comes back, b goes
            t(8, {}, deletes=("d",)),
        ]
    )
    assert merged.index == 8
    assert merged.upserts == {"a": b"2", "c": b"3"}
    assert merged.deletes == frozenset({"b", "d"})
    assert merged.min_reader_version == 2  # asked for once in the batch: kept


def test_transitions_queued_behind_a_slow_write_go_to_disk_as_one_write() -> None:
    store = GatedStore()
    writer = CheckpointWriter(store)
    writer.put(1, {"a": b"1"}, (), None)
    assert store.entered.wait(5.0)  # the first write is in progress (blocked)
    for index in range(2, 6):
        writer.put(index, {"a": str(index).encode()}, (), None)
    store.gate.set()
    assert writer.flush(5.0)
    assert [(i, u) for i, u, _, _ in store.saves] == [(1, {"a": b"1"}), (5, {"a": b"5"})]
    assert writer.durable_index == 5
    assert writer.close()


def test_the_queue_is_bounded_and_a_full_queue_holds_the_applier_back() -> None:
    store = GatedStore()
    writer = CheckpointWriter(store, pending_max=2)
    writer.put(1, {}, (), None)
    assert store.entered.wait(5.0)
    writer.put(2, {}, (), None)
    writer.put(3, {}, (), None)
    third_done = threading.Event()
    thread = threading.Thread(target=lambda: (writer.put(4, {}, (), None), third_done.set()))
    thread.start()
    assert not third_done.wait(0.2)  # blocked: two are waiting already
    store.gate.set()
    assert third_done.wait(5.0)
    thread.join()
    assert writer.close()
    assert store.saves[-1][0] == 4


def test_a_failed_write_is_fatal_and_no_later_transition_is_accepted() -> None:
    failure = OSError("disk gone")
    store = GatedStore(fail=failure)
    fatal: list[BaseException] = []
    writer = CheckpointWriter(store, fatal.append)
    store.gate.set()
    writer.put(1, {"a": b"1"}, (), None)
    assert not writer.flush(5.0)
    assert fatal == [failure]
    with pytest.raises(RuntimeError, match="no longer be written"):
        writer.put(2, {"a": b"2"}, (), None)
    assert writer.durable_index == 0
