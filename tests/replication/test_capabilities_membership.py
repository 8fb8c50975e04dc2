"""The version gate follows the configuration in force (issue 20): a voter added at run time
must report before a new kind is proposed; a removed one no longer counts."""

from __future__ import annotations

from typing import Any

from appliance.capabilities import BASELINE_COMMAND_KINDS, local_capabilities
from appliance.replication.raft_member import voters_in_force
from appliance.replication.voter_capabilities import VoterCapabilities

GENESIS = {"v2": "127.0.0.1:2", "v3": "127.0.0.1:3"}


def status(voters: list[str], addresses: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "node_id": "v1",
        "configuration": {"voters": voters, "learners": [], "addresses": addresses or {}},
    }


def test_the_voters_in_force_take_run_time_addresses_and_drop_removed_voters() -> None:
    seen = voters_in_force(status(["v1", "v3", "v4"], {"v4": "127.0.0.1:4"}), GENESIS)
    assert seen == {"v3": "127.0.0.1:3", "v4": "127.0.0.1:4"}
    assert voters_in_force({}, GENESIS) is None


def test_the_gate_waits_for_an_added_voter_and_forgets_a_removed_one() -> None:
    members: dict[str, Any] = {"now": status(["v1", "v2", "v3"])}
    gate = VoterCapabilities(
        node_id="v1",
        peers=GENESIS,
        cluster_token=None,
        members=lambda: voters_in_force(members["now"], GENESIS),
    )
    new_kind = sorted(local_capabilities().commands - BASELINE_COMMAND_KINDS)[0]
    gate._reports.update({"v2": local_capabilities(), "v3": local_capabilities()})
    gate.follow_members()
    assert gate.refusal(new_kind) is None
    members["now"] = status(["v1", "v3", "v4"], {"v4": "127.0.0.1:4"})
    gate.follow_members()
    assert gate.voters == ("v1", "v3", "v4")
    refusal = gate.refusal(new_kind)
    assert refusal is not None and "v4 (no report yet)" in refusal and "v2" not in refusal
    gate._reports["v4"] = local_capabilities()
    assert gate.refusal(new_kind) is None
