"""Golden vectors from the reference implementation, croner 11 (tools/croner_vectors).

Every case is a (pattern, timezone, start instant) with croner's next fire times. The calendar
must produce exactly those instants forwards, and the same instants backwards and by counting.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from appliance.core.calendar import compile_schedule, next_fire_times
from appliance.core.cron_parse import parse_cron

VECTORS = json.loads(
    (Path(__file__).parent.parent / "data" / "croner_vectors.json").read_text(encoding="utf-8")
)
CASES = VECTORS["cases"]
DST_ZONES = {
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Santiago",
    "Australia/Sydney",
}


def parse_instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def case_id(case: dict) -> str:
    return f"{case['timezone']}:{case['pattern']}:{case['after']}"


def test_vectors_come_from_croner_11_and_cover_every_required_zone() -> None:
    assert VECTORS["croner_version"].startswith("11.")
    assert len(CASES) >= 40
    zones = {case["timezone"] for case in CASES}
    assert zones >= DST_ZONES
    for case in CASES:
        assert len(case["next"]) == case["count"], case["note"]


@pytest.mark.parametrize("case", CASES, ids=[case_id(case) for case in CASES])
def test_next_fire_times_match_croner(case: dict) -> None:
    got = next_fire_times(
        case["pattern"], case["timezone"], parse_instant(case["after"]), case["count"]
    )
    assert [parse_instant(text) for text in case["next"]] == got


@pytest.mark.parametrize("case", CASES, ids=[case_id(case) for case in CASES])
def test_backward_iteration_and_counting_reproduce_croner(case: dict) -> None:
    schedule = compile_schedule(case["pattern"], case["timezone"])
    after = parse_instant(case["after"])
    expected = [parse_instant(text) for text in case["next"]]
    last = expected[-1]
    assert schedule.latest_at_or_before(last, case["count"], after=after) == expected
    assert schedule.latest_at_or_before(last, 1, after=after) == expected[-1:]
    assert schedule.count_between(after, last) == case["count"]
    # Stepping one fire at a time gives the same chain.
    chain, cursor = [], after
    for _ in expected:
        cursor = schedule.next_after(cursor)
        chain.append(cursor)
    assert chain == expected


@pytest.mark.parametrize("case", CASES, ids=[case_id(case) for case in CASES])
def test_each_croner_fire_time_matches_locally_or_is_a_documented_dst_move(case: dict) -> None:
    schedule = compile_schedule(case["pattern"], case["timezone"])
    fields = parse_cron(case["pattern"])
    zone = ZoneInfo(case["timezone"])
    for text in case["next"]:
        fire = schedule.describe(parse_instant(text))
        local = fire.local
        matches = local.minute in fields.minutes and local.hour in fields.hours
        if fire.moved_from_gap:
            # Only fixed-time jobs move, to the instant the clock jumped (the gap's end).
            assert schedule.is_fixed_time and not matches
            just_before = (fire.utc - timedelta(seconds=1)).astimezone(zone)
            assert just_before.utcoffset() < local.utcoffset()
        else:
            assert matches, text
        if fire.in_fold and schedule.is_fixed_time:
            assert local.fold == 0, "fixed-time jobs run only at the first instance"


def test_fixed_time_gap_moves_and_fold_first_instance_are_all_pinned() -> None:
    """The vector set exercises each DST rule at least once (so the pins above mean something)."""
    moved, second_instances, fixed_in_fold = 0, 0, 0
    for case in CASES:
        schedule = compile_schedule(case["pattern"], case["timezone"])
        for text in case["next"]:
            fire = schedule.describe(parse_instant(text))
            moved += fire.moved_from_gap
            second_instances += fire.in_fold and fire.local.fold == 1
            fixed_in_fold += fire.in_fold and schedule.is_fixed_time
    assert moved >= 8
    assert second_instances >= 8
    assert fixed_in_fold >= 5
