"""CPU cost of applying one ``Observe`` of 512 due schedules (issue 22: the commands' hooks on the
pulse's hot path). Run it against two trees to compare:

    PYTHONPATH=/path/to/tree .venv/bin/python bench/bench_observe_apply.py
"""

from __future__ import annotations

import statistics
import time

from appliance.core.definition import parse_definition
from appliance.core.limits import Limits
from appliance.core.state import (
    Claim,
    CreateSchedule,
    Observe,
    ObservedSchedule,
    RecordOutcome,
    SchedulerState,
    apply,
)

SCHEDULES = 512
ROUNDS = 40
T0 = 1_800_000_000


def main() -> None:
    limits = Limits(schedules=SCHEDULES, records=4096, outstanding=1024, running=1024)
    body = {
        "name": "j",
        "code": "1",
        "cron": "* * * * *",
        "timezone": "UTC",
        "policy": {
            "missed": "Skip",
            "overlap": "Concurrent",
            "retry": {"max_retries": 0, "delay_seconds": 0},
        },
    }
    definition = parse_definition(body, limits)
    state = SchedulerState(limits)
    for _ in range(SCHEDULES):
        apply(state, CreateSchedule(definition, T0 - 1))
    cursor = dict.fromkeys(range(1, SCHEDULES + 1), T0 - 1)
    samples = []
    for minute in range(ROUNDS):
        now = T0 + minute * 60 + 1
        entries = tuple(ObservedSchedule(i, cursor[i], now, (now - 1,), 0) for i in cursor)
        cursor = dict.fromkeys(cursor, now)
        started = time.process_time()
        apply(state, Observe(now, entries))
        samples.append(time.process_time() - started)
        for oid in [o.id for o in state.occurrences.values() if not o.terminal]:
            apply(state, Claim(oid, 1, now))
            apply(state, RecordOutcome(oid, 1, "completed", now))
    print(f"Observe({SCHEDULES} schedules) CPU p50 {statistics.median(samples[5:]) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
