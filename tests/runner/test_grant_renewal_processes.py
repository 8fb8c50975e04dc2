"""Real processes: a running 3-voter cluster whose grant is about to expire is renewed (issue 20).

Three ``appliance runner`` voters and one worker on loopback, an every-minute schedule, and a
genesis grant that expires two (scaled) minutes after start. ``renew_grant`` commits a new expiry;
occurrences keep being claimed, admitted and run past the original expiry; a follower restarted
with its old (genesis) config starts, says it runs amendment 1, and the cluster keeps admitting
after the owner is stopped.

Time scale 10 with ``timeout_seconds`` 1: the owner's observation deadline (1 + 30 grace scaled
seconds = 3.1 s real) stays longer than the engine's 1 s real timeout, so no attempt can be judged
before the engine could have ended it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.runner.cluster import DEMO, Cluster, Voter, wait_for

SCALE = 10.0
GRANT_S = 120  # the genesis grant: two scaled minutes after start


def _utc(at_s: float) -> str:
    return datetime.fromtimestamp(int(at_s), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _succeeded_after(voter: Voter, after_s: float) -> list[dict[str, Any]]:
    reply = voter.command({"action": "list"})
    return [
        o for o in reply.get("occurrences", []) if o["state"] == "Succeeded" and o["due"] > after_s
    ]


def _events(voter: Voter, name: str) -> list[dict[str, Any]]:
    return [e for e in voter.events() if e.get("event") == name]


@pytest.mark.timeout(240)
def test_a_renewed_grant_keeps_admitting_past_the_original_expiry(tmp_path: Path) -> None:
    start_real_s = time.time()
    original_expiry_s = start_real_s + GRANT_S
    cluster = Cluster(
        tmp_path,
        3,
        time_scale=SCALE,
        schedules=[DEMO],
        timeout_seconds=1,
        worker=True,
        expires_at=_utc(original_expiry_s),
    )
    cluster.start()
    try:
        owner = cluster.owner()
        status = owner.command({"action": "status"})
        assert status["contract"]["amendment"] == 0, status
        renewed = _utc(start_real_s + 30 * 86_400)

        def renew() -> dict[str, Any] | None:
            # A new command kind waits for every voter's capability report (the version gate,
            # polled every 5 s); until then the refusal is definite, so sending again is safe.
            answer = owner.command({"action": "renew_grant", "expires_at": renewed})
            gated = "not proposed until every voter" in str(answer.get("error"))
            return None if gated else answer

        reply = wait_for(renew, "the version gate lets RenewGrant through", timeout_s=10)
        assert reply == {
            "ok": True,
            "action": "renew_grant",
            "amendment": 1,
            "changes": {"expires_at": renewed},
        }, reply
        status = owner.command({"action": "status"})
        assert status["grant_expires_at"] == renewed
        assert status["contract"]["amendment"] == 1
        assert status["contract"]["last_amendment"]["kind"] == "renew_grant"
        # The original grant passes (12 s real); every-minute slots after it still run.
        wait_for(
            lambda: len(_succeeded_after(owner, original_expiry_s)) >= 2 or None,
            "two occurrences due after the original expiry Succeeded",
            timeout_s=60,
        )

        # A follower restarted with its genesis config joins and runs amendment 1. Its scaled
        # clock is put back on the cluster's timeline.
        follower = next(v for v in cluster.voters.values() if v is not owner)
        assert follower.terminate() == 0
        offset_s = (time.time() - start_real_s) * (SCALE - 1)
        follower.extra_args = ["--clock-offset-seconds", f"{offset_s:.0f}"]
        before = len(_events(follower, "contract_in_force"))  # its log file is appended to
        follower.start()
        in_force = wait_for(
            lambda: _events(follower, "contract_in_force")[before:] or None,
            "the restarted follower says which contract it runs",
        )[0]
        assert in_force["amendment"] == 1, in_force
        assert in_force["config_amendment"] == 0
        assert in_force["grant_expires_at"] == renewed
        assert "amendment 1" in in_force["message"]
        # It catches up: its local replica holds what the owner committed after the restart.
        committed = len(_succeeded_after(owner, original_expiry_s))
        wait_for(
            lambda: len(_succeeded_after(follower, original_expiry_s)) >= committed or None,
            "the restarted follower replicated the renewed cluster's occurrences",
        )

        # Stop the owner: a new owner (possibly the restarted voter) keeps admitting under the
        # renewed grant.
        assert owner.terminate() == 0
        new_owner = cluster.owner(exclude=(owner.node_id,))
        assert new_owner.command({"action": "status"})["grant_expires_at"] == renewed
        seen = {o["id"] for o in _succeeded_after(new_owner, original_expiry_s)}
        wait_for(
            lambda: (
                {o["id"] for o in _succeeded_after(new_owner, original_expiry_s)} - seen or None
            ),
            "a new occurrence Succeeded under the new owner",
            timeout_s=60,
        )
        for voter in cluster.voters.values():
            assert not _events(voter, "claim_refused"), voter.node_id
    except BaseException:
        print(cluster.dump_logs())
        raise
    finally:
        cluster.stop()
