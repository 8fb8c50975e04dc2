"""Real processes: the voters change while an every-minute schedule runs (issue 20, Must show).

Three ``appliance runner`` voters and a worker on loopback at ``--time-scale 20`` (a slot every
3 s). While the schedule runs, the admin commands on the owner's stdin:

1. add a 4th voter (``join: true`` config, empty store) as a learner, then promote it;
2. remove the current leader: it hands over, says why it stopped in its status, and refuses a
   vote request (a pre-vote from an up-to-date candidate, sent to its cluster port);
3. replace a voter by one on a new port: add the new one, promote it, remove the old one.

Throughout, every slot has exactly one occurrence and it Succeeded: no Unknown, no dropped slot,
and commits continue under the final configuration. The worker lists every node's admission
route from the start (a new owner is asked for permits like any other).
"""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from typing import Any

import pytest

from appliance.config.contract import contract_digest
from appliance.config.runner import load_runner_config
from appliance.http.client import HttpClient
from appliance.raft.codec import decode, encode
from appliance.raft.messages import VoteRequest, VoteResponse
from appliance.raft.transport import VOTE_PATH
from tests.runner.cluster import DEMO, ENV, Cluster, Voter, wait_for

SCALE = 20.0
SLOT_S = 60


def _start_joiner(cluster: Cluster, started_real_s: float) -> Voter:
    voter = cluster.joiner()
    # Its scaled clock on the cluster's timeline (it starts later than the others).
    offset_s = (time.time() - started_real_s) * (SCALE - 1)
    voter.extra_args = ["--clock-offset-seconds", f"{offset_s:.0f}"]
    voter.start()
    return voter


