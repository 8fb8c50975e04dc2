"""The bounded chaos subset that runs in CI (issue 9 §6): two seeds, real processes, real faults.

Each run starts 3 voters and the worker on loopback behind the fault-injecting proxy, injects
seeded faults (SIGKILL and SIGSTOP of voters and the worker, link drop/delay/one-way and two-way
cuts, a voter partition, a skewed voter clock, operator create and cancel) while the workload of
every policy runs, heals, converges and checks the invariants from the stores
(tests/chaos/invariants.py). The long run is ``python -m tests.chaos --minutes N --seed S``
(docs/chaos.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.run import RunConfig, run_chaos

CI_SEEDS = (11, 12)
CHAOS_S = 20.0
CONVERGE_S = 40.0
PROCESS_FAULTS = {"voter_kill", "voter_pause", "worker_kill", "worker_pause"}
LINK_FAULTS = {"link_drop", "link_delay", "link_cut_one_way", "link_cut_both", "voter_partition"}


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("seed", CI_SEEDS)
def test_no_invariant_breaks_under_seeded_process_and_network_faults(
    tmp_path: Path, seed: int
) -> None:
    report = run_chaos(RunConfig(seed=seed, root=tmp_path, chaos_s=CHAOS_S, converge_s=CONVERGE_S))
    logs = "\n".join(
        f"==== {p.name}\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("*.log"))
    )
    summary = f"{report.as_dict()}\n{logs}"
    assert report.violations == [], summary
    assert report.converged, summary
    # The run did what it claims: faults of both families were injected, and work ran.
    assert set(report.faults) & PROCESS_FAULTS, summary
    assert set(report.faults) & LINK_FAULTS, summary
    assert sum(report.faults.values()) >= 8, summary
    assert report.executions > 0 and report.by_state["Succeeded"] > 0, summary
    assert report.schedules >= 5, summary


def test_the_long_run_command_documents_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.chaos.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    usage = capsys.readouterr().out
    for option in ("--minutes", "--seed", "--chaos-seconds", "--time-scale", "--keep"):
        assert option in usage
