"""Real processes: an unreachable worker's attempt is fenced, not Unknown (issue 23 "Must show").

Three ``appliance runner`` voters and one ``appliance worker`` on loopback. The worker is
SIGSTOPped before the first due minute of a new schedule and resumed only after the attempt's
``timeout_seconds`` + grace has passed and the owner committed its fence. Then:

* attempt 1 ends fenced (not launched): no permit was ever committed for it;
* attempt 2 Succeeds, and nothing is Unknown;
* the late exec of attempt 1 (it sat in the stopped worker's socket backlog) reaches the worker
  after the fence; the admission refuses it (403 ``fenced``), and the worker fences it locally and
  never launches it.

Time: ``--time-scale 3`` keeps the observation deadline ((10 + 30) / 3 = 13.3 real seconds)
longer than the engine's real timeout (10 s), with room for a loaded machine. The exec request
to the stopped worker waits for the client's read timeout (30 real seconds) before it is known to
be uncertain.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from appliance.runner.loop import OBSERVE_GRACE_S
from tests.runner.cluster import ENV, Cluster, Voter, wait_for

TIME_SCALE = 3.0
TIMEOUT_SECONDS = 10
JOB = {
    "name": "fenced-then-run",
    "code": "console.log('ran'); 42",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}

pytestmark = pytest.mark.timeout(240)


def _record(owner: Voter, occurrence_id: int) -> dict[str, Any] | None:
    listing = owner.command({"action": "list"})
    return next((o for o in listing["occurrences"] if o["id"] == occurrence_id), None)


def _events(owner: Voter, name: str) -> list[dict[str, Any]]:
    return [e for e in owner.events() if e.get("event") == name]


def _observe(cluster: Cluster, execution_id: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.worker.port}/api/scheduled/v1/executions/{execution_id}",
        headers={"Authorization": f"Bearer {ENV['RUNNER_WORKER_TOKEN']}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_a_stopped_worker_past_its_deadline_gets_a_fence_and_the_next_attempt_succeeds(
    tmp_path: Path,
) -> None:
    deadline_real_s = (TIMEOUT_SECONDS + OBSERVE_GRACE_S) / TIME_SCALE
    assert deadline_real_s > TIMEOUT_SECONDS  # the rule for --time-scale in this test
    cluster = Cluster(
        tmp_path, 3, time_scale=TIME_SCALE, timeout_seconds=TIMEOUT_SECONDS, worker=True
    )
    try:
        cluster.start()
        owner = cluster.owner()
        assert cluster.worker.proc is not None
        cluster.worker.proc.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        created = owner.command({"action": "create", "definition": JOB})
        assert created["ok"] is True, created
        # The first due minute comes (at most 20 real seconds) while the worker is stopped.
        fenced = wait_for(
            lambda: [e for e in _events(owner, "dispatch_fenced") if e["occurrence"] == 1],
            "attempt 1 to be fenced",
            timeout_s=90,
        )
        assert fenced[0]["attempt"] == 1 and fenced[0]["state"] == "Pending", fenced
        assert "no permit committed" in fenced[0]["reason"]
        claimed_at = next(e for e in _events(owner, "claim") if e["occurrence"] == 1)
        assert claimed_at["attempt"] == 1
        # Resume only after timeout_seconds + grace of attempt 1 have passed in real time.
        time.sleep(max(0.0, deadline_real_s - (time.monotonic() - stopped_at)) + 0.5)
        cluster.worker.proc.send_signal(signal.SIGCONT)

        def succeeded() -> dict[str, Any] | None:
            record = _record(owner, 1)
            return record if record and record["state"] == "Succeeded" else None

        record = wait_for(succeeded, "attempt 2 to succeed", timeout_s=60)
        assert record["attempt"] == 2 and record["retries_used"] == 0
        steps = [(step[0], step[2], step[3]) for step in record["timeline"]]
        assert ("Pending", 2, "fenced_not_launched") in steps
        assert all(state != "Unknown" for state, _, _ in steps), steps

        # The late exec of attempt 1: refused by the admission, fenced by the worker.
        def late_exec_refused() -> list[dict[str, Any]]:
            return [
                e
                for voter in cluster.voters.values()
                for e in voter.events()
                if e.get("event") == "admission"
                and e.get("status") != 409  # the voters that are not the owner
                and e.get("occurrence") == 1
                and e.get("attempt") == 1
            ]

        admissions = wait_for(late_exec_refused, "the late exec of attempt 1 to ask", 30)
        assert all(e["status"] == 403 and e["refusal"] == "fenced" for e in admissions)
        status, observed = _observe(cluster, "s1-o1-a1")
        assert status == 200 and observed["status"] == "fenced", observed
        assert "fenced" in observed["fence"]["reason"]
        status, second = _observe(cluster, "s1-o1-a2")
        assert status == 200 and second["status"] == "completed", second

        listing = owner.command({"action": "list"})
        assert listing["counts"]["by_state"].get("Unknown", 0) == 0
        assert not [e for e in owner.events() if e.get("event") == "outcome_unknown"]
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        if cluster.worker.proc is not None and cluster.worker.proc.poll() is None:
            cluster.worker.proc.send_signal(signal.SIGCONT)
        cluster.stop()
