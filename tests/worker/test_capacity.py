"""The worker states its capacity in every exec and observation answer (issue 17, "Paced
dispatch"): ``max_concurrent``, ``max_queued``, the slots free to start at once and the room left
in the queue — at the top of a 200/202, inside ``error`` of a 503 (so a not-dispatched answer
still has exactly ``protocol`` and ``error``)."""

from __future__ import annotations

from appliance.engine.memory import InMemoryEngine
from appliance.owner.worker_answers import capacity_of
from appliance.protocol import v1
from appliance.worker.launch import Answer, Reserving
from tests.worker.peers import NAMESPACE
from tests.worker.test_launch_core import Harness


def test_the_pool_engine_counts_what_is_reserved_against_both_limits() -> None:
    engine = InMemoryEngine(max_concurrent=2, max_queued=2)
    try:
        held = []
        for reserved in range(5):
            assert engine.capacity() == (2, 2, reserved)
            if reserved < 4:
                held.append(engine.reserve())
        held.pop().release()
        assert engine.capacity() == (2, 2, 3)
    finally:
        engine.shutdown(1.0)


def test_free_slots_then_queue_room_down_to_zero_at_the_boundary() -> None:
    worker = Harness()  # the simulated engine: two slots, no queue
    first = worker.core.capacity_document()
    assert first == {"max_concurrent": 2, "max_queued": 0, "free_slots": 2, "queue_room": 0}
    step = worker.begin(1)
    assert isinstance(step, Reserving)
    accepted = worker.core.with_capacity(worker.grant(step))
    assert accepted.status == 202
    assert accepted.body["capacity"]["free_slots"] == 1
    step = worker.begin(2)
    assert isinstance(step, Reserving)
    worker.grant(step)
    full = worker.begin(3)
    assert isinstance(full, Answer)
    stated = worker.core.with_capacity(full)
    assert set(stated.body) == {"protocol", "error"}  # still a well-formed not-dispatched answer
    assert stated.body["error"]["code"] == "pool_full"
    assert stated.body["error"]["capacity"] == {
        "max_concurrent": 2,
        "max_queued": 0,
        "free_slots": 0,
        "queue_room": 0,
    }
    invocation = v1.Invocation(NAMESPACE, 3, 1, 1)
    observed = worker.core.with_capacity(
        worker.core.observation(invocation, worker.core.settle(invocation))
    )
    assert observed.body["status"] == "running" and observed.body["capacity"]["free_slots"] == 0
    assert capacity_of(observed.body["capacity"]) is not None


class _Silent:
    """An engine without ``capacity`` (an older engine, or a test double)."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        if name == "capacity":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_an_engine_that_cannot_say_leaves_every_answer_unchanged() -> None:
    worker = Harness()
    worker.core._engine = _Silent(worker.engine)  # type: ignore[assignment]
    answer = Answer(202, {"protocol": 1, "execution_id": "s3-o1-a1", "state": "accepted"})
    assert worker.core.capacity_document() is None
    assert worker.core.with_capacity(answer) == answer


def test_the_listener_takes_every_exec_the_owner_sends_plus_their_observations() -> None:
    """Each connection is served on its own thread (a DirectServer): the owner sends at most its
    task pool's execs at once, each with an observation of the same work in flight, and the
    listener holds all of them with room to spare for a flood to compete for."""
    from appliance.runner.loop import TASK_THREADS
    from appliance.worker.runtime import WORKER_CONNECTIONS_MAX

    assert 2 * TASK_THREADS <= WORKER_CONNECTIONS_MAX
