"""``appliance admin`` output as text (issue 21, Build 3): tables within 100 columns, ISO times in
UTC or ``--tz``, next run / last outcome / counts, occurrence filters, escaped operator text."""

from __future__ import annotations

import argparse
import io
import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from appliance.cli import admin_ops, admin_views
from appliance.cli.admin_text import (
    WIDTH_COLUMNS,
    BadZone,
    Column,
    escape,
    fit_table,
    iso_time,
    zone,
)
from tests.management.conftest import TOKENS, Live

T0 = int(datetime(2027, 1, 15, 8, 0, tzinfo=UTC).timestamp())


def _schedule(sid: int, name: str, cron: str = "*/5 * * * *", tz: str = "UTC", **extra) -> dict:
    return {
        "id": sid,
        "definition": {
            "name": name,
            "code_bytes": 10,
            "cron": cron,
            "timezone": tz,
            "policy": {
                "missed": "Skip",
                "overlap": "Skip",
                "retry": {"max_retries": 2, "delay_seconds": 60},
            },
        },
        "enabled": True,
        "created_at": T0 - 3600,
        "cursor": T0,
        "dropped": {"missed": 0, "overlap": 0, "capacity": 0},
        "recent": [],
        "counts": {"outstanding": 0, "running": 0, "pending": 0, "retry_waiting": 0},
        **extra,
    }


def _occurrence(oid: int, sid: int, state: str, due: int, **extra) -> dict:
    return {
        "id": oid,
        "schedule_id": sid,
        "due": due,
        "state": state,
        "attempt": 1,
        "retries_used": 0,
        "not_before": None,
        "timeline": [["Pending", due, 1, "selected"], [state, due + 2, 1, "x"]],
        "execution_id": None,
        "failure_reason": None,
        **extra,
    }


LIST = {
    "stale_local_view": True,
    "schedules": [
        _schedule(1, "nightly-report-for-the-finance-department-with-a-long-name"),
        _schedule(
            2, "\u001b[31mred\u001b[0m", cron="30 2 * * *", tz="America/Argentina/Buenos_Aires"
        ),
        _schedule(3, "off", enabled=False),
    ],
    "occurrences": [
        _occurrence(1, 1, "Succeeded", T0 - 600),
        _occurrence(2, 1, "Failed", T0 - 300, failure_reason="uncaught exception: Error: boom"),
        _occurrence(
            3,
            1,
            "Pending",
            T0,
            attempt=2,
            retries_used=1,
            not_before=T0 + 60,
            failure_reason="uncaught exception: Error: boom",
        ),
        _occurrence(4, 2, "Unknown", T0 - 60),
    ],
    "counts": {
        "records": 4,
        "outstanding": 2,
        "running": 1,
        "by_state": {"Succeeded": 1, "Failed": 1, "Pending": 1, "Unknown": 1},
    },
}


def test_escape_makes_control_and_format_characters_visible() -> None:
    assert escape("\u001b[31mred") == "\\x1b[31mred"
    assert escape("a\u202eb\u0007") == "a\\u202eb\\x07"
    assert escape("line\nnext\ttab") == "line\\x0anext\\x09tab"
    assert escape("line\nnext\ttab", keep_layout=True) == "line\nnext\ttab"
    assert escape("\u009b2J") == "\\x9b2J"  # C1 CSI
    assert escape("zoë 日本") == "zoë 日本"


def test_iso_times_in_utc_by_default_and_in_a_zone_with_tz() -> None:
    assert iso_time(1796152200) == "2026-12-01T19:10:00Z"
    assert iso_time("2026-12-01T21:50:00Z") == "2026-12-01T21:50:00Z"
    assert iso_time(1796152200, ZoneInfo("Europe/Berlin")) == "2026-12-01T20:10:00+01:00"
    assert iso_time(None) == "-"
    assert zone(None) is UTC and zone("utc") is UTC
    with pytest.raises(BadZone, match="--tz"):
        zone("Mars/Olympus")


def test_fit_table_wraps_a_long_last_note_instead_of_cutting_it() -> None:
    columns = [Column("id", "ID"), Column("note", "NOTE", wrap=True)]
    text = fit_table([{"id": 1, "note": "y" * 250}], columns)
    lines = text.splitlines()
    assert [len(line) for line in lines] == [8, 100, 100, 62]
    assert "".join(line[4:] for line in lines[1:]) == "y" * 250


def test_fit_table_shrinks_only_shrinkable_columns_to_the_width() -> None:
    columns = [Column("id", "ID"), Column("name", "NAME", shrink=True)]
    text = fit_table([{"id": 1, "name": "x" * 300}], columns)
    assert max(len(line) for line in text.splitlines()) == WIDTH_COLUMNS
    assert text.splitlines()[1].endswith("…")
    short = fit_table([{"id": 1, "name": "abc"}], columns)
    assert short.splitlines() == ["ID  NAME", "1   abc"]


