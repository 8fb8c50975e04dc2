"""Real processes: an execution that waits in the worker's engine queue longer than the
observation deadline is not Unknown ("Unknown only when it is true", SPEC §11).

One voter and one worker with ``max_concurrent: 1, max_queued: 12``; 12 schedules due at the same
instant, each a script that waits 0.3 real seconds. They run one after another, so the last one
waits about 3.3 real seconds in the queue, while the deadline, (1 + 30) / 30 = 1.03 real seconds
at ``--time-scale 30``, is not shorter than the engine's real timeout (1 s). The worker answers
every observation meanwhile (``running`` with ``started_at: null``), and each such answer
restarts the deadline: every occurrence ends Succeeded, none passes through Unknown.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.runner.loop import OBSERVE_GRACE_S
from tests.runner.cluster import Cluster, wait_for
from tests.runner.harness import one_slot_schedules

TIME_SCALE = 30.0
TIMEOUT_SECONDS = 1
QUEUED = 12
SCRIPT_S = 0.3  # real seconds each script waits
SCRIPT = "new Promise(r => setTimeout(() => r(2), 300))"

pytestmark = pytest.mark.timeout(180)


def test_a_long_engine_queue_at_a_reachable_worker_is_never_unknown(tmp_path: Path) -> None:
    deadline_real_s = (TIMEOUT_SECONDS + OBSERVE_GRACE_S) / TIME_SCALE
    assert deadline_real_s >= TIMEOUT_SECONDS  # the rule for --time-scale
    assert 2 * deadline_real_s < QUEUED * SCRIPT_S  # the queue outlasts the deadline
    # The scaled clock starts at the real time: the slot is 60-120 scaled seconds (2-4 real) on.
    due_s = math.ceil((time.time() + 60) / 60) * 60
    cluster = Cluster(
        tmp_path,
        1,
        time_scale=TIME_SCALE,
        timeout_seconds=TIMEOUT_SECONDS,
        schedules=one_slot_schedules(due_s, QUEUED, SCRIPT, "queued"),
        worker=True,
    )
    doc = json.loads(cluster.worker.config.read_text())
    doc["engine"] = {"max_concurrent": 1, "max_queued": QUEUED}
    cluster.worker.config.write_text(json.dumps(doc))
    try:
        cluster.start()
        owner = cluster.owner()

        def settled() -> list[dict[str, Any]] | None:
            occurrences = owner.command({"action": "list"})["occurrences"]
            done = [o for o in occurrences if o["state"] not in ("Pending", "Running")]
            return occurrences if len(done) == QUEUED else None

        occurrences = wait_for(settled, "every queued occurrence to settle", timeout_s=120)
        assert sorted({o["state"] for o in occurrences}) == ["Succeeded"], [
            (o["id"], o["state"]) for o in occurrences
        ]
        assert {o["due"] for o in occurrences} == {due_s}
        assert all(o["attempt"] == 1 for o in occurrences)
        events = owner.events()
        accepted = [e for e in events if e.get("event") == "dispatch_accepted"]
        assert len(accepted) == QUEUED  # sent together: they did wait in the worker's queue
        outcomes = [e for e in events if e.get("event") == "outcome"]
        assert not [e for e in outcomes if e.get("state") == "Unknown"], outcomes
        finished = sorted(o["timeline"][-1][1] for o in occurrences)
        # Scaled seconds: the queue ran longer than one deadline, so the rule was exercised.
        assert finished[-1] - finished[0] > TIMEOUT_SECONDS + OBSERVE_GRACE_S
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.dump_logs()}") from None
    finally:
        cluster.stop()
