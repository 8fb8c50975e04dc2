"""The retention floor W (issue 19 item 5): every occurrence at or below it left the checkpoint."""

from __future__ import annotations

from appliance.core.limits import Limits
from appliance.core.runner_errors import AttemptNotRunning
from appliance.core.serialisation import from_json, to_json
from appliance.core.state import Admit, MarkUnknown, RecordOutcome, apply
from tests.core.runner_helpers import admit, claim, owned_state
from tests.core.test_retention import complete, concurrent_state, observe_cmd
from tests.core.test_state import MINUTE, T0, observe, rejected


def _w_after_reload(state) -> int:
    return from_json(to_json(state)).retained_through()


def test_w_is_zero_on_a_fresh_state_and_follows_retirement_of_the_lowest_id():
    state = concurrent_state(Limits(records=2, outstanding=2, running=2))
    assert state.retained_through() == 0
    observe(state, T0, T0 + 1)
    assert state.retained_through() == 0  # ids 1 and 2 are retained
    complete(state, 1, T0 + 10)
    complete(state, 2, T0 + 11)
    assert state.retained_through() == 0  # terminal is not gone: still in the checkpoint
    report = apply(state, observe_cmd(state, T0 + MINUTE)).value
    assert report.retired == (1,)
    assert state.retained_through() == 1
    assert _w_after_reload(state) == 1


def test_an_old_unknown_record_holds_w_back_below_later_retired_ids():
    state = owned_state(Limits(records=2, outstanding=2, running=2), overlap="Concurrent")
    binding = claim(state, 1)
    admit(state, binding)
    apply(state, MarkUnknown(binding.invocation, "lost acknowledgement", T0 + 3))
    seen = [state.retained_through()]
    slot = T0
    for _ in range(6):  # each new slot retires the previous terminal one, never the Unknown
        slot += MINUTE
        apply(state, observe_cmd(state, slot))
        complete(state, max(state.occurrences), slot + 1)
        seen.append(state.retained_through())
    assert 1 in state.occurrences  # the Unknown is still there
    assert state.extra["retired"]["through"] > 1  # ... below later retired ids
    assert seen == [0] * 7  # W never passes the live Unknown
    assert _w_after_reload(state) == 0


def test_w_only_rises_and_jumps_over_ids_retired_earlier_once_the_old_record_goes():
    state = owned_state(Limits(records=2, outstanding=2, running=2), overlap="Concurrent")
    binding = claim(state, 1)
    admit(state, binding)
    slot = T0
    history = [state.retained_through()]
    for _ in range(4):
        slot += MINUTE
        apply(state, observe_cmd(state, slot))
        complete(state, max(state.occurrences), slot + 1)
        history.append(state.retained_through())
    apply(state, RecordOutcome(1, 1, "completed", slot + 2))  # the old record ends ...
    slot += MINUTE
    apply(state, observe_cmd(state, slot))  # ... and retires: W jumps past ids 2..4
    history.append(state.retained_through())
    assert history == sorted(history)
    assert history[-1] == min(state.occurrences) - 1
    assert history[-1] >= 4
    assert _w_after_reload(state) == history[-1]


def test_admit_at_or_below_w_is_refused_before_the_existing_permit_rule():
    state = owned_state(Limits(records=1, outstanding=1, running=1))
    binding = claim(state)
    assert not admit(state, binding, "inc-1").existing
    assert admit(state, binding, "inc-1").existing  # the same incarnation gets it back ...
    apply(state, RecordOutcome(1, 1, "completed", T0 + 3))
    apply(state, observe_cmd(state, T0 + MINUTE))
    assert state.retained_through() == 1
    # ... but once the occurrence is at or below W, never again.
    error = rejected(state, Admit(binding, "inc-1", T0 + MINUTE + 2), AttemptNotRunning)
    assert "retired" in str(error) and "through 1" in str(error)


def test_an_occurrence_above_w_is_still_admitted():
    state = owned_state(Limits(records=2, outstanding=2, running=2))
    assert state.retained_through() == 0
    binding = claim(state)
    assert admit(state, binding, "inc-1").incarnation == "inc-1"
