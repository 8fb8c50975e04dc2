"""Placement (appliance/core/placement.py): labels, definitions' rules, and the pure decision."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.core.definition import definition_to_json, parse_definition
from appliance.core.errors import InvalidDefinition
from appliance.core.features import PLACEMENT_KIND, command_kind
from appliance.core.limits import Limits
from appliance.core.placement import (
    ACTIVE,
    DRAINING,
    LABEL_KEY_BYTES_MAX,
    LABEL_VALUE_BYTES_MAX,
    LABELS_MAX,
    UNREACHABLE,
    Candidate,
    PlacementRules,
    place,
)
from appliance.core.state import CreateSchedule, SeedInitialSchedules, apply, from_json
from appliance.core.state_parts import definition_from_checkpoint
from tests.core.test_state import T0, new_state

BASE = {"code": "1", "cron": "* * * * *", "timezone": "UTC"}


def definition(placement: object) -> object:
    return parse_definition({**BASE, "placement": placement}, Limits())


def problems(placement: object) -> list[tuple[str, str]]:
    with pytest.raises(InvalidDefinition) as info:
        definition(placement)
    return info.value.problems  # type: ignore[attr-defined]


# ---- the definition's placement ------------------------------------------------------------------


def test_a_placement_parses_into_sorted_label_pairs_and_round_trips():
    d = definition({"labels": {"zone": "b", "arch": "x86_64"}, "prefer": {"disk": "ssd"}})
    assert d.placement == PlacementRules((("arch", "x86_64"), ("zone", "b")), (("disk", "ssd"),))
    document = definition_to_json(d)
    assert document["placement"] == {
        "labels": {"arch": "x86_64", "zone": "b"},
        "prefer": {"disk": "ssd"},
    }
    assert parse_definition(document, Limits()) == d
    assert definition_from_checkpoint(document) == d


def test_an_empty_placement_is_omitted_so_digests_from_before_the_fleet_hold():
    assert "placement" not in definition_to_json(parse_definition(BASE, Limits()))
    assert "placement" not in definition_to_json(definition({}))
    assert "placement" not in definition_to_json(definition({"labels": {}, "prefer": {}}))


def test_label_count_limit_is_exact():
    at_limit = {f"k{i}": "v" for i in range(LABELS_MAX)}
    assert len(definition({"labels": at_limit}).placement.labels) == LABELS_MAX
    over = {**at_limit, "one-more": "v"}
    assert problems({"labels": over}) == [
        ("placement.labels", f"must hold at most {LABELS_MAX} labels, got {LABELS_MAX + 1}")
    ]


def test_label_name_and_value_lengths_are_exact():
    definition({"prefer": {"k" * LABEL_KEY_BYTES_MAX: "v" * LABEL_VALUE_BYTES_MAX}})
    key_over = "k" * (LABEL_KEY_BYTES_MAX + 1)
    ((path, message),) = problems({"prefer": {key_over: "v"}})
    assert path.startswith("placement.prefer") and "label name" in message
    ((path, message),) = problems({"prefer": {"k": "v" * (LABEL_VALUE_BYTES_MAX + 1)}})
    assert path == "placement.prefer.k" and "1 to 63" in message


@pytest.mark.parametrize(
    ("placement", "path"),
    [
        ({"labels": {"zone": 1}}, "placement.labels.zone"),
        ({"labels": {"zone": ""}}, "placement.labels.zone"),
        ({"labels": {"zone": "a b"}}, "placement.labels.zone"),
        ({"labels": ["zone"]}, "placement.labels"),
        ({"affinity": {}}, "placement.affinity"),
        ("zone=b", "placement"),
    ],
)
def test_bad_placements_are_refused_naming_the_field(placement, path):
    assert problems(placement)[0][0] == path


def test_a_command_carrying_placement_is_gated_on_the_placement_kind():
    d = definition({"labels": {"zone": "b"}})
    assert command_kind(CreateSchedule(d, T0)) == PLACEMENT_KIND
    assert command_kind(SeedInitialSchedules((d,), T0)) == PLACEMENT_KIND
    plain = parse_definition(BASE, Limits())
    assert command_kind(CreateSchedule(plain, T0)) == "CreateSchedule"


def test_a_placed_schedule_survives_a_checkpoint_and_marks_the_fleet_reader():
    from appliance.core.state import needs_fleet_reader

    state = new_state()
    assert not needs_fleet_reader(state)
    apply(state, CreateSchedule(definition({"labels": {"zone": "b"}}), T0))
    assert needs_fleet_reader(state)
    reloaded = from_json(state.to_json())
    assert reloaded.to_json() == state.to_json() and needs_fleet_reader(reloaded)
    placed = [s for s in reloaded.schedules.values() if s.definition.placement]
    assert placed[0].definition.placement.labels == (("zone", "b"),)


# ---- the decision --------------------------------------------------------------------

ZONE_A = (("zone", "a"),)
ZONE_B = (("zone", "b"),)


def test_hard_labels_reject_every_worker_without_them_and_explain_why():
    decision = place(
        PlacementRules(labels=ZONE_B),
        [Candidate("w1", ZONE_A), Candidate("w2", ZONE_B), Candidate("w3")],
    )
    assert decision.selected == "w2"
    reasons = {r.worker_id: r.reasons for r in decision.rejections}
    assert reasons == {
        "w1": ('label zone: required "b", has "a"',),
        "w3": ('label zone: required "b", missing',),
    }


def test_no_worker_matching_labels_is_a_reason_not_a_choice():
    decision = place(PlacementRules(labels=ZONE_B), [Candidate("w1", ZONE_A)])
    assert decision.selected is None
    assert decision.reason is not None
    assert decision.reason.startswith('no worker matches labels {"zone":"b"}')
    assert 'w1: label zone: required "b", has "a"' in decision.reason


def test_draining_and_unreachable_workers_take_nothing_new():
    decision = place(
        PlacementRules(),
        [Candidate("w1", status=DRAINING), Candidate("w2", status=UNREACHABLE)],
    )
    assert decision.selected is None
    assert decision.reason == "no worker may take new work (w1: draining; w2: unreachable)"
    # A matching worker that only drains: the reason is not "no worker matches labels".
    drained = place(PlacementRules(labels=ZONE_B), [Candidate("w1", ZONE_B, status=DRAINING)])
    assert drained.reason is not None and drained.reason.startswith("no worker may take")


def test_capacity_spreads_work_and_ties_go_to_the_smallest_worker_id():
    rules = PlacementRules()
    tie = place(rules, [Candidate("w2", places=4), Candidate("w1", places=4)])
    assert tie.selected == "w1" and "tie between w1, w2" in tie.explanation
    loaded = place(rules, [Candidate("w1", places=4, in_flight=2), Candidate("w2", places=4)])
    assert loaded.selected == "w2"
    # A full worker is not rejected: when every worker is full the attempt waits at the one
    # least over its capacity (w2: 2 over 8 places, w1: 1 over 2).
    full = place(
        rules, [Candidate("w1", places=2, in_flight=2), Candidate("w2", places=8, in_flight=9)]
    )
    assert full.selected == "w2" and not full.rejections
    room_first = place(
        PlacementRules(prefer=ZONE_B),
        [Candidate("w1", ZONE_B, places=2, in_flight=2), Candidate("w2", ZONE_A, places=2)],
    )
    assert room_first.selected == "w2"  # a free place before a preferred label


def test_preferred_labels_win_among_workers_with_room():
    decision = place(
        PlacementRules(prefer=ZONE_B),
        [Candidate("w1", ZONE_A, places=8), Candidate("w2", ZONE_B, places=8, in_flight=6)],
    )
    assert decision.selected == "w2"
    assert "1 of 1 preferred labels" in decision.evaluations[0].explanation


def test_an_unstated_capacity_counts_one_place():
    decision = place(PlacementRules(), [Candidate("w1", in_flight=1), Candidate("w2", places=4)])
    assert decision.selected == "w2"


def test_bad_candidates_are_refused():
    with pytest.raises(ValueError, match="twice"):
        place(PlacementRules(), [Candidate("w1"), Candidate("w1")])
    with pytest.raises(ValueError, match="status"):
        place(PlacementRules(), [Candidate("w1", status="gone")])
    with pytest.raises(ValueError, match="more than 64"):
        place(PlacementRules(), [Candidate(f"w{i}") for i in range(65)])
    assert place(PlacementRules(), [Candidate(f"w{i:02}") for i in range(64)]).selected == "w00"


candidates = st.lists(
    st.builds(
        Candidate,
        worker_id=st.sampled_from([f"w{i}" for i in range(8)]),
        labels=st.sampled_from([(), ZONE_A, ZONE_B]),
        status=st.sampled_from([ACTIVE, ACTIVE, DRAINING, UNREACHABLE]),
        places=st.one_of(st.none(), st.integers(1, 16)),
        in_flight=st.integers(0, 20),
    ),
    max_size=8,
    unique_by=lambda c: c.worker_id,
)


@given(candidates, st.randoms(use_true_random=False), st.sampled_from([(), ZONE_A, ZONE_B]))
def test_the_same_inputs_in_any_order_give_the_same_decision(workers, rnd, labels):
    rules = PlacementRules(labels=labels, prefer=ZONE_A)
    shuffled = list(workers)
    rnd.shuffle(shuffled)
    first, second = place(rules, workers), place(rules, shuffled)
    assert first == second
    if first.selected is not None:
        chosen = next(c for c in workers if c.worker_id == first.selected)
        assert chosen.status == ACTIVE and set(labels) <= set(chosen.labels)
    else:
        assert first.reason is not None
        assert all(c.status != ACTIVE or not set(labels) <= set(c.labels) for c in workers)