def _change(owner: Voter, document: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
    """Send a membership change; ask again only after a definite "not yet" refusal (the learner
    has not caught up, or a new leader's first entry is not committed yet)."""

    def once() -> dict[str, Any] | None:
        reply = owner.command(document)
        if reply.get("ok"):
            return reply
        message = str((reply.get("error") or {}).get("message"))
        if reply.get("status") == 400 and (
            "has not caught up" in message or "not committed an entry of its term" in message
        ):
            return None
        raise AssertionError(f"{document}: {reply}")

    return wait_for(once, f"{document} committed", timeout_s=timeout_s)


def _occurrences(voter: Voter) -> list[dict[str, Any]]:
    return list(voter.command({"action": "list"}).get("occurrences", []))


def _succeeded(voter: Voter) -> int:
    return sum(1 for o in _occurrences(voter) if o["state"] == "Succeeded")


def _more_succeeded(voter: Voter, what: str, slots: int = 1) -> None:
    than = _succeeded(voter)
    wait_for(lambda: _succeeded(voter) >= than + slots or None, what, timeout_s=30)


def _pre_vote(cluster: Cluster, target: Voter, sender: str) -> Any:
    """An up-to-date pre-vote from ``sender`` to ``target``'s cluster port; the decoded answer."""
    digest = contract_digest(load_runner_config(target.config))
    ask = VoteRequest(sender, target.node_id, 10**6, 10**9, 10**6, pre_vote=True)
    client = HttpClient(connect_timeout_ms=2_000, read_timeout_ms=5_000)
    try:
        answer = client.post(
            f"http://127.0.0.1:{cluster.cluster_ports[target.node_id]}{VOTE_PATH}",
            encode(ask, digest),
            bearer=ENV["RUNNER_CLUSTER_TOKEN"],
            headers={"Content-Type": "application/octet-stream"},
        )
    finally:
        client.close()
    assert answer.status == 200, answer.status
    return decode(answer.body, digest)


@pytest.mark.timeout(150)
def test_add_promote_remove_the_leader_and_replace_a_voter_while_a_schedule_runs(
    tmp_path: Any,
) -> None:
    started_real_s = time.time()
    cluster = Cluster(tmp_path, 3, time_scale=SCALE, schedules=[DEMO], worker=True, spare=2)
    cluster.start()
    try:
        owner = cluster.owner()
        _more_succeeded(owner, "a first occurrence Succeeded")

        # 1. A 4th voter: a learner with an empty store, then a voter.
        v4 = _start_joiner(cluster, started_real_s)
        added = _change(
            owner,
            {
                "action": "add_voter",
                "id": v4.node_id,
                "address": f"127.0.0.1:{cluster.cluster_ports[v4.node_id]}",
            },
        )
        assert v4.node_id in added["configuration"]["learners"], added
        promoted = _change(owner, {"action": "promote_voter", "id": v4.node_id})
        assert v4.node_id in promoted["configuration"]["voters"], promoted
        status = owner.command({"action": "status"})
        assert sorted(status["configuration"]["voters"]) == ["v1", "v2", "v3", "v4"], status
        assert status["config_change_pending"] is False
        assert status["grant_expires_at"] == "2099-01-01T00:00:00Z"
        _more_succeeded(owner, "a slot ran with four voters")

        # 2. Remove the current leader: it hands over and stops voting.
        removed = owner
        gone = _change(removed, {"action": "remove_voter", "id": removed.node_id})
        assert removed.node_id not in gone["configuration"]["voters"], gone
        owner = cluster.owner(exclude=(removed.node_id,))
        said = wait_for(
            lambda: (
                (
                    (removed.command({"action": "status"}).get("error") or {}).get("member_status")
                    or ""
                ).startswith("removed:")
                or None
            ),
            "the removed voter says why it stopped",
        )
        assert said
        why = removed.command({"action": "status"})["error"]["member_status"]
        assert "no longer votes or campaigns" in why, why
        answer = _pre_vote(cluster, removed, sender=owner.node_id)
        assert isinstance(answer, VoteResponse) and answer.granted is False, answer
        assert removed.terminate() == 0
        _more_succeeded(owner, "two slots ran after the leader was removed", slots=2)

        # 3. Replace a remaining genesis voter by one on a new port.
        old = next(
            cluster.voters[n] for n in cluster.genesis if n not in (removed.node_id, owner.node_id)
        )
        v5 = _start_joiner(cluster, started_real_s)
        _change(
            owner,
            {
                "action": "add_voter",
                "id": v5.node_id,
                "address": f"127.0.0.1:{cluster.cluster_ports[v5.node_id]}",
            },
        )
        _change(owner, {"action": "promote_voter", "id": v5.node_id})
        final = _change(owner, {"action": "remove_voter", "id": old.node_id})
        expected = sorted({"v1", "v2", "v3", "v4", "v5"} - {removed.node_id, old.node_id})
        assert sorted(final["configuration"]["voters"]) == expected, final
        assert old.terminate() == 0

        # Commits continue under the final configuration (three more slots Succeeded).
        owner = cluster.owner(exclude=(removed.node_id, old.node_id))
        _more_succeeded(owner, "three more slots ran", slots=3)
        status = owner.command({"action": "status"})
        assert sorted(status["configuration"]["voters"]) == expected, status

        # Exactly one Succeeded occurrence per slot, from the first to the last settled one.
        occurrences = _occurrences(owner)
        last_due = max(o["due"] for o in occurrences)
        settled = [o for o in occurrences if o["due"] < last_due]  # the last may still run
        per_slot = Counter(o["due"] for o in occurrences)
        assert all(n == 1 for n in per_slot.values()), per_slot
        dues = sorted(per_slot)
        assert all(b - a == SLOT_S for a, b in itertools.pairwise(dues)), dues
        assert len(settled) >= 6, settled
        assert {o["state"] for o in settled} == {"Succeeded"}, settled
        assert not [o for o in occurrences if o["state"] == "Unknown"]
        schedule = owner.command({"action": "list"})["schedules"][0]
        assert schedule["dropped"] == {"missed": 0, "overlap": 0, "capacity": 0}, schedule
        for voter in cluster.voters.values():
            dropped = [
                e for e in voter.events() if e.get("event") == "selection" and e.get("dropped")
            ]
            assert not dropped, (voter.node_id, dropped)
    except BaseException:
        print(cluster.dump_logs())
        print(json.dumps({v.node_id: v.alive for v in cluster.voters.values()}))
        raise
    finally:
        cluster.stop()
