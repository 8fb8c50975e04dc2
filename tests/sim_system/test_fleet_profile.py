"""The fleet profile of the whole-system simulator (issue 33): 1-4 workers per seed, worker crashes,
partitions between voters and single workers, drains — and the one-launch rule across workers.

A slice of the documented long run (``python -m appliance.sim.system --seeds 10000 --fleet``,
docs/reliability.md): every seed keeps every rule, the runs reach the fleet's decisions, and a
deliberate bug (a fence that trusts the owner's view instead of checking the permit at apply) is
caught.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

import pytest

from appliance.core import state as core
from appliance.core import txn
from appliance.core.runner_parts import AdmissionRecord
from appliance.owner import attempts as attempts_module
from appliance.sim.system import checkers
from appliance.sim.system.world import SystemOptions, SystemResult, run_system_seed

FLEET = SystemOptions(fleet=True)
SEEDS = 40  # the slice in the normal suite (about 0.5 s a seed)
CHUNK = 10


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _replay(seed: int) -> str:
    return f"replay: python -m appliance.sim.system --seeds 1 --start {seed} --fleet --verbose"


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK))
def test_every_fleet_seed_keeps_every_rule(first: int) -> None:
    for seed in range(first, first + CHUNK):
        result = run_system_seed(seed, FLEET)
        assert result.ok, f"seed {seed}: {result.violation} ({_replay(seed)})"
        assert result.unknown_without_permit == 0


def test_the_fleet_profile_reaches_fleets_crashes_partitions_and_drains() -> None:
    sizes: Counter[int] = Counter()
    reached: Counter[str] = Counter()
    for seed in range(SEEDS):
        result = run_system_seed(seed, FLEET)
        sizes[result.workers] += 1
        reached.update(result.reached)
    assert set(sizes) == {1, 2, 3, 4}, sizes
    assert reached["fleet:worker_unreachable"] > 0 and reached["fleet:worker_reachable"] > 0
    assert reached["DrainWorker:ok"] > 0 and reached["UndrainWorker:ok"] > 0
    assert reached["launch"] > 0


def test_a_seed_without_the_fleet_profile_runs_one_worker() -> None:
    result = run_system_seed(3)
    assert result.ok and result.workers == 1


def _first_failure(seeds: int, rules: tuple[str, ...]) -> SystemResult | None:
    for seed in range(seeds):
        result = run_system_seed(seed, FLEET)
        if not result.ok and result.rule in rules:
            return result
    return None


def test_a_fence_that_trusts_the_owners_view_over_a_permit_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bug: the owner believes no permit exists and the fence's apply no longer checks, so an
    # admitted attempt of a worker that stopped answering is fenced and run again elsewhere.
    real_committed = attempts_module.Attempts._committed

    def blind(self, work, record):  # type: ignore[no-untyped-def]
        return replace(real_committed(self, work, record), permit=None)

    monkeypatch.setattr(attempts_module.Attempts, "_committed", blind)
    fence, grows = txn._APPLY[core.FenceDispatch]

    def unchecked(t, command):  # type: ignore[no-untyped-def]
        with monkeypatch.context() as patch:
            patch.setattr(AdmissionRecord, "permit_for", lambda self, attempt: None)
            return fence(t, command)

    monkeypatch.setitem(txn._APPLY, core.FenceDispatch, (unchecked, grows))
    caught = _first_failure(
        SEEDS,
        (
            checkers.RULE_NO_RETRY,
            "at most one launch per invocation",
            "no launch of a superseded or settled attempt",
            checkers.RULE_ONE_WORKER,
        ),
    )
    assert caught is not None, f"no fleet seed of {SEEDS} caught a fence over a permit"
