"""``python -m appliance.sim --seeds N [--start S] [--nodes 3|5] [--faults all|none|a,b]
[--leader-gone-hints] [--no-compaction] [--membership]``.

``python -m appliance.sim --system --seeds N ...`` runs the whole-system simulator instead
(appliance/sim/system/__main__.py, the same as ``python -m appliance.sim.system``).

Runs N consecutive seeds; every failure prints its seed and the exact command that reproduces it.
Exit status 1 if any seed failed.
"""

from __future__ import annotations

import argparse
import sys

from appliance.sim.faults import FAULT_CLASSES, parse_fault_classes
from appliance.sim.simulation import SimOptions, run_seed


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if "--system" in args_in:
        from appliance.sim.system.__main__ import main as system_main

        return system_main([a for a in args_in if a != "--system"])
    parser = argparse.ArgumentParser(prog="python -m appliance.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--nodes", type=int, choices=(1, 3, 5), default=3)
    parser.add_argument(
        "--faults", default="all", help=f"all, none, or a comma list of {', '.join(FAULT_CLASSES)}"
    )
    parser.add_argument("--safety-ms", type=int, default=SimOptions.safety_ms)
    parser.add_argument("--liveness-ms", type=int, default=SimOptions.liveness_ms_max)
    parser.add_argument(
        "--leader-gone-hints",
        action="store_true",
        help="followers learn at once that their leader's process is gone (as the driver's "
        "probe tells them), and sometimes wrongly",
    )
    parser.add_argument(
        "--no-compaction",
        action="store_true",
        help="never compact the log (the simulator before snapshots; compaction is on by default)",
    )
    parser.add_argument(
        "--membership",
        action="store_true",
        help="change the configuration during the faults: add learners, promote them, remove "
        "voters and the leader, crash a leader between a CONFIG append and its commit",
    )
    parser.add_argument("--verbose", action="store_true", help="print one line per seed")
    args = parser.parse_args(argv)
    options = SimOptions(
        nodes=args.nodes,
        fault_classes=parse_fault_classes(args.faults),
        safety_ms=args.safety_ms,
        liveness_ms_max=args.liveness_ms,
        leader_gone_hints=args.leader_gone_hints,
        compaction=not args.no_compaction,
        membership=args.membership,
    )
    failures = 0
    totals = {
        "events": 0,
        "elections": 0,
        "applied": 0,
        "crashes": 0,
        "reads": 0,
        "disk_losses": 0,
        "recoveries": 0,
        "leader_gone_hints": 0,
        "compactions": 0,
        "snapshots_installed": 0,
        "config_changes": 0,
        "config_crashes": 0,
        "leaders_removed": 0,
    }
    for seed in range(args.start, args.start + args.seeds):
        result = run_seed(seed, options)
        totals["events"] += result.events
        totals["elections"] += result.elections
        totals["applied"] += result.applied_entries
        totals["crashes"] += result.crashes
        totals["reads"] += result.reads_released
        totals["disk_losses"] += result.disk_losses
        totals["recoveries"] += result.recoveries_completed
        totals["leader_gone_hints"] += result.leader_gone_hints
        totals["compactions"] += result.compactions
        totals["snapshots_installed"] += result.snapshots_installed
        totals["config_changes"] += result.config_changes
        totals["config_crashes"] += result.config_crashes
        totals["leaders_removed"] += result.leaders_removed
        if args.verbose:
            print(
                f"seed {seed}: {'ok' if result.ok else 'FAIL'} events={result.events} "
                f"elections={result.elections} applied={result.applied_entries} "
                f"crashes={result.crashes} disk_losses={result.disk_losses} "
                f"recoveries={result.recoveries_completed} compactions={result.compactions} "
                f"installs={result.snapshots_installed} faults={result.faults}"
            )
        if not result.ok:
            failures += 1
            print(f"FAIL seed {seed}: {result.violation}")
            print(
                f"  reproduce: python -m appliance.sim --seeds 1 --start {seed} "
                f"--nodes {args.nodes} --faults {args.faults} --safety-ms {args.safety_ms} "
                f"--liveness-ms {args.liveness_ms}"
                f"{' --leader-gone-hints' if args.leader_gone_hints else ''}"
                f"{' --no-compaction' if args.no_compaction else ''}"
                f"{' --membership' if args.membership else ''} --verbose"
            )
    print(
        f"{args.seeds} seeds from {args.start}, nodes={args.nodes}, faults={args.faults}: "
        f"{failures} failed; totals {totals}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
