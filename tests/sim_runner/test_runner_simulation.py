"""The runner's state machine under takeovers and a faulty worker, over many seeds.

Every seed drives a whole run (tests/sim_runner/runner_sim.py): owners taking over in turn, stale
proposals committed late, a worker with lost acknowledgements, delayed and duplicated admission
requests and crashes, replicas crashing and catching up. A failure names its seed; replay it with
``python -m tests.sim_runner.runner_sim SEED``.
"""

from __future__ import annotations

from collections import Counter

import pytest

from appliance.core import ownership, txn
from appliance.core.state import Admit
from tests.sim_runner.runner_sim import Simulation, Violation, run_seed

SEEDS = 500
CHUNK = 50


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK))
def test_every_seed_keeps_the_admission_invariants(first):
    for seed in range(first, first + CHUNK):
        try:
            run_seed(seed)
        except Violation as violation:
            pytest.fail(f"{violation} (replay: python -m tests.sim_runner.runner_sim {seed})")


def test_the_faults_reach_every_rule_under_test():
    events: Counter = Counter()
    for seed in range(40):
        events.update(run_seed(seed).cluster.events)
    for needed in [
        ("takeover", "fenced"),  # unadmitted claims fenced at takeover
        ("takeover", "reobserve"),  # admitted ones kept
        ("takeover", "resume_cancelling"),
        ("Admit", "existing"),  # the same incarnation asking again
        ("Admit", "IncarnationMismatch"),  # another incarnation refused
        ("Admit", "Fenced"),  # a late admission after the takeover fence
        ("ClaimOccurrence", "StaleEpoch"),  # a deposed owner's claim committed late
        ("ObserveAndClaim", "claimed"),  # claims made in the observation's commit
        ("FenceAfterCancel", "ok"),
        ("FenceAfterCancel", "PermitExists"),  # not-launched is unprovable with a permit
        ("MarkUnknown", "ok"),
        ("AcknowledgeStopped", "ok"),
        # The operator commands beyond the seeds (issue 22), under the same takeovers:
        ("RunNow", "first"),
        ("RunNow", "repeated"),  # a repeated request id gets the first answer
        ("RunNow", "Paused"),
        ("UpdateSchedule", "ok"),
        ("claim", "kept code"),  # a live occurrence claimed on the code an update replaced
        ("Pause", "ok"),
        ("Resume", "ok"),
        ("ClaimOccurrence", "ClaimRefused"),  # among them: claims while paused
        ("EnableSchedule", "ok"),
        ("Backfill", "ok"),
    ]:
        assert events[needed] > 0, needed


def test_a_seed_reproduces_its_run_exactly():
    first, second = run_seed(7), run_seed(7)
    assert first.cluster.replicas[0].to_json() == second.cluster.replicas[0].to_json()
    assert first.cluster.log == second.cluster.log


def _first_violation(seeds: range) -> Violation | None:
    for seed in seeds:
        try:
            run_seed(seed)
        except Violation as violation:
            return violation
    return None


def test_the_checkers_catch_an_admission_that_forgets_its_permit(monkeypatch):
    # The bug "dedup by epoch": a repeated request no longer finds the permit and gets another.
    original, grows = txn._APPLY[Admit]

    def forgetful(t, command):
        name = f"admission/{command.binding.occurrence_id}"
        value = t.extra(name)
        if value is not None and value["permit"] is not None:
            t.put_extra(name, {**value, "permit": None})
        return original(t, command)

    monkeypatch.setitem(txn._APPLY, Admit, (forgetful, grows))
    violation = _first_violation(range(30))
    assert violation is not None
    assert violation.rule in {"one permit per invocation", "same incarnation, same permit"}


def test_the_checkers_catch_a_takeover_that_fences_admitted_work(monkeypatch):
    monkeypatch.setattr(ownership, "admission_of", lambda get, oid: None)
    violation = _first_violation(range(30))
    assert violation is not None
    assert violation.rule == "no automatic retry without a confirmed failure"


def test_the_checkers_catch_a_claim_that_binds_the_current_code(monkeypatch):
    # The bug issue 22 names: claims use the current definition's code, not the occurrence's.
    from appliance.core import admission, live_code

    monkeypatch.setattr(admission, "code_for", lambda schedule, oid: schedule.definition.code)
    monkeypatch.setattr(
        admission,
        "digest_for",
        lambda schedule, oid: live_code.payload_digest(schedule.definition.code),
    )
    violation = _first_violation(range(30))
    assert violation is not None
    assert violation.rule == "a live occurrence keeps its code"


def test_the_checkers_catch_a_run_now_that_forgets_its_request(monkeypatch):
    from appliance.core import schedule_commands

    monkeypatch.setattr(schedule_commands, "_requests", lambda t: [])
    violation = _first_violation(range(30))
    assert violation is not None
    assert violation.rule == "one occurrence per request id"


def test_the_checkers_catch_an_occurrence_left_behind(monkeypatch):
    monkeypatch.setattr(Simulation, "_claim_and_dispatch", lambda self, state: None)
    violation = _first_violation(range(3))
    assert violation is not None
    assert violation.rule == "no occurrence silently lost"
