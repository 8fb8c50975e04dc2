"""``appliance runner CONFIG.json``: one voter."""

from __future__ import annotations

import argparse

from appliance.cli.not_yet import not_available


def register(subparsers: argparse._SubParsersAction) -> None:
    runner = subparsers.add_parser("runner", help="run one voter from a runner config file")
    runner.add_argument("config", metavar="CONFIG.json", help="runner configuration file")
    runner.set_defaults(func=not_available("the runner role"))
