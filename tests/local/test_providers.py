"""One contract suite for every SchedulerStateProvider (memory, file, SQLite)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from appliance.local import (
    ClaimConflict,
    ClaimLost,
    FileStateProvider,
    MemoryStateProvider,
    Receipt,
    SqliteStateProvider,
)
from appliance.local.durable import RECEIPTS_PER_TASK_MAX
from tests.local.conftest import START

TTL = timedelta(seconds=30)
DUE = START + timedelta(minutes=1)


@pytest.fixture(params=["memory", "file", "sqlite"])
def opener(request, tmp_path):
    """Returns open() -> provider; reopening reads the same durable state (memory: same object)."""
    opened = []
    memory = MemoryStateProvider()

    def open_provider():
        for provider in opened:
            provider.close()
        opened.clear()
        if request.param == "memory":
            provider = memory
        elif request.param == "file":
            provider = FileStateProvider(tmp_path / "state.snapshot")
        else:
            provider = SqliteStateProvider(tmp_path / "state.sqlite")
        opened.append(provider)
        return provider

    yield open_provider
    for provider in opened:
        provider.close()


def receipt_for(claim, outcome="succeeded"):
    return Receipt(claim.due, claim.attempt, claim.epoch, outcome, claim.due + timedelta(seconds=1))


def test_epochs_are_strictly_increasing_across_reopen(opener):
    provider = opener()
    first = provider.acquire_epoch()
    second = provider.acquire_epoch()
    assert second > first >= 1
    assert opener().acquire_epoch() > second


def test_register_then_load_round_trips(opener):
    provider = opener()
    assert provider.load("job") is None
    provider.register("job", "every:1000000us", DUE, 1)
    record = opener().load("job")
    assert (record.task_key, record.definition, record.next_run, record.attempt) == (
        "job",
        "every:1000000us",
        DUE,
        1,
    )
    assert record.claim is None and record.receipts == ()


def test_claim_renew_and_receipt_move_the_cursor(opener):
    provider = opener()
    epoch = provider.acquire_epoch()
    provider.register("job", "d", DUE, 1)
    claim = provider.claim("job", "node-a", epoch, DUE, 1, START, TTL)
    assert (claim.epoch, claim.expires_at) == (epoch, START + TTL)
    renewed = provider.renew(claim, START + timedelta(seconds=10), TTL)
    assert renewed.expires_at == START + timedelta(seconds=40)
    next_run = DUE + timedelta(minutes=1)
    provider.commit_receipt(renewed, receipt_for(renewed), next_run, 1, 1)
    record = opener().load("job")
    assert (record.next_run, record.attempt, record.runs_completed) == (next_run, 1, 1)
    assert record.claim is None
    assert record.receipts == (receipt_for(renewed),)


def test_unexpired_claim_of_another_owner_is_refused_until_it_expires(opener):
    provider = opener()
    epoch_a, epoch_b = provider.acquire_epoch(), provider.acquire_epoch()
    provider.register("job", "d", DUE, 1)
    provider.claim("job", "node-a", epoch_a, DUE, 1, START, TTL)
    just_before = START + TTL - timedelta(microseconds=1)
    with pytest.raises(ClaimConflict) as conflict:
        provider.claim("job", "node-b", epoch_b, DUE, 1, just_before, TTL)
    assert conflict.value.retry_at == START + TTL
    claim_b = provider.claim("job", "node-b", epoch_b, DUE, 1, START + TTL, TTL)
    assert claim_b.owner_id == "node-b"


def test_a_newer_epoch_fences_the_older_owner(opener):
    provider = opener()
    old, new = provider.acquire_epoch(), provider.acquire_epoch()
    provider.register("job", "d", DUE, 1)
    stale = provider.claim("job", "node-a", old, DUE, 1, START, TTL)
    provider.claim("job", "node-b", new, DUE, 1, START + TTL, TTL)
    with pytest.raises(ClaimLost):
        provider.renew(stale, START + TTL, TTL)
    with pytest.raises(ClaimLost):
        provider.commit_receipt(stale, receipt_for(stale), None, 1, 1)
    with pytest.raises(ClaimLost, match="fenced"):
        provider.claim("job", "node-a", old, DUE, 1, START + 2 * TTL, TTL)


def test_the_same_owner_restarting_takes_its_claim_over_at_once(opener):
    provider = opener()
    old = provider.acquire_epoch()
    provider.register("job", "d", DUE, 1)
    provider.claim("job", "node-a", old, DUE, 1, START, TTL)
    restarted = opener()
    new = restarted.acquire_epoch()
    claim = restarted.claim("job", "node-a", new, DUE, 1, START + timedelta(seconds=1), TTL)
    assert claim.epoch == new


def test_claim_for_a_slot_the_record_has_moved_past_is_refused(opener):
    provider = opener()
    epoch = provider.acquire_epoch()
    provider.register("job", "d", DUE, 2)
    with pytest.raises(ClaimConflict, match="moved on"):
        provider.claim("job", "node-a", epoch, DUE, 1, START, TTL)


def test_receipts_are_bounded(opener):
    provider = opener()
    epoch = provider.acquire_epoch()
    due = DUE
    provider.register("job", "d", due, 1)
    for _ in range(RECEIPTS_PER_TASK_MAX + 3):
        claim = provider.claim("job", "node-a", epoch, due, 1, START, TTL)
        due = due + timedelta(minutes=1)
        provider.commit_receipt(claim, receipt_for(claim), due, 1, 0)
    receipts = opener().load("job").receipts
    assert len(receipts) == RECEIPTS_PER_TASK_MAX
    assert receipts[-1].due == due - timedelta(minutes=1)


def test_records_are_listed_in_key_order(opener):
    provider = opener()
    for key in ("b", "a", "c"):
        provider.register(key, "d", DUE, 1)
    assert [r.task_key for r in opener().records()] == ["a", "b", "c"]


def test_sqlite_row_with_a_bad_checksum_is_refused(tmp_path):
    import apsw

    from appliance.local import SnapshotCorrupt

    path = tmp_path / "state.sqlite"
    provider = SqliteStateProvider(path)
    provider.register("job", "d", DUE, 1)
    provider.close()
    connection = apsw.Connection(str(path))
    connection.execute(
        "UPDATE local_tasks SET body = CAST(replace(CAST(body AS TEXT), '\"d\"', '\"e\"') AS BLOB)"
    )
    connection.close()
    provider = SqliteStateProvider(path)
    try:
        with pytest.raises(SnapshotCorrupt, match="checksum mismatch"):
            provider.load("job")
    finally:
        provider.close()


def test_sqlite_store_of_another_schema_version_is_refused(tmp_path):
    import apsw

    from appliance.local import StateProviderError

    path = tmp_path / "state.sqlite"
    SqliteStateProvider(path).close()
    connection = apsw.Connection(str(path))
    connection.execute("UPDATE local_meta SET value = 2 WHERE key = 'schema_version'")
    connection.close()
    with pytest.raises(StateProviderError, match="schema version 2"):
        SqliteStateProvider(path)
