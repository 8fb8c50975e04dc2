"""``python -m appliance.sim.system --seeds N [--start S] [--fleet] [--verbose]``.

Runs N consecutive seeds of the whole-system simulator (appliance/sim/system/world.py); every
failure prints its seed, the rule it broke and the command that replays it. The last line sums
the runs: occurrences by final state, permits, launches, and ``Unknown`` occurrences with and
without a committed permit (issue 23). The owners run strict: an exception inside one fails its
seed (``--lenient``: logged as ``loop_error`` and counted, as production does). Exit status 1 if
any seed failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter

from appliance.sim.system.config import liveness_ms_for
from appliance.sim.system.world import SystemOptions, run_system_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m appliance.sim.system", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--safety-ms", type=int, default=SystemOptions.safety_ms)
    parser.add_argument(
        "--liveness-ms",
        type=int,
        default=None,
        help=f"default {SystemOptions.liveness_ms} per schedule (liveness_ms_for)",
    )
    parser.add_argument(
        "--allow-unknown-without-permit",
        action="store_true",
        help="do not fail an Unknown occurrence that has no committed permit (by default it "
        "fails the seed: the owner fences such attempts, issue 23)",
    )
    parser.add_argument(
        "--lenient",
        action="store_true",
        help="production's behaviour for an exception inside an owner: logged as loop_error "
        "and the run goes on (by default the owners run strict and it fails the seed, issue 31)",
    )
    parser.add_argument(
        "--records",
        type=int,
        default=0,
        help="the retention profile (issue 19): this small a records limit, so records retire, "
        "the worker prunes at or below the floor W, and exec requests are replayed to it later",
    )
    parser.add_argument(
        "--schedules",
        type=int,
        default=1,
        help="the burst profile (issue 17): this many every-minute schedules (at most 4), so "
        "occurrences fall due together and wait in the engine's queue",
    )
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="the fleet profile (issue 33): each seed runs 1-4 workers, with worker crashes, "
        "partitions between voters and single workers, and drains",
    )
    parser.add_argument("--time-scale", type=float, default=SystemOptions.time_scale)
    parser.add_argument("--verbose", action="store_true", help="print one line per seed")
    parser.add_argument(
        "--progress", type=int, default=1000, help="print a progress line every this many seeds"
    )
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the components' own logs; the summary says enough
    options = SystemOptions(
        safety_ms=args.safety_ms,
        liveness_ms=liveness_ms_for(args.schedules)
        if args.liveness_ms is None
        else args.liveness_ms,
        strict_unknown=not args.allow_unknown_without_permit,
        strict=not args.lenient,
        records=args.records,
        schedules=args.schedules,
        time_scale=args.time_scale,
        fleet=args.fleet,
    )
    started = time.monotonic()
    failures = 0
    totals: Counter[str] = Counter()
    for seed in range(args.start, args.start + args.seeds):
        result = run_system_seed(seed, options)
        totals.update(result.states)
        for name in ("occurrences", "permits", "launches", "events", "voter_crashes"):
            totals[name] += getattr(result, name)
        for name in ("worker_crashes", "power_losses", "worker_pruned"):
            totals[name] += getattr(result, name)
        if args.fleet:
            totals[f"fleet_of_{result.workers}"] += 1
            for name, count in result.reached.items():  # the fleet at work (issue 33)
                if name.startswith("fleet:"):
                    totals[name] += count

        for name in ("exec_replayed", "exec_retired", "observe_retired", "loop_error"):
            totals[name] += result.reached.get(name, 0)
        totals["unknown_with_permit"] += result.unknown_with_permit
        totals["unknown_without_permit"] += result.unknown_without_permit
        for name, count in result.reached.items():  # paced dispatch at work (issue 17)
            if name.startswith("pacing:") or name.startswith("NoteCapacityWait:"):
                totals[name] += count
        if args.verbose:
            print(
                f"seed {seed}: {'ok' if result.ok else 'FAIL'} occurrences={result.occurrences} "
                f"states={result.states} permits={result.permits} launches={result.launches} "
                f"unknown with/without permit={result.unknown_with_permit}/"
                f"{result.unknown_without_permit} W={result.retained_through} "
                f"pruned={result.worker_pruned}"
            )
        done = seed - args.start + 1
        if args.progress and done % args.progress == 0 and done < args.seeds:
            print(
                f"... {done} seeds, {failures} failed, {time.monotonic() - started:.0f} s",
                flush=True,
            )
        if not result.ok:
            failures += 1
            print(f"FAIL seed {seed}: {result.violation}", flush=True)
            print(
                f"  reproduce: python -m appliance.sim.system --seeds 1 --start {seed} "
                f"--safety-ms {args.safety_ms} --liveness-ms {options.liveness_ms}"
                f"{f' --records {args.records}' if args.records else ''}"
                f"{f' --schedules {args.schedules}' if args.schedules != 1 else ''}"
                f"{' --fleet' if args.fleet else ''}"
                f" --time-scale {args.time_scale:g}"
                f"{' --allow-unknown-without-permit' if args.allow_unknown_without_permit else ''}"
                f"{' --lenient' if args.lenient else ''}"
                " --verbose"
            )
    elapsed_s = time.monotonic() - started
    print(
        f"{args.seeds} seeds from {args.start}: {failures} failed in {elapsed_s:.0f} s; "
        f"totals {dict(sorted(totals.items()))}"
    )
    occurrences = max(1, totals["occurrences"])
    print(
        f"Unknown per 100 occurrences: {100 * totals.get('Unknown', 0) / occurrences:.1f} "
        f"(with a committed permit {100 * totals['unknown_with_permit'] / occurrences:.1f}, "
        f"without {100 * totals['unknown_without_permit'] / occurrences:.1f})"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
