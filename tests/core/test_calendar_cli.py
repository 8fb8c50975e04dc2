"""`appliance admin cron next` (issue 2, "CLI preview"), driven through the real entry point."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from appliance.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["admin", "cron", "next", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_prints_utc_and_local_times_and_marks_a_gap_move(capsys) -> None:
    code, out, err = run(
        capsys,
        "--cron", "30 2 * * *",
        "--timezone", "America/New_York",
        "--after", "2025-03-08T12:00:00Z",
        "--count", "2",
    )  # fmt: skip
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[1] == ("2025-03-09T07:00:00Z  2025-03-09T03:00:00-04:00 EDT  [moved from DST gap]")
    assert lines[2] == "2025-03-10T06:30:00Z  2025-03-10T02:30:00-04:00 EDT"


def test_marks_both_instances_of_a_repeated_hour(capsys) -> None:
    code, out, _ = run(
        capsys,
        "--cron", "30 1 * * *",
        "--timezone", "Europe/Berlin",
        "--after", "2025-10-25T12:00:00+02:00",
        "--count", "1",
    )  # fmt: skip
    assert code == 0
    assert "[repeated hour" not in out  # 01:30 is not in Berlin's repeated hour (02:00-03:00)
    code, out, _ = run(
        capsys,
        "--cron", "*/30 2 * * *",
        "--timezone", "Europe/Berlin",
        "--after", "2025-10-25T12:00:00Z",
        "--count", "4",
    )  # fmt: skip
    assert code == 0
    marks = [line.split("[", 1)[1] for line in out.splitlines()[1:]]
    assert marks == [
        "repeated hour, first instance]",
        "repeated hour, first instance]",
        "repeated hour, second instance]",
        "repeated hour, second instance]",
    ]


def test_json_output_carries_flags_per_fire_time(capsys) -> None:
    code, out, _ = run(
        capsys,
        "--cron", "15 2 * * *",
        "--timezone", "Australia/Lord_Howe",
        "--after", "2025-10-04T00:00:00Z",
        "--count", "2",
        "--json",
    )  # fmt: skip
    assert code == 0
    document = json.loads(out)
    assert document["cron"] == "15 2 * * *"
    assert document["after"] == "2025-10-04T00:00:00Z"
    assert document["fire_times"] == [
        {
            "utc": "2025-10-04T15:30:00Z",
            "local": "2025-10-05T02:30:00+11:00",
            "moved_from_gap": True,
            "in_fold": False,
        },
        {
            "utc": "2025-10-05T15:15:00Z",
            "local": "2025-10-06T02:15:00+11:00",
            "moved_from_gap": False,
            "in_fold": False,
        },
    ]


def test_after_defaults_to_now(capsys) -> None:
    before = datetime.now(UTC)
    code, out, _ = run(capsys, "--cron", "* * * * *", "--timezone", "UTC", "--json")
    finished = datetime.now(UTC)
    assert code == 0
    document = json.loads(out)
    assert len(document["fire_times"]) == 5
    first = datetime.fromisoformat(document["fire_times"][0]["utc"].replace("Z", "+00:00"))
    assert first.second == 0
    assert before - timedelta(seconds=1) < first <= finished + timedelta(minutes=1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cron", "0 0 * JAN *", "--timezone", "UTC"], "appliance: cron: names are not allowed"),
        (["--cron", "0 0 31 2 *", "--timezone", "UTC"], "appliance: cron: pattern can never fire"),
        (["--cron", "* * * * *", "--timezone", "Mars/Base"], "appliance: timezone: unknown"),
        (["--cron", "* * * * *", "--timezone", "local"], "appliance: timezone: "),
        (
            ["--cron", "* * * * *", "--timezone", "UTC", "--after", "2025-01-01T00:00:00"],
            "appliance: after: '2025-01-01T00:00:00' has no UTC offset",
        ),
        (
            ["--cron", "* * * * *", "--timezone", "UTC", "--after", "yesterday"],
            "appliance: after: 'yesterday' is not an RFC 3339 instant",
        ),
        (
            ["--cron", "* * * * *", "--timezone", "UTC", "--count", "10001"],
            "appliance: count: 10001 is out of range 0-10000",
        ),
    ],
)
def test_invalid_input_exits_2_with_the_message_on_stderr(capsys, argv, message) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith(message), err


def test_missing_required_options_are_usage_errors(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["admin", "cron", "next", "--cron", "* * * * *"])
    assert exc.value.code == 2
    assert "--timezone" in capsys.readouterr().err


def test_cron_next_has_help(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["admin", "cron", "next", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--after" in out and "moved from DST gap" in out


def test_jitter_shows_each_slots_start_beside_its_due_time(capsys) -> None:
    from appliance.core.jitter import jittered_instant_s

    after = "2027-01-15T08:00:00Z"
    args = ("--cron", "*/5 * * * *", "--timezone", "UTC", "--after", after, "--count", "2")
    code, out, _ = run(capsys, *args, "--jitter-seconds", "120", "--schedule-id", "4", "--json")
    assert code == 0
    times = json.loads(out)["fire_times"]
    slot = 1_800_000_300
    start = datetime.fromtimestamp(jittered_instant_s(4, slot, 120, slot + 300), UTC)
    assert times[0]["utc"] == "2027-01-15T08:05:00Z"
    assert times[0]["starts"] == start.strftime("%Y-%m-%dT%H:%M:%SZ")
    code, _, err = run(capsys, *args, "--jitter-seconds", "120")
    assert code == 2 and "schedule-id" in err
    code, _, err = run(capsys, *args, "--jitter-seconds", "3601", "--schedule-id", "4")
    assert code == 2 and "jitter-seconds" in err
