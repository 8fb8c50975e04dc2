"""Health follows the configuration in force after a membership change (issue 20): removed
voters are no longer probed or counted, added ones are, so a replacement raises no false
``no_quorum`` or ``voter_unreachable``."""

from __future__ import annotations

from typing import Any

from appliance.config.addresses import HostPort
from appliance.metrics.voter import peers_in_force, voters_in_force
from appliance.metrics.voters import VoterProbe

GENESIS = {"v2": HostPort("127.0.0.1", 2), "v3": HostPort("127.0.0.1", 3)}


def status(voters: list[str], addresses: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "node_id": "v1",
        "commit_index": 9,
        "configuration": {"voters": voters, "learners": ["v9"], "addresses": addresses or {}},
    }


def test_the_peers_in_force_are_the_configured_voters_but_this_one() -> None:
    replaced = status(["v1", "v3", "v5"], {"v5": "127.0.0.1:5", "v9": "127.0.0.1:9"})
    assert peers_in_force(replaced, GENESIS) == {
        "v3": HostPort("127.0.0.1", 3),
        "v5": HostPort("127.0.0.1", 5),
    }
    assert voters_in_force(replaced) == 3
    assert peers_in_force({}, GENESIS) is None and voters_in_force({}) is None


def test_the_probe_follows_a_new_peer_set_and_drops_its_cached_answers() -> None:
    now = [0.0]
    probe = VoterProbe(GENESIS, "token", timeout_ms=100, clock=lambda: now[0])
    try:
        probe._ask = lambda addr: {"role": "follower", "applied_index": 9}  # type: ignore[method-assign]
        assert [v.node_id for v in probe.views(9)] == ["v2", "v3"]
        probe.follow({"v3": GENESIS["v3"], "v5": HostPort("127.0.0.1", 5)})
        views = probe.views(9)  # within the cache interval, yet the new set is asked
        assert [(v.node_id, v.reachable) for v in views] == [("v3", True), ("v5", True)]
        assert probe.genesis == GENESIS
    finally:
        probe.close()
