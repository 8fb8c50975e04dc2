"""Real processes: a worker that cannot reach the owner's admission route is told the new route
by SIGHUP, without a restart (docs/cluster.md, "Add a voter").

A voter and a worker on loopback; the worker's config names only an admission route nobody
listens on, as after a voter was replaced on a new port. Every attempt is then definitely not
admitted (``admission_unavailable``: no permit exists), so the owner fences it and claims the next
one; nothing becomes Unknown. The operator writes the voter's route into the worker's config and
sends SIGHUP: the next attempts are admitted and Succeed, and the worker kept its incarnation.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.runner.cluster import DEMO, Cluster, Voter, wait_for
from tests.worker.peers import closed_port


def _occurrences(voter: Voter) -> list[dict[str, Any]]:
    return list(voter.command({"action": "list"})["occurrences"])


@pytest.mark.timeout(120)
def test_sighup_gives_a_running_worker_the_owner_s_admission_route(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 1, time_scale=20.0, schedules=[DEMO], worker=True)
    doc = json.loads(cluster.worker.config.read_text())
    right = doc["admission_urls"]
    doc["admission_urls"] = [f"http://127.0.0.1:{closed_port()}"]
    cluster.worker.config.write_text(json.dumps(doc))
    cluster.start()
    try:
        owner = cluster.owner()
        fenced = wait_for(
            lambda: (
                [
                    e
                    for e in owner.events()
                    if e.get("event") == "dispatch_fenced"
                    and "admission_unavailable" in str(e.get("reason"))
                ]
                or None
            ),
            "an attempt fenced as not admitted",
        )
        assert "no permit committed" in fenced[0]["reason"], fenced
        before = _occurrences(owner)
        assert not [o for o in before if o["state"] in ("Succeeded", "Unknown")], before

        doc["admission_urls"] = right
        cluster.worker.config.write_text(json.dumps(doc))
        assert cluster.worker.proc is not None
        cluster.worker.proc.send_signal(signal.SIGHUP)
        wait_for(
            lambda: sum(o["state"] == "Succeeded" for o in _occurrences(owner)) >= 2 or None,
            "two occurrences Succeeded after the reload",
        )
        assert cluster.worker.proc.poll() is None
        after = _occurrences(owner)
        assert not [o for o in after if o["state"] == "Unknown"], after
        assert "SIGHUP: admission_urls reloaded: " + right[0] in cluster.worker.log.read_text()
    except BaseException:
        print(cluster.dump_logs())
        raise
    finally:
        cluster.stop()
