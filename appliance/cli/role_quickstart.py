"""``appliance quickstart``: the embedded default on loopback (docs/runner.md)."""

from __future__ import annotations

import argparse
import sys

from appliance.cli.role_runner import time_scale_arg


def run(args: argparse.Namespace) -> int:
    from appliance.runner.quickstart import run_quickstart  # keep `appliance --help` light

    return run_quickstart(args.data_dir, sys.stdin, sys.stdout, time_scale=args.time_scale)


def register(subparsers: argparse._SubParsersAction) -> None:
    quickstart = subparsers.add_parser(
        "quickstart", help="start one voter, one worker and a demo schedule on loopback"
    )
    quickstart.add_argument(
        "--data-dir", metavar="DIR", help="where configs, credentials and stores live"
    )
    quickstart.add_argument(
        "--time-scale",
        type=time_scale_arg,
        default=None,
        metavar="N",
        help="tests only (needs APPLIANCE_TESTING=1): wall time runs N times faster",
    )
    quickstart.set_defaults(func=run)