def test_list_schedules_fits_100_columns_with_next_run_last_outcome_and_counts() -> None:
    text = admin_views.render_schedules(LIST, T0 + 1)
    lines = text.splitlines()
    assert all(len(line) <= WIDTH_COLUMNS for line in lines), [len(line) for line in lines]
    assert lines[0].split() == [
        "ID", "NAME", "CRON", "TIMEZONE", "NEXT", "RUN", "LAST", "ACTIVE", "OK", "FAILED"
    ]  # fmt: skip
    first = lines[1]
    assert "2027-01-15T08:05:00Z" in first  # next */5 slot after now
    assert "Failed" in first  # the newest no-longer-live occurrence
    assert first.split()[-3:] == ["1", "1", "1"]  # active (retry-waiting), ok, failed
    assert "…" in first  # the long name was cut to fit
    second = lines[2]
    assert "\\x1b[31mred" in second and "\u001b" not in text  # escaped, never raw
    assert "2027-01-16T05:30:00Z" in second  # 02:30 in Buenos Aires (UTC-3)
    assert "Unknown" in second
    assert "disabled" in lines[3]
    assert "occurrences retained: 4" in text and "stale local view" in text


def test_list_schedules_with_tz_prints_offsets_and_still_fits() -> None:
    text = admin_views.render_schedules(LIST, T0 + 1, ZoneInfo("Asia/Kolkata"))
    assert "2027-01-15T13:35:00+05:30" in text
    assert all(len(line) <= WIDTH_COLUMNS for line in text.splitlines())


def test_list_occurrences_filters_limits_and_says_retrying_at() -> None:
    text = admin_views.render_occurrences(LIST)
    lines = text.splitlines()
    assert lines[0].split() == ["ID", "SCHED", "DUE", "STATE", "TRY", "NOTE"]
    assert all(len(line) <= WIDTH_COLUMNS for line in lines)

    def note_of(oid: str) -> str:
        # the note continues under its column at word boundaries, never cut
        at = next(i for i, line in enumerate(lines) if line.lstrip().startswith(oid + " "))
        start = lines[0].index("NOTE")
        pieces = [lines[at][start:]]
        for line in lines[at + 1 :]:
            if not line.startswith(" " * start):
                break
            pieces.append(line[start:])
        return " ".join(pieces)

    assert note_of("3") == "retrying at 2027-01-15T08:01:00Z (attempt 2 of 3)"
    assert note_of("2") == "uncaught exception: Error: boom"
    assert "acknowledge-stopped" in note_of("4")
    only_failed = admin_views.render_occurrences(LIST, state="Failed")
    assert "Succeeded" not in only_failed and "1 occurrence(s)" in only_failed
    of_two = admin_views.render_occurrences(LIST, schedule=2)
    assert "Unknown" in of_two and "Failed" not in of_two
    newest = admin_views.render_occurrences(LIST, limit=2)
    ids = [r.split()[0] for r in newest.splitlines()[1:] if r[:2].strip().isdigit()]
    assert ids == ["3", "4"]
    assert "showing the newest 2 of 4" in newest


# ---- through the CLI, against the listener -----------------------------------------------------


def run(argv: list[str], addrs: list[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="appliance admin")
    admin_ops.register(parser.add_subparsers(dest="tool", required=True))
    extra = [a for addr in addrs for a in ("--addr", addr)]
    args = parser.parse_args([*argv, *extra])
    out, err = io.StringIO(), io.StringIO()
    code = admin_ops.run(args, stdin=io.StringIO(""), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(admin_ops.OPERATOR_TOKEN_ENV, TOKENS["operator"])


def test_list_occurrences_and_filters_through_the_cli(live: Live, tokens) -> None:
    addr = f"127.0.0.1:{live.listener.port}"
    live.runner.add_occurrence(1, "Running")
    live.runner.add_occurrence(1, "Failed")
    code, out, _ = run(["list", "occurrences", "--state", "Failed"], [addr])
    assert code == 0 and "Failed" in out and "Running" not in out
    code, out, _ = run(["list", "occurrences", "--json"], [addr])
    assert code == 0 and len(json.loads(out)["result"]["occurrences"]) == 2  # unchanged reply
    code, _, err = run(["list", "--tz", "Nowhere/City"], [addr])
    assert code == 2 and "--tz" in err


def test_watch_lines_say_who_acquired_ownership_and_escape_the_node_id() -> None:
    from appliance.cli.admin_watch import event_line

    owner = {"kind": "owner", "change": "acquired", "node": "v2\x1b[31m", "term": 3, "epoch": 4,
             "at": "2027-01-15T08:00:00Z", "index": 12}  # fmt: skip
    line = event_line(owner, UTC)
    assert line.startswith("2027-01-15T08:00:00Z  #12  ownership acquired by v2")
    assert "(term 3, epoch 4)" in line and "\x1b" not in line
