"""``python -m tests.chaos --minutes N --seed S``: long chaos runs, one JSON report per run.

Runs back to back (seed S, S+1, ...) until N minutes have passed, each with ``--chaos-seconds``
of fault injection, then prints the totals. Exit status 1 when any run found a violation or
could not complete.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.chaos.run import RunConfig, run_chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos")
    parser.add_argument("--minutes", type=float, default=10.0, help="total wall time budget")
    parser.add_argument("--seed", type=int, default=1, help="first seed; runs use S, S+1, ...")
    parser.add_argument("--chaos-seconds", type=float, default=60.0, help="faults per run")
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument("--keep", type=Path, default=None, help="keep run directories here")
    args = parser.parse_args(argv)

    deadline = time.monotonic() + args.minutes * 60
    totals: Counter[str] = Counter()
    runs = occurrences = executions = violations = not_converged = errors = 0
    unknown_with_permit = unknown_without_permit = 0
    by_state: Counter[str] = Counter()
    seed = args.seed
    while (runs + errors) == 0 or time.monotonic() < deadline:
        with tempfile.TemporaryDirectory(prefix=f"chaos-{seed}-") as tmp:
            root = (args.keep / f"seed-{seed}") if args.keep else Path(tmp)
            try:
                report = run_chaos(
                    RunConfig(
                        seed=seed,
                        root=root,
                        chaos_s=args.chaos_seconds,
                        time_scale=args.time_scale,
                    )
                )
            except Exception as exc:  # a run that could not start or finish: count it, go on
                print(json.dumps({"seed": seed, "error": repr(exc)[:2000]}), flush=True)
                errors += 1
                seed += 1
                continue
        print(json.dumps(report.as_dict()), flush=True)
        runs += 1
        totals.update(report.faults)
        occurrences += report.occurrences
        executions += report.executions
        violations += len(report.violations)
        not_converged += 0 if report.converged else 1
        by_state.update(report.by_state)
        unknown_with_permit += report.unknown_with_permit
        unknown_without_permit += report.unknown_without_permit
        seed += 1
    summary = {
        "runs": runs,
        "faults": dict(sorted(totals.items())),
        "faults_total": sum(totals.values()),
        "occurrences": occurrences,
        "by_state": dict(sorted(by_state.items())),
        "executions": executions,
        "unknown_with_permit": unknown_with_permit,
        "unknown_without_permit": unknown_without_permit,
        "unknown_per_100_occurrences": round(100 * by_state["Unknown"] / occurrences, 2)
        if occurrences
        else 0.0,
        "not_converged": not_converged,
        "errors": errors,
        "violations": violations,
    }
    print(json.dumps({"summary": summary}), flush=True)
    return 1 if violations or errors else 0


if __name__ == "__main__":
    sys.exit(main())
