"""The fleet's amendments (appliance/core/fleet.py): add, drain, undrain, remove a worker."""

from __future__ import annotations

import pytest

from appliance.core.amendments import AmendmentRefused, StaleAmendment, amendment_part
from appliance.core.errors import CoreError
from appliance.core.runner_errors import BindingMismatch
from appliance.core.state import (
    AddWorker,
    AmendRemote,
    Cancel,
    DrainWorker,
    MarkUnknown,
    RecordOutcome,
    RemoveWorker,
    UndrainWorker,
    amendment_index,
    apply,
    command_from_json,
    command_to_json,
    fleet_state,
    from_json,
    needs_fleet_reader,
    workers_in_force,
)
from tests.core.runner_helpers import NAMESPACE, WORKER, claim, owned_state
from tests.core.test_state import T0, observe


def worker(worker_id: str, url: str | None = None, **labels: str) -> dict:
    return {
        "worker_id": worker_id,
        "url": url or f"http://127.0.0.1:{4700 + int(worker_id[-1])}",
        "labels": labels,
        "bearer_env": None,
        "admission_bearer_env": None,
    }


GENESIS = worker("worker-1")  # the genesis fleet of runner_helpers: one worker


def add(state, base: int, new: dict, before: list[dict] | None = None):
    fleet = [GENESIS] if before is None else before
    return apply(state, AddWorker(base, T0, new, (*fleet, new))).value


def test_add_worker_writes_the_fleet_in_force_and_a_delta_in_the_history():
    state = owned_state()
    w2 = worker("worker-2", zone="b")
    amended = add(state, 0, w2)
    assert (amended.amendment, amended.kind, amended.changes) == (
        1,
        "add_worker",
        {"add_worker": w2},
    )
    assert workers_in_force(state) == [GENESIS, w2]
    part = amendment_part(state.extra.get)
    # A one-worker genesis becomes a fleet: url and worker_id are cleared in force.
    assert part["in_force"] == {"workers": [GENESIS, w2], "url": None, "worker_id": None}
    assert needs_fleet_reader(state)
    assert from_json(state.to_json()).to_json() == state.to_json()
    # Claims may name either worker now.
    claim(state, worker_id="worker-2")


def test_a_worker_id_or_origin_already_in_the_fleet_is_refused():
    state = owned_state()
    with pytest.raises(AmendmentRefused, match="already a worker"):
        add(state, 0, worker("worker-1", "http://127.0.0.1:4799"))
    add(state, 0, worker("worker-2"))
    with pytest.raises(AmendmentRefused, match="already a worker's origin"):
        add(state, 1, worker("worker-3", GENESIS["url"]), [GENESIS, worker("worker-2")])
    # The list the command carries must be the one in force plus the new worker.
    with pytest.raises(CoreError, match="fleet in force followed by"):
        add(state, 1, worker("worker-3"), [GENESIS])
    assert amendment_index(state) == 1


def test_each_fleet_amendment_is_a_compare_and_set():
    state = owned_state()
    add(state, 0, worker("worker-2"))
    with pytest.raises(StaleAmendment):
        apply(state, DrainWorker(0, T0, "worker-2"))
    apply(state, DrainWorker(1, T0, "worker-2"))
    assert amendment_index(state) == 2


def test_drain_stops_new_claims_and_undrain_allows_them_again():
    state = owned_state()
    add(state, 0, worker("worker-2"))
    apply(state, DrainWorker(1, T0, "worker-2"))
    assert fleet_state(state) == {"draining": ["worker-2"], "removed": []}
    # Drain is not part of the contract a config states: the workers in force are unchanged.
    assert [w["worker_id"] for w in workers_in_force(state)] == ["worker-1", "worker-2"]
    with pytest.raises(BindingMismatch, match="draining"):
        claim(state, worker_id="worker-2")
    with pytest.raises(AmendmentRefused, match="already draining"):
        apply(state, DrainWorker(2, T0, "worker-2"))
    apply(state, UndrainWorker(2, T0, "worker-2"))
    with pytest.raises(AmendmentRefused, match="not draining"):
        apply(state, UndrainWorker(3, T0, "worker-2"))
    claim(state, worker_id="worker-2")


def test_drain_of_a_live_worker_lets_its_attempt_finish():
    state = owned_state()
    claim(state)  # occurrence 1 Running on worker-1
    apply(state, DrainWorker(0, T0 + 2, "worker-1"))
    apply(state, RecordOutcome(1, 1, "completed", T0 + 3))
    assert state.occurrences[1].state.value == "Succeeded"


