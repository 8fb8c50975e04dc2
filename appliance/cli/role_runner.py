"""``appliance runner CONFIG.json``: one voter (docs/runner.md)."""

from __future__ import annotations

import argparse
import os


def run(args: argparse.Namespace) -> int:
    from appliance.runner.process import main_stdio  # keep `appliance --help` light

    return main_stdio(args.config, args.time_scale, os.environ)


def time_scale_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number") from None
    if not 1.0 <= value <= 100_000.0:
        raise argparse.ArgumentTypeError("must be between 1 and 100000")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    runner = subparsers.add_parser("runner", help="run one voter from a runner config file")
    runner.add_argument("config", metavar="CONFIG.json", help="runner configuration file")
    runner.add_argument(
        "--time-scale",
        type=time_scale_arg,
        default=None,
        metavar="N",
        help="tests only (needs APPLIANCE_TESTING=1): wall time runs N times faster",
    )
    runner.set_defaults(func=run)
