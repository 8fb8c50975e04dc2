"""``appliance quickstart``: the embedded default on loopback (docs/quickstart-internals.md)."""

from __future__ import annotations

import argparse
import sys

from appliance.cli.role_runner import time_scale_arg

DEFAULT_DATA_DIR = None  # kept equal to appliance.quickstart.run's: resolved there


def run(args: argparse.Namespace) -> int:
    from appliance.quickstart.run import run_quickstart  # keep `appliance --help` light

    return run_quickstart(
        args.data_dir, sys.stdin, sys.stdout, time_scale=args.time_scale, stderr=sys.stderr
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    quickstart = subparsers.add_parser(
        "quickstart",
        help="start one voter, one worker and a demo schedule on loopback",
        description="Start one voter (single replication), its admission route and loopback "
        "management listener, one worker and its engine, with fresh credentials and a demo "
        "schedule that runs every minute. Running it again resumes the same data directory. "
        "Ctrl-C stops everything.",
    )
    quickstart.add_argument(
        "--data-dir",
        metavar="DIR",
        default=DEFAULT_DATA_DIR,
        help="where configs, credentials, stores and logs live (default: an existing "
        "./appliance-quickstart, else $XDG_DATA_HOME/appliance/quickstart or "
        "~/.local/share/appliance/quickstart; the path is printed)",
    )
    quickstart.add_argument(
        "--time-scale",
        type=time_scale_arg,
        default=None,
        metavar="N",
        help="tests only (needs APPLIANCE_TESTING=1): wall time runs N times faster",
    )
    quickstart.set_defaults(func=run)
