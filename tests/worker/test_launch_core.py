"""The launch core without I/O: the same decisions over the in-memory store and a simulated engine.

``WorkerService`` (tests/worker/test_service.py) drives ``LaunchCore`` over SQLite and V8; here
the core is driven step by step, as the system simulator drives it, so the interleavings that
need threads and sockets there are plain call orders here.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from appliance.config.worker import EngineSettings
from appliance.sim.system.engine import EngineFaults, SimEngine
from appliance.worker.admission_result import AdmissionResult
from appliance.worker.launch import Answer, LaunchCore, LaunchSettings, Reserving
from appliance.worker.memory_store import MemoryDisk, MemoryWorkerStore
from appliance.worker.wire import parse_cancel, parse_exec
from tests.worker.peers import NAMESPACE, WORKER_ID, binding, exec_body

CODE = "console.log(1)"


class FixedClock:
    def __init__(self) -> None:
        self.at = datetime(2030, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.at


class Harness:
    """One worker incarnation on a disk that outlives it."""

    def __init__(self, disk: MemoryDisk | None = None, generation: int = 1) -> None:
        self.disk = disk or MemoryDisk()
        self.clock = FixedClock()
        self.queue: list[Callable[[], None]] = []
        self.launched: list[str] = []
        self.store = MemoryWorkerStore.open(
            self.disk, namespace=NAMESPACE, incarnation_id=f"inc-{generation}", now_ms=1
        )
        self.engine = SimEngine(
            rng=random.Random(1),
            faults=EngineFaults(weights=(0.0, 0.0, 1.0, 0.0), stop_later=0.0),  # scripts hang
            schedule=lambda delay, fn: self.queue.append(fn),
            now=self.clock.now,
            on_launch=lambda request: self.launched.append(request.execution_id),
            slots=2,
        )
        self.core = LaunchCore(
            settings=LaunchSettings(NAMESPACE, WORKER_ID, EngineSettings()),
            store=self.store,
            engine=self.engine,
            clock=self.clock,
        )

    def begin(self, occurrence_id: int, **kwargs: object) -> Answer | Reserving:
        return self.core.begin_exec(
            parse_exec(exec_body(CODE, occurrence_id=occurrence_id, **kwargs))
        )

    def grant(self, step: Reserving) -> Answer:
        permit = {
            "invocation": {
                "namespace": NAMESPACE,
                "schedule_id": 3,
                "occurrence_id": step.request.binding.occurrence_id,
                "attempt": 1,
            },
            "incarnation": self.store.incarnation_id,
            "granted_epoch": 4,
            "granted_at": "2030-01-01T00:00:00Z",
        }
        try:
            return self.core.permit_arrived(step, AdmissionResult("granted", permit, "granted"))
        finally:
            self.core.end_exec(step)

    def cancel(self, occurrence_id: int) -> Answer:
        request = parse_cancel(
            {"protocol": 1, "binding": binding(CODE, occurrence_id=occurrence_id)}
        )
        fenced = self.core.fence_for_cancel(request)
        assert not isinstance(fenced, Answer)
        return self.core.cancel_answer(request, fenced)


def test_a_granted_exec_is_consumed_durably_then_launched_once() -> None:
    worker = Harness()
    step = worker.begin(1)
    assert isinstance(step, Reserving)
    answer = worker.grant(step)
    assert answer.status == 202 and answer.body["state"] == "accepted"
    assert worker.launched == ["s3-o1-a1"]
    synced = worker.disk.synced["invocations"][(NAMESPACE, 3, 1, 1)]
    assert synced["consumed"]["incarnation_id"] == "inc-1"
    again = worker.begin(1)
    assert isinstance(again, Answer) and again.status == 200 and again.body["state"] == "running"
    assert worker.launched == ["s3-o1-a1"]


def test_a_cancel_while_the_permit_request_is_in_flight_wins() -> None:
    worker = Harness()
    step = worker.begin(2)
    assert isinstance(step, Reserving)
    cancel = worker.cancel(2)  # the driver holds no lock while the permit is asked for
    assert cancel.body["result"] == "fenced_before_consume"
    answer = worker.grant(step)
    assert (answer.status, answer.body["error"]["code"]) == (403, "fenced")
    assert worker.launched == []


def test_a_cancel_of_a_running_execution_reports_the_engines_stop() -> None:
    worker = Harness()
    step = worker.begin(3)
    assert isinstance(step, Reserving)
    worker.grant(step)
    cancel = worker.cancel(3)
    assert cancel.body["result"] == "stopped"
    assert worker.store.get_execution("s3-o3-a1").status == "cancelled"


def test_a_reservation_interrupted_by_a_restart_is_fenced_and_never_launched() -> None:
    first = Harness()
    step = first.begin(4)
    assert isinstance(step, Reserving)  # the process dies with its permit request in flight
    second = Harness(first.disk, generation=2)
    assert second.core.mark_lost_executions() == []
    observed = second.core.observation(
        step.request.binding.invocation, second.core.settle(step.request.binding.invocation)
    )
    assert observed.body["status"] == "fenced"
    assert "interrupted before consume" in observed.body["fence"]["reason"]
    again = second.begin(4)
    assert isinstance(again, Answer) and again.body["state"] == "fenced"
    assert second.launched == []


def test_a_launch_lost_with_the_process_is_reported_lost_after_the_restart() -> None:
    first = Harness()
    step = first.begin(5)
    assert isinstance(step, Reserving)
    first.grant(step)
    first.engine.close()
    second = Harness(first.disk, generation=2)
    assert second.core.mark_lost_executions() == ["s3-o5-a1"]
    assert second.store.get_execution("s3-o5-a1").status == "lost"


@pytest.mark.parametrize(("delta_s", "status"), [(-1, 403), (0, 403), (1, None)])
def test_the_grant_is_checked_at_its_expiry_to_the_second(delta_s: int, status: int | None) -> None:
    worker = Harness()
    expires = worker.clock.at + timedelta(seconds=delta_s)
    step = worker.begin(6, expires_at=expires.strftime("%Y-%m-%dT%H:%M:%SZ"))
    if status is None:
        assert isinstance(step, Reserving)
    else:
        assert isinstance(step, Answer) and step.body["error"]["code"] == "grant_expired"


def test_a_full_pool_is_a_definite_refusal_before_anything_durable() -> None:
    worker = Harness()
    assert isinstance(worker.begin(7), Reserving)
    assert isinstance(worker.begin(8), Reserving)
    full = worker.begin(9)
    assert isinstance(full, Answer) and full.body["error"]["code"] == "pool_full"
    assert (NAMESPACE, 3, 9, 1) not in worker.disk.current["invocations"]
