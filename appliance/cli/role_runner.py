"""``appliance runner CONFIG.json``: one voter (docs/runner.md)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from appliance.logs import add_log_format_argument


def run(args: argparse.Namespace) -> int:
    # keep `appliance --help` light
    from appliance.runner.process import NetworkOverride, main_stdio

    network = None
    if args.peer_route:
        network = NetworkOverride(dict(args.peer_route))
    return main_stdio(
        args.config,
        args.time_scale,
        os.environ,
        clock_offset_s=args.clock_offset_seconds,
        network=network,
        log_format=args.log_format,
    )


def time_scale_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number") from None
    if not 1.0 <= value <= 100_000.0:
        raise argparse.ArgumentTypeError("must be between 1 and 100000")
    return value


def peer_route_arg(text: str) -> tuple[str, Any]:
    from appliance.config.addresses import AddressError, parse_host_port

    node_id, sep, addr = text.partition("=")
    if not sep or not node_id:
        raise argparse.ArgumentTypeError("must be ID=HOST:PORT")
    try:
        return node_id, parse_host_port(addr)
    except AddressError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


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
    # Chaos-suite hooks (tests/chaos), refused unless APPLIANCE_TESTING=1.
    runner.add_argument(
        "--clock-offset-seconds",
        type=float,
        default=None,
        metavar="S",
        help="tests only (needs APPLIANCE_TESTING=1): shift this voter's wall clock by S seconds",
    )
    runner.add_argument(
        "--peer-route",
        type=peer_route_arg,
        action="append",
        default=[],
        metavar="ID=HOST:PORT",
        help="tests only (needs APPLIANCE_TESTING=1): dial peer ID at HOST:PORT",
    )
    add_log_format_argument(runner)
    runner.set_defaults(func=run)
