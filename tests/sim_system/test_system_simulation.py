"""The whole system, simulated over many seeds, and deliberate bugs the checkers must catch.

Every seed drives appliance/sim/system/world.py: real RaftNodes, the real apply, real Owners and
the worker's real launch core, with lost and reordered messages, partitions (also between the
voters and the worker), voter and worker crashes (a worker also right after any launch step,
and with power losses that drop its unsynced writes), skewed and jumping clocks, an engine that
completes, fails, hangs and loses work, and an operator who cancels, runs now (repeating a
request id, also after a takeover), pauses and resumes, updates the code mid-run, disables and
enables. A failure names its seed; replay it with
``python -m appliance.sim.system --seeds 1 --start SEED --verbose``.

The long run (10,000 seeds) and its time are in docs/reliability.md.
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.core import admission as core_admission
from appliance.core import claims as core_claims
from appliance.core import live_code, policy_apply, txn
from appliance.core import state as core
from appliance.core.occurrence import Occurrence
from appliance.owner import attempts as owner_attempts
from appliance.owner import dispatch_outcome, ownership
from appliance.owner import owner as owner_module
from appliance.owner.worker_answers import CancelResult
from appliance.protocol.v1 import payload_sha256
from appliance.sim.system import checkers, voter, worker_process, world
from appliance.sim.system.config import liveness_ms_for
from appliance.sim.system.world import SystemResult, run_system_seed
from appliance.worker.memory_store import MemoryWorkerStore

SEEDS = 100  # the bounded slice in the normal suite (about 0.15-0.4 s a seed)
CHUNK = 20
MUTATION_SEEDS_PAUSE = 20  # first caught at seed 13 (paced dispatch changed the runs)
MUTATION_SEEDS_CODE = 30  # first caught at seed 20 (after the charging switch entry shifted seeds)


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)  # the components log every refusal they make
    yield
    logging.disable(logging.NOTSET)


def _replay(seed: int) -> str:
    return f"replay: python -m appliance.sim.system --seeds 1 --start {seed} --verbose"


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK))
def test_every_seed_keeps_every_rule(first: int) -> None:
    for seed in range(first, first + CHUNK):
        result = run_system_seed(seed)
        assert result.ok, f"seed {seed}: {result.violation} ({_replay(seed)})"


def test_the_faults_reach_every_rule_under_test() -> None:
    reached: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    for seed in range(30):
        result = run_system_seed(seed)
        assert result.ok, result.violation
        reached.update(result.reached)
        totals.update(
            worker_crashes=result.worker_crashes,
            power_losses=result.power_losses,
            voter_crashes=result.voter_crashes,
            unknown_with_permit=result.unknown_with_permit,
        )
        assert result.unknown_without_permit == 0  # issue 23: such attempts are fenced
    for needed in [
        "AcquireOwnership:ok",  # takeovers
        "ObserveAndClaim:ok",  # claims folded into the observation
        "Admit:ok",
        "Admit:Fenced",  # a late permit request after a fence
        "MarkUnknown:ok",
        "FenceDispatch:ok",  # the owner's own attempt without a permit, fenced (issue 23)
        "RecordOutcome:ok",
        "RetryDue:ok",
        "FenceAfterCancel:PermitExists",  # not-launched is unprovable with a permit
        "ConfirmCancelled:ok",
        "launch",
        "retry_after_failure",  # a confirmed failure starts the next attempt
        "retry_after_fence",  # a fenced attempt (no permit) is claimed again
        "cancelled_launched",  # Cancelled after the engine confirmed the stop
        "cancelled_fenced",  # Cancelled before any launch
    ]:
        assert reached[needed] > 0, needed
    for fault in totals:
        assert totals[fault] > 0, fault


BURST_SEEDS = 12


def test_the_burst_profile_waits_in_the_engine_queue_and_keeps_every_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 17: four schedules due together wait in the engine's FIFO queue, and the owner's
    # queue view defers looks, promotes them at the front and after the stated queue shrank.
    from appliance.owner import queue as owner_queue

    seen: Counter[str] = Counter()
    answer, leave = owner_queue.QueueView.answer, owner_queue.QueueView.leave

    def counted_answer(view: Any, oid: int, work: Any, *, waiting: bool, capacity: Any) -> Any:
        deferred = len(view._deferred)
        soon = answer(view, oid, work, waiting=waiting, capacity=capacity)
        seen.update(waiting=waiting, deferred=len(view._deferred) > deferred, soon=len(soon))
        return soon

    def counted_leave(view: Any, oid: int) -> Any:
        promoted = leave(view, oid)
        seen.update(promoted=len(promoted))
        return promoted

    monkeypatch.setattr(owner_queue.QueueView, "answer", counted_answer)
    monkeypatch.setattr(owner_queue.QueueView, "leave", counted_leave)
    options = world.SystemOptions(schedules=4, liveness_ms=liveness_ms_for(4))
    for seed in range(BURST_SEEDS):
        result = world.SystemSim(seed, options).run()
        assert result.ok, f"seed {seed}: {result.violation} ({_replay(seed)} --schedules 4)"
    for needed in ("waiting", "deferred", "soon", "promoted"):
        assert seen[needed] > 0, (needed, seen)


def test_a_seed_reproduces_its_run_exactly() -> None:
    first = world.SystemSim(7, world.SystemOptions())
    second = world.SystemSim(7, world.SystemOptions())
    assert first.run() == second.run()
    assert first.ledger.committed == second.ledger.committed
    assert first.ledger.reference.state.to_json() == second.ledger.reference.state.to_json()


def test_the_simulator_drives_the_owner_and_worker_core_that_ship() -> None:
    from appliance.runner import loop
    from appliance.worker import service

    assert voter.Owner is owner_module.Owner is loop.Owner
    assert worker_process.LaunchCore is service.LaunchCore


def test_unknown_occurrences_are_counted_and_none_lacks_a_committed_permit() -> None:
    assert world.SystemOptions().strict_unknown  # issue 23: the default checker fails one
    result = run_system_seed(0)
    unknown = result.states.get("Unknown", 0)
    assert result.ok
    assert result.unknown_with_permit == unknown and result.unknown_without_permit == 0


def test_mutation_guessing_unknown_instead_of_fencing_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bug issue 23 removed: an attempt without a permit marked Unknown instead of fenced.
    monkeypatch.setattr(
        dispatch_outcome, "_fence", lambda reason, c: dispatch_outcome.MarkUnknown(reason)
    )
    found = _first_failure(20, "no Unknown without a committed permit")
    assert found is not None, "no seed of 20 caught an Unknown without a permit"


# ---- mutations: deliberate bugs, each caught within the stated number of seeds ------------------


def _first_failure(seeds: int, rule: str | None = None) -> SystemResult | None:
    """The first failing run among ``seeds`` (of ``rule``, when one is named)."""
    for seed in range(seeds):
        result = run_system_seed(seed)
        if not result.ok and rule in (None, result.rule):
            return result
    return None


def test_an_owner_that_redispatches_after_unknown_is_caught(monkeypatch: pytest.MonkeyPatch):
    # The bug: an uncertain dispatch (or an unreachable worker past its deadline) is recorded as
    # a failure, so the retry policy dispatches the next attempt while the first may run.
    def failed_instead(namespace, record, reason, now_s):
        return core.RecordOutcome(record.id, record.attempt, "failed", now_s, reason=reason)

    monkeypatch.setattr(ownership, "mark_unknown_command", failed_instead)
    caught = _first_failure(40)  # first caught at seed 18
    assert caught is not None
    assert caught.rule == checkers.RULE_NO_RETRY


def test_an_admission_of_a_stale_epoch_claim_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bug: a takeover keeps the old owner's unadmitted claims and the admission no longer
    # compares the claim's epoch with the current one.
    real_epoch = core_admission._current_epoch

    class AnyEpoch(int):
        def __eq__(self, other: object) -> bool:
            return True

        def __ne__(self, other: object) -> bool:
            return False

        __hash__ = int.__hash__

    monkeypatch.setattr(core_admission, "_current_epoch", lambda t: AnyEpoch(real_epoch(t)))
    acquire, grows = txn._APPLY[core.AcquireOwnership]

    def keep_claims(t, command):
        with monkeypatch.context() as patch:
            patch.setattr(Occurrence, "reserving", property(lambda self: False))
            return acquire(t, command)

    monkeypatch.setitem(txn._APPLY, core.AcquireOwnership, (keep_claims, grows))
    # Caught as a stall (seed 22 since the owner also commits the charging switch after it
    # acquires, which shifts every seed's schedule): nobody finishes the old owner's kept claims.
    # The permit for a claim of an older epoch itself is first committed at seed 25.
    first = _first_failure(30)
    assert first is not None and first.rule == "liveness"
    caught = _first_failure(60, checkers.RULE_STALE_EPOCH)
    assert caught is not None


def test_an_owner_that_reports_cancelled_before_the_engine_confirmed_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bug: the worker's "stopping" (the engine has not confirmed the stop) read as "stopped".
    original = owner_attempts.Attempts._cancel_done

    def eager(self, work, result):
        if isinstance(result, CancelResult) and result.result == "stopping":
            result = CancelResult("stopped", result.report, result.detail)
        return original(self, work, result)

    monkeypatch.setattr(owner_attempts.Attempts, "_cancel_done", eager)
    # First caught at seed 21: the operator also pauses and disables, so fewer cancels meet
    # running work than when it only cancelled.
    caught = _first_failure(30)
    assert caught is not None
    assert caught.rule == "Cancelled only after an engine-confirmed stop"


def test_a_worker_that_launches_before_its_consume_is_durable_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bug: consume's write is not synced before the submission (a power loss would forget it
    # and a repeated exec could launch the invocation again). Reads do not wait for the fsync
    # either: otherwise the capability's re-check, which reads the consume record, would make
    # it durable before the submission (as WorkerStore's group commit does).
    original = MemoryWorkerStore.consume
    monkeypatch.setattr(MemoryWorkerStore, "_read_barrier", lambda self, table, key: None)

    def unsynced(self, invocation, **kwargs):
        synced = copy.deepcopy(self._disk.synced)
        execution = original(self, invocation, **kwargs)
        self._disk.synced = synced  # the fsync did not happen
        return execution

    monkeypatch.setattr(MemoryWorkerStore, "consume", unsynced)
    caught = _first_failure(10)  # first caught at seed 0
    assert caught is not None
    assert caught.rule == "launch only after the consume is durable"


# ---- the operator commands beyond the seeds (issue 22) ---------------------------------------


def test_the_operator_commands_reach_their_checkers() -> None:
    reached: Counter[str] = Counter()
    for seed in range(15):
        result = run_system_seed(seed)
        assert result.ok, result.violation
        reached.update(result.reached)
    for needed in [
        "RunNow:ok",
        "run_now_repeated",  # a request id sent again
        "run_now_repeat_after_takeover",  # ... to the owner of a later epoch
        "Pause:ok",
        "Resume:ok",
        "RunNow:Paused",  # run_now refused while paused
        "UpdateSchedule:ok",  # new code mid-run
        "EnableSchedule:ok",
        "DisableSchedule:ok",
        "claim_checked_digest",
    ]:
        assert reached[needed] > 0, needed


def test_an_apply_that_ignores_the_pause_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bug: the observation and the claim no longer see the committed pause.
    monkeypatch.setattr(policy_apply, "PAUSED_PART", "not-the-pause")
    monkeypatch.setattr(core_claims, "PAUSED_PART", "not-the-pause")
    caught = _first_failure(MUTATION_SEEDS_PAUSE)
    assert caught is not None, f"no seed of {MUTATION_SEEDS_PAUSE} caught it"
    assert caught.rule == checkers.RULE_PAUSED


def test_a_claim_with_the_newest_code_after_an_update_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bug: a live occurrence is claimed (retried, or re-claimed after a takeover) with the
    # schedule's newest code instead of the code it was created with (and runs that code).
    def newest(schedule, occurrence_id):
        return schedule.definition.code

    monkeypatch.setattr(live_code, "code_for", newest)  # what the owner dispatches
    monkeypatch.setattr(core_admission, "code_for", newest)  # what it claims with
    monkeypatch.setattr(
        core_admission,
        "digest_for",
        lambda schedule, oid: payload_sha256(schedule.definition.code),
    )
    caught = _first_failure(MUTATION_SEEDS_CODE)
    assert caught is not None, f"no seed of {MUTATION_SEEDS_CODE} caught it"
    assert caught.rule == checkers.RULE_CREATED_CODE
