"""Worker retention without a second launch (issue 19 item 5; docs/worker.md "Retention").

The launch core over the memory store (as the system simulator runs it), and one scenario over a
real core state that shows why the floor must be W — not the highest retired id.
"""

from __future__ import annotations

from datetime import UTC, datetime

from appliance.core.limits import Limits
from appliance.core.runner_parts import retired_through
from appliance.core.state import Admit, MarkUnknown, apply, permit_to_json
from appliance.protocol import v1
from appliance.worker.admission_result import AdmissionResult
from appliance.worker.launch import Answer, LaunchCore, Reserving
from appliance.worker.wire import parse_exec
from tests.core.runner_helpers import claim, owned_state
from tests.core.test_retention import complete, observe_cmd
from tests.core.test_state import MINUTE, T0
from tests.worker.peers import NAMESPACE, WORKER_ID
from tests.worker.test_launch_core import Harness


def launched_and_finished(worker: Harness, occurrence_id: int) -> None:
    step = worker.begin(occurrence_id)
    assert isinstance(step, Reserving)
    assert worker.grant(step).status == 202
    # The harness's scripts hang: a confirmed stop ends it and frees its engine slot.
    assert worker.cancel(occurrence_id).body["result"] == "stopped"


def code_of(answer: Answer | Reserving) -> str | None:
    assert isinstance(answer, Answer)
    error = answer.body.get("error")
    return None if error is None else error["code"]


def test_an_exec_at_or_below_w_is_refused_before_its_existing_record_is_answered() -> None:
    worker = Harness()
    launched_and_finished(worker, 1)
    again = worker.begin(1)
    assert isinstance(again, Answer) and again.body["state"] == "cancelled"  # W = 0: the record
    worker.core.note_retained_through(1)
    refused = worker.begin(1)
    assert isinstance(refused, Answer) and refused.status == 403
    assert code_of(refused) == v1.RETIRED_CODE
    assert refused.body["error"]["retained_through"] == 1
    step = worker.begin(2)  # just above W: the normal path
    assert isinstance(step, Reserving)
    worker.grant(step)
    assert worker.launched == ["s3-o1-a1", "s3-o2-a1"]


def test_observation_at_or_below_w_is_a_definite_410_and_above_it_reads_the_record() -> None:
    worker = Harness()
    launched_and_finished(worker, 1)
    launched_and_finished(worker, 2)
    worker.core.note_retained_through(1)
    inv1, inv2 = (v1.Invocation(NAMESPACE, 3, k, 1) for k in (1, 2))
    answer = worker.core.observation(inv1, worker.core.settle(inv1))
    assert (answer.status, code_of(answer)) == (410, v1.RETIRED_CODE)
    answer = worker.core.observation(inv2, worker.core.settle(inv2))
    assert answer.status == 200 and answer.body["status"] == "cancelled"


def test_a_cancel_at_or_below_w_creates_no_record() -> None:
    worker = Harness()
    worker.core.note_retained_through(5)
    from appliance.worker.wire import parse_cancel
    from tests.worker.peers import binding

    request = parse_cancel({"protocol": 1, "binding": binding("x", occurrence_id=5)})
    answer = worker.core.fence_for_cancel(request)
    assert isinstance(answer, Answer) and (answer.status, code_of(answer)) == (410, "retired")
    assert worker.store.get(request.binding.invocation) is None


def test_w_only_rises_and_pruning_is_bounded_and_keeps_what_is_above_w() -> None:
    worker = Harness()
    for k in range(1, 6):
        launched_and_finished(worker, k)
    assert worker.core.prune_batch() is False  # nothing due before any W
    worker.core.note_retained_through(4)
    worker.core.note_retained_through(2)  # a stale runner's lower W changes nothing
    assert worker.core.retained_through == 4
    assert worker.core.prune_batch(rows_max=3) is True
    assert worker.core.prune_batch(rows_max=3) is False
    assert worker.core.pruned_records == 4
    assert worker.store.counts() == {"invocations": 1, "executions": 1}
    assert worker.store.get(v1.Invocation(NAMESPACE, 3, 5, 1)) is not None
    assert worker.store.retained_through() == 4


def test_an_execution_still_running_is_not_pruned_and_its_report_still_lands() -> None:
    worker = Harness()  # the harness's scripts hang: the execution keeps running
    step = worker.begin(1)
    assert isinstance(step, Reserving)
    worker.grant(step)
    worker.core.note_retained_through(1)
    assert worker.core.prune_batch() is False
    assert worker.store.get(v1.Invocation(NAMESPACE, 3, 1, 1)) is not None


