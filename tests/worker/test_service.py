"""The worker service in-process, with its real parts (store on disk, engine children, a real
admission server) and an injected clock: the rules that need a controlled clock or timing."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from appliance.config.credentials import Secret
from appliance.config.urls import parse_origin
from appliance.config.worker import parse_worker_config
from appliance.engine import Engine
from appliance.http import HttpClient
from appliance.store.worker_store import WorkerStore
from appliance.worker.admission import AdmissionClient
from appliance.worker.service import InvocationLocks, WorkerService
from appliance.worker.wire import parse_cancel, parse_exec
from tests.worker.peers import (
    ADMISSION_TOKEN,
    NAMESPACE,
    WORKER_ID,
    AdmissionPeer,
    binding,
    exec_body,
    wait_gone,
)

NOW = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
_occurrences = itertools.count(1)


class SettableClock:
    def __init__(self, now: datetime) -> None:
        self.value = now

    def now(self) -> datetime:
        return self.value


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(NOW)


@pytest.fixture
def service(
    tmp_path: Path, admission: AdmissionPeer, clock: SettableClock
) -> Iterator[WorkerService]:
    config = parse_worker_config(
        {
            "namespace": NAMESPACE,
            "worker_id": WORKER_ID,
            "data_dir": str(tmp_path / "data"),
            "bearer_env": "W",
            "admission_bearer_env": "A",
            "admission_urls": [admission.url],
            "listen_addr": "127.0.0.1:9",
            "engine": {
                "max_concurrent": 1,
                "max_queued": 0,
                "heap_mb_max": 32,
                "output_limit_bytes": 1024,
            },
        }
    )
    store = WorkerStore.create_or_open(
        config.data_dir, namespace=NAMESPACE, worker_id=WORKER_ID, now_ms=0
    )
    engine = Engine(
        max_concurrent=1, max_queued=0, output_limit_bytes=1024, warm_children=1, clock=clock
    )
    client = HttpClient()
    permits = AdmissionClient(
        (parse_origin(admission.url),), Secret(ADMISSION_TOKEN), store.incarnation_id, client
    )
    yield WorkerService(
        config=config,
        store=store,
        engine=engine,
        admission=permits,
        clock=clock,
        cancel_wait_seconds=0.0,
    )
    assert engine.shutdown(10.0)
    client.close()
    store.close()


def test_a_grant_is_refused_from_the_instant_it_expires(
    service: WorkerService, clock: SettableClock
) -> None:
    expires_at = "2026-11-29T20:00:01Z"
    still_valid = exec_body("1", occurrence_id=next(_occurrences), expires_at=expires_at)
    clock.value = NOW + timedelta(seconds=1) - timedelta(microseconds=1)
    assert service.execute(parse_exec(still_valid)).status == 202
    clock.value = NOW + timedelta(seconds=1)
    expired = exec_body("1", occurrence_id=next(_occurrences), expires_at=expires_at)
    answer = service.execute(parse_exec(expired))
    assert answer.status == 403
    assert answer.body["error"]["code"] == "grant_expired"


def test_a_repeated_exec_after_expiry_learns_the_state_instead_of_a_refusal(
    service: WorkerService, clock: SettableClock
) -> None:
    occurrence = next(_occurrences)
    body = exec_body("1", occurrence_id=occurrence, expires_at="2026-11-29T20:00:01Z")
    assert service.execute(parse_exec(body)).status == 202
    clock.value = NOW + timedelta(hours=1)
    again = service.execute(parse_exec(body))
    assert again.status == 200
    assert again.body["state"] in ("running", "completed")


def test_admitted_work_never_finds_the_pool_full_the_next_exec_is_told_pool_full(
    service: WorkerService, admission: AdmissionPeer
) -> None:
    busy = next(_occurrences)
    assert service.execute(parse_exec(exec_body("while(true){}", occurrence_id=busy))).status == 202
    before = len(admission.requests)
    answer = service.execute(parse_exec(exec_body("1", occurrence_id=next(_occurrences))))
    assert answer.status == 503
    assert answer.body["error"]["code"] == "pool_full"
    assert len(admission.requests) == before  # no permit is asked for work that could not run
    cancel = parse_cancel({"protocol": 1, "binding": binding("while(true){}", occurrence_id=busy)})
    assert service.cancel(cancel).body["result"] in ("stopping", "stopped")


def test_stopping_until_the_engine_confirms_then_stopped(service: WorkerService) -> None:
    occurrence = next(_occurrences)
    code = "while (true) {}"
    started = threading.Event()
    service._engine.add_listener(lambda report: report.started_at and started.set())
    assert service.execute(parse_exec(exec_body(code, occurrence_id=occurrence))).status == 202
    assert started.wait(30)
    cancel = parse_cancel({"protocol": 1, "binding": binding(code, occurrence_id=occurrence)})
    first = service.cancel(cancel).body  # cancel_wait_seconds=0: the reap is not awaited
    assert first["result"] == "stopping"
    pid = first["report"]["pid"]
    final = service._engine.wait(f"s3-o{occurrence}-a1", 30)
    assert final.status.value == "cancelled"
    assert wait_gone({pid}, 0.5) == set()
    assert service.cancel(cancel).body["result"] == "stopped"


def test_the_worker_config_may_only_lower_the_grants_engine_limits(
    service: WorkerService,
) -> None:
    occurrence = next(_occurrences)
    # heap_mb 64 granted, heap_mb_max 32 configured: a 48 MiB allocation must fail.
    code = "const a = []; for (let i = 0; i < 6e6; i++) a.push({i}); a.length"
    assert service.execute(parse_exec(exec_body(code, occurrence_id=occurrence))).status == 202
    report = service._engine.wait(f"s3-o{occurrence}-a1", 60)
    assert report.status.value == "failed"
    assert report.reason == "out of memory"
    assert report.error is not None and "32 MiB" in report.error


def test_the_grant_expiry_is_checked_again_before_consuming(
    service: WorkerService, admission: AdmissionPeer, clock: SettableClock
) -> None:
    occurrence = next(_occurrences)
    body = exec_body("1", occurrence_id=occurrence, expires_at="2026-11-29T20:00:01Z")
    admission.mode = "hold"
    admission.received.clear()
    answers = []
    try:
        sender = threading.Thread(target=lambda: answers.append(service.execute(parse_exec(body))))
        sender.start()
        assert admission.received.wait(30)
        clock.value = NOW + timedelta(seconds=1)  # the grant expires while the permit is in flight
    finally:
        admission.mode = "grant"
        admission.release()
    sender.join(30)
    (answer,) = answers
    assert answer.status == 403
    assert answer.body["error"]["code"] == "grant_expired"
    observed = service.observe(parse_exec(body).binding.invocation).body
    assert observed["status"] == "fenced"
    assert observed["fence"]["reason"] == "grant expired before consume"


def test_output_is_bounded_by_the_engine_limit_and_persisted(service: WorkerService) -> None:
    occurrence = next(_occurrences)
    code = "for (let i = 0; i < 100; i++) console.log('x'.repeat(50)); 'done'"
    assert service.execute(parse_exec(exec_body(code, occurrence_id=occurrence))).status == 202
    service._engine.wait(f"s3-o{occurrence}-a1", 30)
    observed = service.observe(
        parse_exec(exec_body(code, occurrence_id=occurrence)).binding.invocation
    )
    output = observed.body["output"]
    assert output["truncated"] is True
    assert 0 < output["bytes"] <= 1024
    stored = service._store.get_execution(f"s3-o{occurrence}-a1")
    assert stored is not None and stored.status == "completed"
    assert stored.output.decode() == output["text"]


def test_invocation_locks_are_dropped_when_nobody_holds_them() -> None:
    from appliance.store.worker_store import Invocation

    locks = InvocationLocks()
    with locks.hold(Invocation("ns", 1, 1, 1)), locks.hold(Invocation("ns", 1, 1, 2)):
        assert len(locks) == 2
    assert len(locks) == 0
