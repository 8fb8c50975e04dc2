"""Worker retention (issue 19 item 5): the store prunes only at or below the recorded floor W.

Each rule runs against both stores (SQLite and the simulator's memory store), like
test_worker_store_contract.py; the SQLite-only tests look at the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from appliance.protocol.v1 import ID_MAX, Invocation
from appliance.store.errors import StoreRefused
from appliance.store.worker_store import META_RETAINED_THROUGH
from appliance.worker.memory_store import MemoryStores
from tests.store.helpers import open_worker, raw_execute, raw_query

Opener = Callable[..., Any]


@pytest.fixture(params=["sqlite", "memory"])
def opener(request: pytest.FixtureRequest) -> Opener:
    if request.param == "sqlite":
        return open_worker
    stores = MemoryStores()
    return lambda data_dir, *, now_ms=1_000: stores.open(data_dir, namespace="ns", now_ms=now_ms)


def inv(occurrence_id: int, attempt: int = 1, schedule_id: int = 3) -> Invocation:
    return Invocation("ns", schedule_id, occurrence_id, attempt)


def launched(store: Any, invocation: Invocation, *, finished: bool = True) -> str:
    eid = f"s{invocation.schedule_id}-o{invocation.occurrence_id}-a{invocation.attempt}"
    store.reserve(invocation, {"b": invocation.occurrence_id}, now_ms=10)
    store.record_permit(invocation, {"p": invocation.occurrence_id}, now_ms=11)
    store.consume(invocation, execution_id=eid, now_ms=12)
    store.record_receipt(invocation, {"r": eid}, now_ms=13, durable=False)
    if finished:
        store.update_execution(eid, status="completed", now_ms=14, result={"ok": True})
    return eid


def test_prune_deletes_only_invocations_at_or_below_w(opener: Opener, data_dir: Path) -> None:
    with opener(data_dir) as store:
        assert store.retained_through() == 0
        ids = {k: launched(store, inv(k)) for k in range(1, 7)}
        store.fence(inv(2, attempt=2), reason="cancel", now_ms=20)  # a fence-only record
        pruned = store.prune_through(3, rows_max=100)
        assert (pruned.deleted, pruned.more) == (4, False)  # 1, 2 (two attempts), 3
        assert store.retained_through() == 3
        for k in (1, 2, 3):
            assert store.get(inv(k)) is None and store.get_execution(ids[k]) is None
        assert store.get(inv(2, attempt=2)) is None
        for k in (4, 5, 6):
            assert store.get(inv(k)).consumed is not None
            assert store.get_execution(ids[k]).status == "completed"


def test_w_only_rises(opener: Opener, data_dir: Path) -> None:
    with opener(data_dir) as store:
        launched(store, inv(5))
        store.prune_through(4, rows_max=10)
        assert store.prune_through(2, rows_max=10).deleted == 0  # a stale runner's lower W
        assert store.retained_through() == 4
        assert store.get(inv(5)) is not None


def test_prune_is_bounded_per_batch_and_says_when_more_is_left(
    opener: Opener, data_dir: Path
) -> None:
    with opener(data_dir) as store:
        for k in range(1, 11):
            launched(store, inv(k))
        batches = []
        while True:
            pruned = store.prune_through(10, rows_max=4)
            batches.append(pruned.deleted)
            if not pruned.more:
                break
        assert batches == [4, 4, 2]
        assert store.counts() == {"invocations": 0, "executions": 0}
        assert store.prune_through(10, rows_max=4).more is False  # nothing left: never spins


def test_an_unfinished_execution_is_kept_until_it_finishes(opener: Opener, data_dir: Path) -> None:
    with opener(data_dir) as store:
        running = launched(store, inv(1), finished=False)
        launched(store, inv(2))
        pruned = store.prune_through(2, rows_max=10)
        assert pruned.deleted == 1 and not pruned.more
        assert store.get(inv(1)) is not None  # its engine report must still find it
        store.update_execution(running, status="completed", now_ms=30)
        assert store.prune_through(2, rows_max=10).deleted == 1
        assert store.get(inv(1)) is None


def test_w_survives_a_restart_and_the_pruned_records_stay_gone(
    opener: Opener, data_dir: Path
) -> None:
    with opener(data_dir) as store:
        for k in range(1, 4):
            launched(store, inv(k))
        store.prune_through(2, rows_max=10)
    with opener(data_dir, now_ms=2_000) as restarted:
        assert restarted.retained_through() == 2
        assert restarted.get(inv(1)) is None and restarted.get(inv(3)) is not None
        assert restarted.unfinished_from_previous_incarnations() == []


@pytest.mark.parametrize("bad", [-1, ID_MAX + 1, True, "3"])
def test_a_w_outside_the_id_range_is_refused(opener: Opener, data_dir: Path, bad: Any) -> None:
    with opener(data_dir) as store, pytest.raises(ValueError, match="retained_through"):
        store.prune_through(bad, rows_max=1)


def test_w_at_the_id_limit_is_accepted(opener: Opener, data_dir: Path) -> None:
    with opener(data_dir) as store:
        launched(store, inv(ID_MAX))
        assert store.prune_through(ID_MAX, rows_max=1).deleted == 1
        assert store.retained_through() == ID_MAX


def test_rows_max_must_be_positive(opener: Opener, data_dir: Path) -> None:
    with opener(data_dir) as store, pytest.raises(ValueError, match="rows_max"):
        store.prune_through(1, rows_max=0)


def test_the_recorded_w_is_checksummed(data_dir: Path) -> None:
    with open_worker(data_dir) as store:
        store.prune_through(7, rows_max=1)
    rows = raw_query(
        data_dir / "worker.sqlite3",
        "SELECT value FROM meta WHERE key = ?",
        (META_RETAINED_THROUGH,),
    )
    assert rows == [("7",)]
    raw_execute(
        data_dir / "worker.sqlite3",
        "UPDATE meta SET value = '9' WHERE key = ?",
        (META_RETAINED_THROUGH,),
    )
    with pytest.raises(StoreRefused, match="'retained_through' fails its checksum"):
        open_worker(data_dir, now_ms=2_000)  # the guard refuses it before anything is read
