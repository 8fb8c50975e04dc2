"""What the chaos runs found, each reduced to a minimal in-process reproduction.

Seed 110 of the long run (docs/chaos.md): two attempts were dispatched and accepted, the engine
completed both within a second, but the owner could not observe them (the runner→worker link was
faulty) for ``timeout_seconds`` + grace, so it committed ``Unknown`` ("no outcome within
timeout_seconds + grace"). After the heal the worker answered ``completed`` for both, yet the
same owner never looked again: they stayed ``Unknown`` for good (no safety invariant broke; SPEC
§3 says "Unknown may later resolve to the engine's confirmed outcome (the real result wins)",
and the loop did so for an ambiguous dispatch — not for this path). Fixed: after the deadline the
loop keeps observing an Unknown attempt every ``UNKNOWN_POLL_S``.
"""

from __future__ import annotations

import json

from appliance.runner.worker_client import ObserveResult
from tests.runner.harness import T0, Voter, config, definition, wait_until

TIMEOUT_S = 5
GRACE_S = 30  # appliance.owner.attempts.OBSERVE_GRACE_S


def test_unknown_after_the_observation_deadline_resolves_to_a_later_confirmed_outcome() -> None:
    with Voter(config(timeout_seconds=TIMEOUT_S)) as v:
        reachable = {"yes": False}
        v.worker.on_observe = lambda eid: (
            ObserveResult("completed") if reachable["yes"] else ObserveResult(None, "unreachable")
        )
        reply = v.command(json.dumps({"action": "create", "definition": definition()}))
        assert reply["ok"] is True, reply
        v.advance_to(T0 + 60)
        wait_until(lambda: v.worker.count("observe") >= 1, "a first observation")
        v.advance_to(T0 + 60 + TIMEOUT_S + GRACE_S + 1)
        v.wait_state(1, "Unknown")
        # The link heals: the worker now answers with the engine's confirmed outcome.
        reachable["yes"] = True
        for step_s in range(1, 6):
            v.advance_to(T0 + 60 + TIMEOUT_S + GRACE_S + 1 + 10 * step_s)
        record = v.wait_state(1, "Succeeded")
        assert record.attempt == 1
