"""The new commands are new log kinds: outside the baseline, reported by this binary (SPEC §11)."""

from __future__ import annotations

from appliance.capabilities import BASELINE_COMMAND_KINDS, command_kinds
from appliance.core.state import JITTER_KIND

NEW_KINDS = {"RunNow", "EnableSchedule", "UpdateSchedule", "Pause", "Resume", "Backfill"}


def test_the_new_command_kinds_are_gated_and_reported():
    assert not (NEW_KINDS | {JITTER_KIND}) & BASELINE_COMMAND_KINDS
    assert NEW_KINDS | {JITTER_KIND} <= command_kinds()