def test_w_survives_a_worker_restart_and_a_replayed_exec_is_still_refused() -> None:
    worker = Harness()
    launched_and_finished(worker, 1)
    worker.core.note_retained_through(1)
    worker.core.prune_batch()
    restarted = Harness(worker.disk, generation=2)
    assert restarted.core.retained_through == 1
    refused = restarted.begin(1)
    assert code_of(refused) == v1.RETIRED_CODE
    assert restarted.launched == []


def test_w_held_only_in_memory_protects_nothing_it_deleted() -> None:
    # Noted but not yet pruned: a restart forgets it, and the record is still there to answer.
    worker = Harness()
    launched_and_finished(worker, 1)
    worker.core.note_retained_through(1)
    restarted = Harness(worker.disk, generation=2)
    assert restarted.core.retained_through == 0
    again = restarted.begin(1)
    assert isinstance(again, Answer) and again.body["state"] == "cancelled"
    assert restarted.launched == []


# ---- why W, and not the highest retired id -------------------------------------------------


class QuorumWorker(Harness):
    """A worker whose permits come from a real core state's ``Admit`` (the quorum's answer)."""

    def __init__(self, state, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.clock.at = datetime.fromtimestamp(T0 + 2, UTC)

    def exec_of(self, binding) -> Answer:
        document = v1.binding_document(binding)
        step = self.core.begin_exec(
            parse_exec({"protocol": 1, "binding": document, "code": "console.log('scheduled')"})
        )
        if isinstance(step, Answer):
            return step
        try:
            granted = apply(self.state, Admit(binding, self.store.incarnation_id, T0 + 2)).value
            result = AdmissionResult("granted", permit_to_json(granted), "granted")
        except Exception as exc:  # a refusal of the quorum
            result = AdmissionResult("refused", None, str(exc))
        try:
            return self.core.permit_arrived(step, result)
        finally:
            self.core.end_exec(step)


def test_pruning_through_the_highest_retired_id_would_let_admit_hand_the_permit_back() -> None:
    # Occurrence 1 is admitted to inc-1 and launched, then Unknown (a lost acknowledgement);
    # later occurrences complete and retire, so the highest retired id passes 1 while W stays 0.
    state = owned_state(Limits(records=2, outstanding=2, running=2), overlap="Concurrent")
    state_binding = claim(state, 1, namespace=NAMESPACE, worker_id=WORKER_ID)
    worker = QuorumWorker(state)
    first = worker.exec_of(state_binding)
    assert first.status == 202
    worker.store.update_execution("s1-o1-a1", status="completed", now_ms=5, result=None)
    apply(state, MarkUnknown(state_binding.invocation, "acknowledgement lost", T0 + 3))
    slot = T0
    for _ in range(3):
        slot += MINUTE
        apply(state, observe_cmd(state, slot))
        complete(state, max(state.occurrences), slot + 1)
    highest_retired = retired_through(state.extra.get)
    assert highest_retired > 1 and state.retained_through() == 0
    # The right floor: W = 0 prunes nothing, and the replayed exec reads the record.
    worker.core.note_retained_through(state.retained_through())
    worker.core.prune_batch()
    again = worker.exec_of(state_binding)
    assert again.status == 200 and again.body["state"] == "completed"
    assert worker.launched == ["s1-o1-a1"]
    # The wrong floor, on a worker without the local refusal (as an older binary would be on a
    # store a newer one pruned): the record is gone, Admit's existing-permit rule hands the
    # same incarnation its permit back, and the invocation is launched a second time.
    LaunchCore_retired = LaunchCore._retired
    try:
        LaunchCore._retired = lambda self, invocation, status: None  # type: ignore[method-assign]
        worker.core.note_retained_through(highest_retired)
        worker.core.prune_batch()
        assert worker.store.get(v1.Invocation(NAMESPACE, 1, 1, 1)) is None
        # The real pool forgets terminal reports beyond its bound (engine/pool.py
        # ``_evict_locked``), so its duplicate-id check is no defence for long: model that.
        del worker.engine._runs["s1-o1-a1"]
        replayed = worker.exec_of(state_binding)
    finally:
        LaunchCore._retired = LaunchCore_retired  # type: ignore[method-assign]
    assert replayed.status == 202
    assert worker.launched == ["s1-o1-a1", "s1-o1-a1"]  # what W rules out
