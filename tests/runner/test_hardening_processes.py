"""Real processes, three voters on loopback (issue 36): the version gate right after a fresh
start, learners added and never started, and an ``add_voter`` at another voter's address.

- As soon as the cluster has an owner, a command of a kind beyond the baseline is accepted: the
  voters are asked for their reports at start and, until they answer, again within a quarter of
  a second; an operator command asks the voters without a report first (before, "no report yet"
  refused them for up to 5 s after every voter was up).
- Three learners added and never started hold nothing back (before, ``run_now``, ``pause``,
  ``resume``, ``update`` and ``amend_limits`` answered "not proposed until every voter can apply
  it … finish upgrading those voters"); ``promote_voter`` of one is refused, naming it and the
  real remedy: start it.
- ``add_voter`` at a voter's cluster port is refused naming that voter, and nothing is added.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_ports
from tests.runner.cluster import Cluster, Voter, wait_for

RARELY = {
    "name": "rarely",
    "code": "1",
    "cron": "0 0 1 1 *",
    "timezone": "UTC",
    "policy": {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}


def _ok(voter: Voter, doc: dict[str, Any]) -> dict[str, Any]:
    reply = voter.command(doc)
    assert reply.get("ok") is True, (doc, reply)
    return reply


def _configuration(voter: Voter) -> dict[str, Any]:
    return dict(voter.command({"action": "status"})["configuration"])


@pytest.mark.timeout(240)
def test_new_kinds_go_at_once_learners_never_started_hold_nothing_back(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3)
    cluster.start()
    try:
        for voter in cluster.voters.values():
            wait_for(
                lambda v=voter: [e for e in v.events() if e.get("event") == "started"] or None,
                f"{voter.node_id} listening",
            )
        owner = cluster.owner()
        # A fresh, healthy cluster: the gate lets new kinds through as soon as it has an owner.
        _ok(owner, {"action": "pause"})
        _ok(owner, {"action": "resume"})

        # add_voter at voter v2's cluster port: refused, naming v2; the configuration is as it was.
        taken = f"127.0.0.1:{cluster.cluster_ports['v2']}"
        refused = owner.command({"action": "add_voter", "id": "v4", "address": taken})
        assert refused["ok"] is False and refused["status"] == 400, refused
        message = refused["error"]["message"]
        assert f"{taken} is the cluster address of v2" in message, message
        assert _configuration(owner)["learners"] == []

        # Three learners added, never started.
        for node_id, port in zip(("v4", "v5", "v6"), free_ports(3), strict=True):
            _ok(owner, {"action": "add_voter", "id": node_id, "address": f"127.0.0.1:{port}"})
        assert sorted(_configuration(owner)["learners"]) == ["v4", "v5", "v6"]
        created = _ok(owner, {"action": "create", "definition": RARELY})
        sid = created["id"]
        for doc in (
            {"action": "run_now", "id": sid},
            {"action": "pause"},
            {"action": "resume"},
            {"action": "update", "id": sid, "name": "renamed"},
            {"action": "amend_limits", "records": 8192},
        ):
            _ok(owner, doc)

        # A learner that never reported is not promoted: the refusal names it and says start it.
        promote = owner.command({"action": "promote_voter", "id": "v4"})
        assert promote["ok"] is False and promote["status"] == 400, promote
        message = promote["error"]["message"]
        assert "'v4' has not caught up: it has not reported what it can apply" in message
        assert "start it" in message, message
        assert sorted(_configuration(owner)["learners"]) == ["v4", "v5", "v6"]
    except BaseException:
        print(cluster.dump_logs())
        raise
    finally:
        cluster.stop()