@pytest.mark.parametrize("how", ["claimed", "unknown", "cancelling"])
def test_remove_is_refused_while_an_attempt_bound_to_the_worker_is_live(how):
    state = owned_state()
    add(state, 0, worker("worker-2"))
    claim(state, worker_id="worker-2")
    if how == "unknown":
        invocation = state_invocation(state)
        apply(state, MarkUnknown(invocation, "lost", T0 + 2))
    elif how == "cancelling":
        apply(state, Cancel(1, T0 + 2))
    assert state.occurrences[1].state.value in ("Running", "Unknown", "Cancelling")
    with pytest.raises(AmendmentRefused, match=r"1 attempt\(s\) bound to worker-2"):
        apply(state, RemoveWorker(1, T0 + 3, "worker-2", (GENESIS,)))
    # An attempt bound to another worker does not hold a worker back.
    apply(state, RemoveWorker(1, T0 + 3, "worker-1", (worker("worker-2"),)))
    assert fleet_state(state)["removed"] == ["worker-1"]


def state_invocation(state):
    from appliance.core.binding import Invocation

    record = state.occurrences[1]
    return Invocation(NAMESPACE, record.schedule_id, 1, record.attempt)


def test_a_removed_worker_id_is_never_reused():
    state = owned_state()
    add(state, 0, worker("worker-2"))
    claim(state, worker_id="worker-2")
    apply(state, RecordOutcome(1, 1, "completed", T0 + 2))  # its attempt ended
    apply(state, RemoveWorker(1, T0 + 3, "worker-2", (GENESIS,)))
    assert fleet_state(state)["removed"] == ["worker-2"]
    assert workers_in_force(state) == [GENESIS]
    with pytest.raises(AmendmentRefused, match="never reused"):
        add(state, 2, worker("worker-2", "http://127.0.0.1:4792"))
    with pytest.raises(AmendmentRefused, match="removed"):
        apply(state, DrainWorker(2, T0, "worker-2"))
    with pytest.raises(AmendmentRefused, match="fleet"):  # nor by amending the remote
        apply(state, AmendRemote(2, T0, worker_id="worker-2"))
    observe(state, T0 + 60)
    with pytest.raises(BindingMismatch, match="removed"):
        claim(state, 2, worker_id="worker-2")


def test_the_last_worker_cannot_be_removed_and_the_list_must_match():
    state = owned_state()
    with pytest.raises(CoreError, match="from 1 to 64"):
        apply(state, RemoveWorker(0, T0, WORKER, ()))
    add(state, 0, worker("worker-2"))
    with pytest.raises(CoreError, match="without the removed worker"):
        apply(state, RemoveWorker(1, T0, "worker-2", (worker("worker-3"),)))


def test_the_fleet_holds_at_most_64_workers():
    state = owned_state()
    fleet = [GENESIS]
    for i in range(2, 65):
        new = worker(f"w-{i}", f"http://127.0.0.1:{5000 + i}")
        apply(state, AddWorker(len(fleet) - 1, T0, new, (*fleet, new)))
        fleet.append(new)
    assert len(workers_in_force(state)) == 64
    over = worker("w-65", "http://127.0.0.1:5065")
    with pytest.raises(CoreError, match="from 1 to 64"):
        apply(state, AddWorker(63, T0, over, (*fleet, over)))


def test_an_amend_remote_is_refused_once_the_remote_is_a_fleet():
    state = owned_state()
    add(state, 0, worker("worker-2"))
    with pytest.raises(AmendmentRefused, match="fleet"):
        apply(state, AmendRemote(1, T0, url="http://127.0.0.1:9999"))


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"worker_id": "-x"}, "worker.worker_id"),
        ({"url": "ftp://h"}, "worker.url"),
        ({"labels": {"a b": "c"}}, "worker.labels"),
        ({"bearer_env": "1X"}, "worker.bearer_env"),
    ],
)
def test_a_malformed_worker_is_refused_naming_the_field(bad, field):
    state = owned_state()
    new = {**worker("worker-2"), **bad}
    with pytest.raises(CoreError, match=field.replace(".", r"\.")):
        apply(state, AddWorker(0, T0, new, (GENESIS, new)))


def test_the_fleet_commands_travel_as_json():
    new = worker("worker-2", zone="b")
    for command in (
        AddWorker(3, T0, new, (GENESIS, new)),
        DrainWorker(1, T0, "worker-2"),
        UndrainWorker(1, T0, "worker-2"),
        RemoveWorker(4, T0, "worker-2", (GENESIS,)),
    ):
        assert command_from_json(command_to_json(command)) == command
