"""WorkerStore: reserve -> permit -> consume (at most once, across restarts), fences, receipts,
execution records and incarnations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from appliance.engine.text import STORED_JSON_DEPTH_MAX, TooDeep
from appliance.protocol.v1 import ID_MAX, check_invocation_key
from appliance.store.errors import StoreCorrupt, WorkerRecordRefused
from appliance.store.versions import WORKER_FILE_NAME
from appliance.store.worker_store import EXECUTION_OUTPUT_BYTES_MAX, Invocation, WorkerStore
from tests.store.helpers import flip_first_byte, open_worker, raw_execute, raw_query

INV = Invocation("ns", 3, 17, 1)
BINDING = {"owner": "n1", "epoch": 2, "payload_digest": "ab" * 32, "heap_mb": 64}
PERMIT = {"permit_id": "p-1", "incarnation": "i"}


@contextmanager
def refused_with(reason: str) -> Iterator[None]:
    """Expect a ``WorkerRecordRefused`` carrying exactly ``reason``."""
    with pytest.raises(WorkerRecordRefused) as caught:
        yield
    assert caught.value.reason == reason, str(caught.value)


def admitted(store: WorkerStore, invocation: Invocation = INV) -> None:
    store.reserve(invocation, BINDING, now_ms=10)
    store.record_permit(invocation, PERMIT, now_ms=11)


def test_a_reservation_is_created_once_and_returned_after(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        first = store.reserve(INV, BINDING, now_ms=10)
        again = store.reserve(INV, dict(reversed(list(BINDING.items()))), now_ms=20)
        assert first.created and not again.created
        assert again.record == first.record
        assert again.record.reserved_at_ms == 10
        assert again.record.reserved_by == store.incarnation_id


def test_a_different_binding_for_a_reserved_invocation_is_refused(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        store.reserve(INV, BINDING, now_ms=10)
        with refused_with("binding_mismatch"):
            store.reserve(INV, {**BINDING, "heap_mb": 128}, now_ms=11)
        assert store.get(INV).binding == BINDING


def test_an_invocation_of_another_namespace_is_refused(data_dir: Path) -> None:
    with open_worker(data_dir) as store, refused_with("namespace_mismatch"):
        store.reserve(Invocation("other", 3, 17, 1), BINDING, now_ms=10)


def test_a_permit_needs_a_reservation_and_is_idempotent(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        with refused_with("not_reserved"):
            store.record_permit(INV, PERMIT, now_ms=11)
        store.reserve(INV, BINDING, now_ms=10)
        first = store.record_permit(INV, PERMIT, now_ms=11)
        assert store.record_permit(INV, PERMIT, now_ms=12) == first
        with refused_with("permit_mismatch"):
            store.record_permit(INV, {"permit_id": "p-2"}, now_ms=13)


def test_consume_needs_a_permit_and_creates_the_execution_record(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        store.reserve(INV, BINDING, now_ms=10)
        with refused_with("no_permit"):
            store.consume(INV, execution_id="e1", now_ms=12)
        store.record_permit(INV, PERMIT, now_ms=11)
        execution = store.consume(INV, execution_id="e1", now_ms=12)
        assert (execution.status, execution.invocation, execution.created_at_ms) == (
            "submitted",
            INV,
            12,
        )
        assert store.get(INV).consumed == {
            "execution_id": "e1",
            "at_ms": 12,
            "incarnation_id": store.incarnation_id,
        }
        assert store.get_execution("e1") == execution


def test_a_second_consume_is_refused_also_after_a_restart(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        admitted(store)
        store.consume(INV, execution_id="e1", now_ms=12)
        with refused_with("already_consumed"):
            store.consume(INV, execution_id="e2", now_ms=13)
    with open_worker(data_dir, now_ms=2_000) as restarted:
        with refused_with("already_consumed"):
            restarted.consume(INV, execution_id="e3", now_ms=14)
        assert restarted.reserve(INV, BINDING, now_ms=15).record.consumed is not None
        assert restarted.get_execution("e2") is None


def test_a_permit_from_an_earlier_incarnation_cannot_be_consumed(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        admitted(store)
    with open_worker(data_dir, now_ms=2_000) as restarted, refused_with("stale_permit"):
        restarted.consume(INV, execution_id="e1", now_ms=12)


def test_a_fence_before_consume_wins_and_blocks_consume(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        admitted(store)
        record = store.fence(INV, reason="cancel", now_ms=12)
        assert record.fence is not None and record.fence["before_consume"] is True
        with refused_with("fenced"):
            store.consume(INV, execution_id="e1", now_ms=13)
        assert store.get(INV).consumed is None


def test_a_fence_after_consume_records_that_it_came_too_late(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        admitted(store)
        store.consume(INV, execution_id="e1", now_ms=12)
        record = store.fence(INV, reason="cancel", now_ms=13)
        assert record.fence["before_consume"] is False
        assert store.fence(INV, reason="again", now_ms=14).fence == record.fence  # idempotent


def test_a_fence_before_any_reservation_blocks_the_later_exec(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        fenced = store.fence(INV, reason="cancel", now_ms=5)
        assert fenced.binding is None and fenced.fence["before_consume"] is True
        reserved = store.reserve(INV, BINDING, now_ms=10)
        assert not reserved.created
        assert reserved.record.fence == fenced.fence
        store.record_permit(INV, PERMIT, now_ms=11)
        with refused_with("fenced"):
            store.consume(INV, execution_id="e1", now_ms=12)


def test_a_receipt_needs_a_consumed_invocation_and_is_idempotent(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        admitted(store)
        with refused_with("not_consumed"):
            store.record_receipt(INV, {"outcome": "completed"}, now_ms=12)
        store.consume(INV, execution_id="e1", now_ms=12)
        first = store.record_receipt(INV, {"outcome": "completed"}, now_ms=13)
        assert first.receipt == {"outcome": "completed"} and first.receipt_at_ms == 13
        assert store.record_receipt(INV, {"outcome": "completed"}, now_ms=14) == first
        with refused_with("receipt_mismatch"):
            store.record_receipt(INV, {"outcome": "failed"}, now_ms=15)


def test_a_finished_execution_never_changes_again(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        admitted(store)
        store.consume(INV, execution_id="e1", now_ms=12)
        running = store.update_execution("e1", status="running", now_ms=13, output=b"hi\n")
        assert running.finished_at_ms is None and running.output == b"hi\n"
        done = store.update_execution("e1", status="completed", now_ms=14, result={"n": 1})
        assert (done.finished_at_ms, done.output, done.result) == (14, b"hi\n", {"n": 1})
        with refused_with("execution_finished"):
            store.update_execution("e1", status="failed", now_ms=15, error="late")
        with refused_with("unknown_execution"):
            store.update_execution("nope", status="running", now_ms=15)
        with pytest.raises(ValueError, match="status"):
            store.update_execution("e1", status="submitted", now_ms=15)


def synchronous_of(store: WorkerStore) -> int:
    return int(store._db.execute("PRAGMA synchronous").fetchall()[0][0])


def test_receipt_and_progress_without_their_own_fsync_are_recorded_and_kept(
    data_dir: Path,
) -> None:
    normal = 1  # group commit: no commit fsyncs on its own; durable writes wait for a shared one
    with open_worker(data_dir) as store:
        admitted(store)
        store.consume(INV, execution_id="e1", now_ms=12)
        durable = store._sync._synced
        assert durable == store._sync.latest()  # the consume returned once it was durable
        store.record_receipt(INV, {"outcome": "accepted"}, now_ms=13, durable=False)
        store.update_execution("e1", status="running", now_ms=14, durable=False)
        assert store._sync._synced == durable  # neither waited for an fsync
        assert synchronous_of(store) == normal
        with refused_with("receipt_mismatch"):
            store.record_receipt(INV, {"outcome": "other"}, now_ms=15, durable=False)
        store.get(INV)  # a read returns only once what it read is durable
        assert store._sync._synced == store._sync.latest()
        store.update_execution("e1", status="completed", now_ms=16, durable=False)
        assert store._sync._synced < store._sync.latest()  # the outcome did not wait ...
        assert store.get_execution("e1").status == "completed"
        assert store._sync._synced == store._sync.latest()  # ... its first reader did
    with open_worker(data_dir) as reopened:
        assert reopened.get(INV).receipt == {"outcome": "accepted"}
        assert reopened.get_execution("e1").status == "completed"


def test_concurrent_durable_writes_share_fsyncs_and_each_returns_only_once_durable(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    from appliance.store.group_sync import GroupSync

    real_fsync = GroupSync._fsync
    real_wait = GroupSync.wait
    waited: list[tuple[int, int]] = []  # (commit number, durable number when wait returned)

    def slow_fsync(self: GroupSync) -> None:
        time.sleep(0.02)  # a slow disk: the commits of the other threads pile up meanwhile
        real_fsync(self)

    def recording_wait(self: GroupSync, seq: int) -> None:
        real_wait(self, seq)
        waited.append((seq, self._synced))

    monkeypatch.setattr(GroupSync, "_fsync", slow_fsync)
    monkeypatch.setattr(GroupSync, "wait", recording_wait)
    with open_worker(data_dir) as store:
        start = threading.Barrier(8)

        def writer(n: int) -> None:
            start.wait()
            for k in range(5):
                store.fence(Invocation("ns", 1, 100 + n * 10 + k, 1), reason="x", now_ms=1)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        commits, fsyncs = store._sync.commits, store._sync.fsyncs
        wakeups = store._sync.wakeups
    assert commits >= 40
    assert fsyncs < commits / 2, (fsyncs, commits)  # batched
    # A waiter is woken when an fsync covers it, plus one per fsync to run the next one: not
    # every waiter at every fsync (a notify_all woke them all, most of them to sleep again:
    # 578 wake-ups for 320 commits and 40 fsyncs of 16 writers, against 300 now).
    assert wakeups <= commits + fsyncs, (wakeups, commits, fsyncs)
    assert all(durable >= seq for seq, durable in waited)  # nobody returned before its fsync
    with open_worker(data_dir) as reopened:
        assert all(
            reopened.get(Invocation("ns", 1, 100 + n * 10 + k, 1)).fence is not None
            for n in range(8)
            for k in range(5)
        )


def test_execution_output_is_bounded_exactly_at_the_limit(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        admitted(store)
        store.consume(INV, execution_id="e1", now_ms=12)
        at_limit = b"x" * EXECUTION_OUTPUT_BYTES_MAX
        assert store.update_execution("e1", status="running", now_ms=13, output=at_limit).output
        with pytest.raises(ValueError, match="over"):
            store.update_execution("e1", status="running", now_ms=14, output=at_limit + b"x")
        assert store.get_execution("e1").updated_at_ms == 13


def test_every_open_records_a_new_incarnation_and_keeps_the_old_ones(data_dir: Path) -> None:
    ids = []
    for now_ms in (100, 200, 300):
        with open_worker(data_dir, now_ms=now_ms) as store:
            ids.append(store.incarnation_id)
            assert store.incarnations()[-1] == (store.incarnation_id, now_ms)
    assert len(set(ids)) == 3
    with open_worker(data_dir, now_ms=400) as store:
        assert [i for i, _ in store.incarnations()][:3] == ids


def test_a_reused_incarnation_id_is_refused_and_the_store_stays_usable(data_dir: Path) -> None:
    WorkerStore.create_or_open(
        data_dir, namespace="ns", worker_id="w1", now_ms=1, incarnation_id="fixed"
    ).close()
    with pytest.raises(ValueError, match="already used"):
        WorkerStore.create_or_open(
            data_dir, namespace="ns", worker_id="w1", now_ms=2, incarnation_id="fixed"
        )
    with open_worker(data_dir) as store:
        assert len(store.incarnations()) == 2


def test_executions_left_running_by_a_dead_incarnation_are_listed(data_dir: Path) -> None:
    other = Invocation("ns", 3, 18, 1)
    with open_worker(data_dir) as store:
        admitted(store)
        admitted(store, other)
        store.consume(INV, execution_id="e1", now_ms=12)
        store.consume(other, execution_id="e2", now_ms=12)
        store.update_execution("e2", status="completed", now_ms=13)
        assert store.unfinished_from_previous_incarnations() == []
    with open_worker(data_dir, now_ms=2_000) as restarted:
        orphans = restarted.unfinished_from_previous_incarnations()
        assert [e.execution_id for e in orphans] == ["e1"]
        restarted.update_execution("e1", status="lost", now_ms=2_001, error="worker restarted")
        assert restarted.unfinished_from_previous_incarnations() == []


def test_a_damaged_record_found_while_open_raises_store_corrupt(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        admitted(store)
        path = data_dir / WORKER_FILE_NAME
        record = raw_query(path, "SELECT record FROM invocation")[0][0]
        raw_execute(path, "UPDATE invocation SET record = ?", (flip_first_byte(record),))
        with pytest.raises(StoreCorrupt, match="invocation record"):
            store.get(INV)


@pytest.mark.parametrize(
    "fields",
    [("", 1, 1, 1), ("ns", -1, 1, 1), ("ns", 1, "1", 1), ("ns", 1, 1, True), ("ns", 1, 1, 1.0)],
)
def test_an_invocation_key_is_a_namespace_and_three_non_negative_integers(
    fields: tuple, data_dir: Path
) -> None:
    with pytest.raises(ValueError, match="invocation"):
        check_invocation_key(Invocation(*fields))
    with open_worker(data_dir) as store, pytest.raises(ValueError, match="invocation"):
        store.reserve(Invocation(*fields), BINDING, now_ms=10)
    check_invocation_key(Invocation("ns", 0, 0, 0))
    check_invocation_key(Invocation("ns", ID_MAX, ID_MAX, ID_MAX))
    with pytest.raises(ValueError, match="schedule_id"):
        check_invocation_key(Invocation("ns", ID_MAX + 1, 0, 0))
    assert Invocation("ns", 0, 0, 0).key() == ("ns", 0, 0, 0)


def test_script_text_with_lone_surrogates_is_stored_with_the_replacement_character(
    data_dir: Path,
) -> None:
    # What a script can hand over after JSON decoding: lone surrogates, NUL, control characters.
    result = {"value": "\ud83d", "\udc00key": ["a\x00b\x1f", "\ud83d\ude00"], "n": 1}
    with open_worker(data_dir) as store:
        admitted(store)
        store.consume(INV, execution_id="e1", now_ms=12)
        done = store.update_execution(
            "e1", status="failed", now_ms=13, result=result, error="thrown \udfff"
        )
        expected = {"value": "\ufffd", "\ufffdkey": ["a\x00b\x1f", "\U0001f600"], "n": 1}
        assert (done.result, done.error) == (expected, "thrown \ufffd")
    with open_worker(data_dir) as reopened:
        stored = reopened.get_execution("e1")
        assert (stored.status, stored.result, stored.error) == ("failed", expected, "thrown \ufffd")


def test_a_result_nested_deeper_than_the_limit_is_refused_before_anything_is_written(
    data_dir: Path,
) -> None:
    def nested(depth: int) -> object:
        value: object = 0
        for _ in range(depth):
            value = [value]
        return value

    with open_worker(data_dir) as store:
        admitted(store)
        store.consume(INV, execution_id="e1", now_ms=12)
        too_deep = nested(STORED_JSON_DEPTH_MAX + 1)
        with pytest.raises(TooDeep):
            store.update_execution("e1", status="completed", now_ms=13, result=too_deep)
        assert store.get_execution("e1").status == "submitted"
        at_limit = nested(STORED_JSON_DEPTH_MAX)
        done = store.update_execution("e1", status="completed", now_ms=14, result=at_limit)
        assert done.result == at_limit
