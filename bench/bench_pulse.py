"""Benchmark: one scheduler pulse over 1,024 "* * * * *" schedules (issue 2 "Must show").

Measures, in one run on this machine:

* a pulse with nothing due: ``Pulse.plan`` at an instant before every next due time
  (target: median <= 1 ms);
* a pulse with all 1,024 due: ``Pulse.plan`` (selection) + ``apply`` of the ``Observe`` command
  (1,024 new Pending occurrences, parts encoded, budget checked) + ``Pulse.committed`` (heap
  advanced) (target: median <= 1/10 of the croniter rebuild below);
* the baseline: building 1,024 croniter iterators and taking one next time from each.

Run: ``.venv/bin/python bench/bench_pulse.py [--rounds N]``; it prints a Markdown table.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from datetime import UTC, datetime
from zoneinfo import available_timezones

from croniter import croniter

from appliance.core.calendar import compile_schedule
from appliance.core.definition import parse_definition
from appliance.core.errors import InvalidSchedule
from appliance.core.limits import Limits
from appliance.core.pulse import Pulse
from appliance.core.state import CreateSchedule, SchedulerState, apply, from_json

SCHEDULES = 1024
T0 = int(datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp())
LIMITS = Limits(schedules=1024, records=65536, outstanding=4096, running=16, grace_seconds=5)
DEFINITION = {
    "name": "bench",
    "code": "console.log('scheduled')",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}


def build_state() -> SchedulerState:
    state = SchedulerState(LIMITS)
    definition = parse_definition(DEFINITION, LIMITS)
    for _ in range(SCHEDULES):
        apply(state, CreateSchedule(definition, T0 - 30))
    return state


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def bench_nothing_due(state, compiled, rounds: int) -> list[float]:
    pulse = Pulse.rebuild(state, compiled)
    samples = []
    for k in range(rounds):
        now_s = T0 - 1 - (k % 25)
        start = time.perf_counter()
        plan = pulse.plan(state, compiled, now_s)
        samples.append(time.perf_counter() - start)
        if plan is not None:
            raise RuntimeError("nothing should be due")
    return samples


def bench_all_due(snapshot: bytes, compiled, rounds: int) -> dict[str, list[float]]:
    phases: dict[str, list[float]] = {"plan": [], "apply": [], "committed": [], "total": []}
    for _ in range(rounds):
        state = from_json(snapshot)
        pulse = Pulse.rebuild(state, compiled)
        gc.collect()  # start each sample clean, as the baseline does
        t0 = time.perf_counter()
        plan = pulse.plan(state, compiled, T0 + 2)
        t1 = time.perf_counter()
        report = apply(state, plan.command).value
        t2 = time.perf_counter()
        pulse.committed(state, plan, compiled)
        t3 = time.perf_counter()
        if len(report.created) != SCHEDULES or pulse.next_due_s() != T0 + 60:
            raise RuntimeError("every schedule should have been selected once")
        for name, value in (("plan", t1 - t0), ("apply", t2 - t1), ("committed", t3 - t2)):
            phases[name].append(value)
        phases["total"].append(t3 - t0)
    return phases


def bench_croniter_rebuild(rounds: int) -> list[float]:
    start_at = datetime.fromtimestamp(T0 - 30, UTC)
    samples = []
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        for _ in range(SCHEDULES):
            croniter("* * * * *", start_at).get_next(datetime)
        samples.append(time.perf_counter() - start)
    return samples


def distinct_calendars(state: SchedulerState) -> dict:
    """1,024 different (cron, zone) pairs that all fire every minute, so no two schedules share
    a calendar step (the worst case for the pulse's per-pulse memo)."""
    compiled = []
    for cron in ("* * * * *", "0-59 * * * *", "* 0-23 * * *"):
        for zone in sorted(available_timezones()):
            try:
                compiled.append(compile_schedule(cron, zone))
            except InvalidSchedule:
                continue  # not an explicit IANA name (e.g. "localtime")
    return dict(zip(sorted(state.schedules), compiled, strict=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    state = build_state()
    compiled = {sid: compile_schedule("* * * * *", "UTC") for sid in state.schedules}
    snapshot = state.to_json()
    nothing = bench_nothing_due(state, compiled, rounds=max(1000, args.rounds * 100))
    distinct = distinct_calendars(state)
    # Interleave every side round by round, so load from other processes hits them alike.
    all_due: dict[str, list[float]] = {"plan": [], "apply": [], "committed": [], "total": []}
    distinct_due: dict[str, list[float]] = {"plan": [], "apply": [], "committed": [], "total": []}
    baseline: list[float] = []
    for _ in range(args.rounds):
        baseline += bench_croniter_rebuild(1)
        for phase, samples in bench_all_due(snapshot, compiled, 1).items():
            all_due[phase] += samples
        for phase, samples in bench_all_due(snapshot, distinct, 1).items():
            distinct_due[phase] += samples
    pulse = [p + c for p, c in zip(all_due["plan"], all_due["committed"], strict=True)]
    pulse_distinct = [
        p + c for p, c in zip(distinct_due["plan"], distinct_due["committed"], strict=True)
    ]
    baseline_ms = median_ms(baseline)
    rows = [
        ("pulse, nothing due (heap peek)", f"{median_ms(nothing) * 1000:.1f} µs", "≤ 1 ms"),
        (
            "pulse, all 1,024 due: selection + heap update (owner)",
            f"{median_ms(pulse):.2f} ms",
            f"≤ {baseline_ms / 10:.1f} ms (1/10 of baseline)",
        ),
        ("— selection (`Pulse.plan`)", f"{median_ms(all_due['plan']):.2f} ms", ""),
        ("— heap update (`Pulse.committed`)", f"{median_ms(all_due['committed']):.2f} ms", ""),
        (
            "same, 1,024 distinct (cron, zone) calendars: selection + heap",
            f"{median_ms(pulse_distinct):.2f} ms",
            f"≤ {baseline_ms / 10:.1f} ms",
        ),
        (
            "apply of that `Observe` (1,024 new records, every replica)",
            f"{median_ms(all_due['apply']):.2f} ms",
            "(no target)",
        ),
        ("pulse + apply, end to end", f"{median_ms(all_due['total']):.2f} ms", ""),
        ("baseline: 1,024 croniter rebuilds + one next each", f"{baseline_ms:.1f} ms", ""),
    ]
    print(f"| measurement ({SCHEDULES} schedules of `* * * * *`, median) | value | target |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(
        f"\nratios to baseline: pulse {median_ms(pulse) / baseline_ms:.3f}, "
        f"pulse + apply {median_ms(all_due['total']) / baseline_ms:.3f}; "
        f"rounds={args.rounds}; checkpoint before the pulse {len(snapshot)} bytes"
    )


if __name__ == "__main__":
    main()
