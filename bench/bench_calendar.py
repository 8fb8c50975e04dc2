"""Micro-benchmark of the calendar (not collected by pytest).

    .venv/bin/python bench/bench_calendar.py [--repeat N]

Measures, in one run on the same machine:

* ``CompiledSchedule.next_after`` per call (the pulse's hot path), for an every-minute job in UTC
  and in a DST zone, and for a fixed-time job;
* the same answer from croniter the expensive way (construct + ``get_next`` per call), and the
  cheap way (``get_next`` on a kept iterator, which the pulse cannot use because it must answer
  for arbitrary instants);
* 1,024 every-minute schedules, one ``next_after`` each (what a pulse with all due does);
* ``latest_at_or_before`` after a year of downtime (count 1 and 128) and ``count_between`` over a
  year, which must not walk the 525,600 slots;
* ``compile_schedule``.

Prints a Markdown table of medians (and p90) to paste into docs/bench-calendar.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from appliance.core.calendar import compile_schedule
from appliance.core.cron_zone import _year_table

build_year_table = _year_table.__wrapped__  # bypass the cache to measure the build itself

AFTER = datetime(2025, 6, 1, 12, 0, 30, tzinfo=UTC)
SCHEDULES = 1_024


def measure(action: Callable[[], object], repeat: int, inner: int) -> tuple[float, float]:
    """Median and p90 of the per-call time in microseconds."""
    action()  # warm caches (zone tables, imports)
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(inner):
            action()
        samples.append((time.perf_counter() - started) / inner * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.9) - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    repeat = args.repeat

    utc_minute = compile_schedule("* * * * *", "UTC")
    berlin_minute = compile_schedule("* * * * *", "Europe/Berlin")
    fixed = compile_schedule("30 2 * * *", "America/New_York")
    kept = croniter("* * * * *", AFTER)
    pulse = [compile_schedule("* * * * *", "UTC") for _ in range(SCHEDULES)]
    year_ago = AFTER - timedelta(days=365)

    def pulse_all_due() -> None:
        for schedule in pulse:
            schedule.next_after(AFTER)

    def croniter_rebuild_pulse() -> None:
        for _ in range(SCHEDULES):
            croniter("* * * * *", AFTER).get_next(datetime)

    rows = [
        ("next_after, `* * * * *` UTC", lambda: utc_minute.next_after(AFTER), 2000),
        ("next_after, `* * * * *` Europe/Berlin", lambda: berlin_minute.next_after(AFTER), 2000),
        ("next_after, `30 2 * * *` America/New_York", lambda: fixed.next_after(AFTER), 2000),
        (
            "croniter: construct + get_next per call",
            lambda: croniter("* * * * *", AFTER).get_next(datetime),
            200,
        ),
        ("croniter: get_next on a kept iterator", lambda: kept.get_next(datetime), 2000),
        (f"pulse: next_after for {SCHEDULES} schedules", pulse_all_due, 3),
        (f"pulse: croniter rebuild for {SCHEDULES} schedules", croniter_rebuild_pulse, 1),
        (
            "latest_at_or_before, 1 year down, count 1",
            lambda: berlin_minute.latest_at_or_before(AFTER, 1, after=year_ago),
            200,
        ),
        (
            "latest_at_or_before, 1 year down, count 128",
            lambda: berlin_minute.latest_at_or_before(AFTER, 128, after=year_ago),
            20,
        ),
        (
            "count_between over 1 year (525,600 slots)",
            lambda: berlin_minute.count_between(year_ago, AFTER),
            20,
        ),
        ("compile_schedule", lambda: compile_schedule("*/5 9-17 * * 1-5", "Europe/Berlin"), 500),
        (
            "offset table for one new zone-year (then cached)",
            lambda: build_year_table(ZoneInfo("America/New_York"), 2031),
            50,
        ),
    ]
    print(f"Python {platform.python_version()} on {platform.machine()}, repeat={repeat}\n")
    print("| operation | median | p90 |")
    print("|---|---:|---:|")
    for name, action, inner in rows:
        median_us, p90_us = measure(action, repeat, inner)
        print(f"| {name} | {format_us(median_us)} | {format_us(p90_us)} |")


def format_us(value_us: float) -> str:
    if value_us >= 1000:
        return f"{value_us / 1000:.2f} ms"
    return f"{value_us:.1f} µs"


if __name__ == "__main__":
    main()
