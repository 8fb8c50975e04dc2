"""Scenario transcripts: each file in testdata/ is a sequence of commands with the exact trace and
state the Raft core must produce (regenerate after review with RAFT_REWRITE=1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.raft.transcript import run_script

SCRIPTS = sorted((Path(__file__).parent / "testdata").glob("*.txt"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_transcript_matches(path: Path) -> None:
    written, produced = run_script(path)
    assert produced == written


def test_every_scenario_the_issue_names_has_a_transcript() -> None:
    names = {p.stem for p in SCRIPTS}
    assert {
        "figure7_log_divergence",
        "figure8_commit_only_current_term",
        "stale_leader",
        "split_vote",
        "prevote_prevents_disruption",
        "catch_up_across_batch_caps",
        "check_quorum_step_down",
        "read_index",
    } <= names


def test_the_figure8_transcript_catches_counting_replicas_of_an_old_term(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutation check: with the current-term condition removed, the transcript must fail."""
    from appliance.raft import node as raft_node
    from appliance.raft import quorum

    def commit_by_counting_only(self):  # type: ignore[no-untyped-def]
        if self.role is raft_node.Role.LEADER:
            matches = [self.log.stable_last] + [pr.match for pr in self._progress.values()]
            self.log.commit_to(max(self.log.commit, quorum.committed_index(matches)))

    monkeypatch.setattr(raft_node.RaftNode, "_maybe_commit", commit_by_counting_only)
    monkeypatch.delenv("RAFT_REWRITE", raising=False)
    written, produced = run_script(
        Path(__file__).parent / "testdata" / "figure8_commit_only_current_term.txt"
    )
    assert produced != written
    assert "n1 leader term=3 vote=n1 leader=n1 commit=2" in produced
