"""A generated cluster is ready to run: three real voters and a worker, started exactly as its
README says (plus a faster test clock), elect an owner and run the demo schedule to Succeeded."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from appliance.cluster_init.layout import PORT_SPAN

from .conftest import cluster_init, read_env_file
from .processes import decisions, free_port_block, started, wait_for_outcome

TIME_SCALE = "60"  # one cron minute per wall second (needs APPLIANCE_TESTING=1)
OUTCOME_TIMEOUT_S = 60.0


@pytest.mark.slow
def test_generated_three_voter_cluster_elects_an_owner_and_runs_the_demo(tmp_path: Path) -> None:
    out = tmp_path / "cluster"
    base_port = str(free_port_block(PORT_SPAN))
    assert cluster_init("--voters", "3", "--out", str(out), "--base-port", base_port) == 0
    env = {**os.environ, **read_env_file(out / "cluster.env"), "APPLIANCE_TESTING": "1"}
    appliance = [sys.executable, "-m", "appliance"]
    argv_list = [
        [*appliance, "runner", f"voter-{i}.json", "--time-scale", TIME_SCALE] for i in (1, 2, 3)
    ]
    argv_list.append([*appliance, "worker", "--config", "worker.json"])
    with started(argv_list, out, env) as logs:
        outcomes = wait_for_outcome(logs[:3], OUTCOME_TIMEOUT_S)
        voter_events = [decisions(log) for log in logs[:3]]
    assert outcomes, f"no outcome within {OUTCOME_TIMEOUT_S} s; voters logged {voter_events}"
    assert outcomes[0]["state"] == "Succeeded", outcomes[0]
    owners = {
        event["node"]
        for events in voter_events
        for event in events
        if event.get("event") == "ownership_acquired"
    }
    assert owners, "an outcome without an acquired owner"
