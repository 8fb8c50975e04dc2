"""Cost of the runner's checkpoint commands on one replica (pure apply, no I/O).

Run: ``.venv/bin/python bench/bench_runner_core.py``. Measures ClaimOccurrence, Admit (new and
existing), and an AcquireOwnership takeover over a store holding ``outstanding`` live records,
half of them admitted. Results go to docs/runner-core.md.
"""

from __future__ import annotations

import statistics
import time

from appliance.core.definition import parse_definition
from appliance.core.limits import Limits
from appliance.core.state import (
    AcquireOwnership,
    Admit,
    Authority,
    ClaimOccurrence,
    CreateSchedule,
    Observe,
    ObservedSchedule,
    SchedulerState,
    apply,
    binding_for,
)

T0 = 1_800_000_000
AUTHORITY = Authority("2099-01-01T00:00:00Z", 300, 128, "bench")
LIMITS = Limits(schedules=1, records=4096, outstanding=512, running=512)


def build(records: int) -> SchedulerState:
    definition = parse_definition(
        {
            "name": "bench",
            "code": "console.log('x')" * 100,
            "cron": "* * * * *",
            "timezone": "UTC",
            "policy": {
                "missed": {"CatchUp": {"cap": 1}},
                "overlap": "Concurrent",
                "retry": {"max_retries": 0, "delay_seconds": 0},
            },
        },
        LIMITS,
    )
    state = SchedulerState(LIMITS)
    apply(state, CreateSchedule(definition, T0 - 1))
    apply(state, AcquireOwnership("voter-a", 1, T0))
    for minute in range(records):
        slot = T0 + 60 * minute
        cursor = state.progress[1].cursor_s
        apply(state, Observe(slot + 1, (ObservedSchedule(1, cursor, slot + 1, (slot,), 0),)))
    return state


def timed(samples: list[float], fn) -> None:
    start = time.perf_counter()
    fn()
    samples.append((time.perf_counter() - start) * 1e6)


def main() -> None:
    state = build(LIMITS.outstanding)
    claims: list[float] = []
    admits: list[float] = []
    existing: list[float] = []
    at_s = T0 + 60 * LIMITS.outstanding
    for oid in sorted(state.occurrences):
        b = binding_for(state, oid, namespace="ns", worker_id="w", authority=AUTHORITY)
        timed(claims, lambda b=b, oid=oid: apply(state, ClaimOccurrence(oid, 1, 1, b, at_s)))
        if oid % 2:
            timed(admits, lambda b=b: apply(state, Admit(b, "inc-1", at_s)))
            timed(existing, lambda b=b: apply(state, Admit(b, "inc-1", at_s)))
    takeover: list[float] = []
    timed(takeover, lambda: apply(state, AcquireOwnership("voter-b", 2, at_s)))
    print(f"live records: {len(state.occurrences)}, checkpoint {state.size_bytes} bytes")
    for name, samples in (
        ("ClaimOccurrence", claims),
        ("Admit (new permit)", admits),
        ("Admit (existing)", existing),
        ("AcquireOwnership takeover", takeover),
    ):
        samples.sort()
        p50 = statistics.median(samples)
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        print(f"{name:28s} n={len(samples):4d} p50={p50:8.1f} us p99={p99:8.1f} us")


if __name__ == "__main__":
    main()
