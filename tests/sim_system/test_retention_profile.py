"""The whole-system simulator's retention profile (issue 19 item 5): records retire, the owners
state the floor W, the worker prunes at or below it, and exec requests are replayed to the
worker later — with the one-launch checker (and every other rule) on. A failure names its seed;
replay it with ``python -m appliance.sim.system --seeds 1 --start SEED --records 3
--time-scale 30 --verbose``."""

from __future__ import annotations

from collections import Counter

import pytest

from appliance.sim.system.world import SystemOptions, run_system_seed
from appliance.worker.launch import LaunchCore

OPTIONS = SystemOptions(records=3, time_scale=30)
SEEDS = 12


def _run(seeds: int) -> Counter[str]:
    reached: Counter[str] = Counter()
    for seed in range(seeds):
        result = run_system_seed(seed, OPTIONS)
        assert result.ok, f"seed {seed}: {result.violation}"
        reached.update(result.reached)
        reached["retained_through"] += result.retained_through
    return reached


def test_retention_profile_seeds_keep_every_rule_and_exercise_pruning_and_refusal() -> None:
    reached = _run(SEEDS)
    assert reached["retained_through"] > 0  # W rose in some runs
    assert reached["worker_pruned"] > 0  # the worker deleted records
    assert reached["exec_replayed"] > 0 and reached["exec_retired"] > 0  # and refused replays


def test_without_the_workers_own_refusal_the_quorum_still_refuses_at_or_below_w(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What an older worker binary does on a store a newer one pruned: no local refusal. The
    # replays then ask for permits, and Admit refuses every occurrence at or below W (rule 0).
    monkeypatch.setattr(LaunchCore, "_retired", lambda self, invocation, status: None)
    reached = _run(SEEDS)
    assert reached["exec_retired"] == 0 and reached["worker_pruned"] > 0
    assert reached["exec_replayed"] > 0
