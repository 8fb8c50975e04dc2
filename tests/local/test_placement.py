"""The placement engine is deterministic and explains every rejection and choice."""

from __future__ import annotations

import itertools

import pytest

from appliance.local import (
    InvalidPlacementInput,
    PlacementCandidate,
    PlacementEngine,
    ResourceRequest,
    Resources,
)

REQUEST = ResourceRequest(Resources(cpu_millis=500, memory_mb=256), {"zone": "a"})


def candidates():
    return [
        PlacementCandidate("small", Resources(1000, 512), Resources(600, 0), {"zone": "a"}),
        PlacementCandidate("big", Resources(4000, 4096), Resources(1000, 1024), {"zone": "a"}),
        PlacementCandidate("wrong-zone", Resources(8000, 8192), labels={"zone": "b"}),
        PlacementCandidate("no-zone", Resources(8000, 8192)),
        PlacementCandidate("medium", Resources(2000, 1024), Resources(0, 0), {"zone": "a"}),
    ]


def test_rejections_carry_every_reason():
    decision = PlacementEngine().place(REQUEST, candidates())
    reasons = {r.candidate_id: r.reasons for r in decision.rejections}
    assert reasons == {
        "no-zone": ("label zone: required 'a', missing",),
        "small": ("cpu_millis: requested 500, free 400",),
        "wrong-zone": ("label zone: required 'a', has 'b'",),
    }


def test_evaluations_score_the_tightest_headroom_and_the_best_wins():
    decision = PlacementEngine().place(REQUEST, candidates())
    scores = [(e.candidate_id, e.score) for e in decision.evaluations]
    # big: cpu (4000-1000-500)/4000 = 6250, memory (4096-1024-256)/4096 = 6875 -> 6250
    # medium: cpu (2000-500)/2000 = 7500, memory (1024-256)/1024 = 7500 -> 7500
    assert scores == [("medium", 7500), ("big", 6250)]
    assert decision.selected == "medium"
    assert decision.evaluations[1].free_after == Resources(2500, 2816)
    assert decision.explanation.startswith("selected medium with score 7500")


def test_same_inputs_in_any_order_give_the_same_decision_and_explanation():
    engine = PlacementEngine()
    reference = engine.place(REQUEST, candidates())
    for permutation in itertools.permutations(candidates()):
        assert engine.place(REQUEST, permutation) == reference


def test_ties_go_to_the_smallest_candidate_id_and_the_rule_is_stated():
    twins = [
        PlacementCandidate(name, Resources(1000, 1000)) for name in ("node-c", "node-a", "node-b")
    ]
    decision = PlacementEngine().place(ResourceRequest(Resources(100, 100)), twins)
    assert decision.selected == "node-a"
    assert "tie between node-a, node-b, node-c" in decision.explanation
    assert PlacementEngine.tie_break_rule in decision.explanation


def test_no_fit_is_a_decision_without_a_selection():
    decision = PlacementEngine().place(
        ResourceRequest(Resources(10**6, 0)), [PlacementCandidate("x", Resources(1, 1))]
    )
    assert decision.selected is None
    assert decision.explanation == "no candidate fits: 1 rejected"


def test_exact_fit_is_accepted_one_more_is_rejected():
    node = PlacementCandidate("n", Resources(1000, 100), Resources(400, 0))
    fits = PlacementEngine().place(ResourceRequest(Resources(600, 100)), [node])
    assert fits.selected == "n" and fits.evaluations[0].score == 0
    over = PlacementEngine().place(ResourceRequest(Resources(601, 100)), [node])
    assert over.selected is None


def test_invalid_inputs_are_refused():
    with pytest.raises(InvalidPlacementInput, match="duplicate"):
        PlacementEngine().place(REQUEST, [candidates()[0], candidates()[0]])
    with pytest.raises(InvalidPlacementInput):
        Resources(cpu_millis=-1)
    with pytest.raises(InvalidPlacementInput):
        PlacementCandidate("", Resources())
