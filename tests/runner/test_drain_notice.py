"""What Ctrl-C says (issue 21, Build 7): what the drain waits for, and for how long."""

from __future__ import annotations

import json
from dataclasses import dataclass

from appliance.runner.drain_notice import SHOWN_MAX, drain_notice, open_occurrences
from appliance.runner.worker_client import ObserveResult
from tests.runner.harness import T0, Voter, definition, wait_until


@dataclass
class _Work:
    occurrence_id: int
    busy: bool = False
    observing: bool = False


class _Runner:
    def __init__(self, *work: _Work) -> None:
        self._work = {w.occurrence_id: w for w in work}


def test_open_occurrences_are_the_observed_or_busy_ones() -> None:
    runner = _Runner(_Work(7, observing=True), _Work(3, busy=True), _Work(5))
    assert open_occurrences(runner) == [3, 7]
    assert open_occurrences(object()) is None  # internals renamed: only the bound is said


def test_the_notice_names_what_it_waits_for_and_the_bound() -> None:
    text = drain_notice([3, 7], 10.0)
    assert "waiting up to 10 s for 2 running occurrence(s) (3, 7)" in text
    assert "not cancelled" in text
    assert "nothing to wait for" in drain_notice([], 10.0)
    assert "waiting up to 2.5 s for the occurrences still running" in drain_notice(None, 2.5)


def test_many_open_occurrences_are_listed_bounded() -> None:
    ids = list(range(1, SHOWN_MAX + 3))
    text = drain_notice(ids, 10.0)
    assert f"{len(ids)} running occurrence(s)" in text
    assert f"{SHOWN_MAX}, ...)" in text and f"{SHOWN_MAX + 1}," not in text


def test_the_real_runner_publishes_the_occurrences_it_still_observes() -> None:
    with Voter() as v:
        v.worker.on_observe = lambda eid: ObserveResult("running")  # never finishes
        v.command(json.dumps({"action": "create", "definition": definition()}))
        assert open_occurrences(v.runner) == []
        v.advance_to(T0 + 60)
        wait_until(lambda: open_occurrences(v.runner) == [1], "occurrence 1 observed")
