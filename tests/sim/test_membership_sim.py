"""The simulator with membership changes (``membership=True``): learners added and promoted,
voters and leaders removed, leaders crashed between a CONFIG append and its commit, during
partitions, loss and crashes — zero violations; and the membership checkers do fire on a broken
core (mutation checks)."""

from __future__ import annotations

import pytest

from appliance.raft import node as raft_node
from appliance.raft.membership import ConfigHistory, Membership
from appliance.sim.faults import FAULT_CLASSES
from appliance.sim.simulation import SimOptions, run_seed

MEMBERSHIP = SimOptions(nodes=3, fault_classes=frozenset(FAULT_CLASSES), membership=True)


def first_violation(seeds: range) -> str:
    for seed in seeds:
        result = run_seed(seed, MEMBERSHIP)
        if not result.ok:
            return result.violation
    return ""


def test_200_seeds_with_membership_changes_have_no_violation() -> None:
    results = [run_seed(s, MEMBERSHIP) for s in range(200)]
    assert [f"seed {r.seed}: {r.violation}" for r in results if not r.ok] == []
    # The changes do happen, the hard ones included.
    assert sum(r.config_changes for r in results) >= 200
    assert sum(r.config_crashes for r in results) >= 60
    assert sum(r.leaders_removed for r in results) >= 15
    assert sum(r.snapshots_installed for r in results) >= 300
    assert sum(r.disk_losses for r in results) == 0  # not combined (simulation.py says why)


def test_five_voters_with_membership_changes_have_no_violation() -> None:
    options = SimOptions(nodes=5, fault_classes=frozenset(FAULT_CLASSES), membership=True)
    bad = [(s, r.violation) for s in range(1000, 1040) if not (r := run_seed(s, options)).ok]
    assert bad == []


def test_losing_a_config_entry_past_a_matching_append_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bug the checker found while this was built (seed 43): an append that matched a
    prefix of the log dropped the CONFIG entries after it from the node's view."""

    def lossy(self, lo: int, hi: int, found: list[tuple[int, Membership]]) -> None:  # type: ignore[no-untyped-def]
        self.truncate_from(lo)
        self.entries.extend(found)

    monkeypatch.setattr(ConfigHistory, "replace_range", lossy)
    assert "membership" in first_violation(range(100))


def test_a_learner_that_campaigns_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raft_node.RaftNode, "is_voter", property(lambda self: True))
    assert "membership" in first_violation(range(100))
