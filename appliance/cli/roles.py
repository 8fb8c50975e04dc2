"""Role subcommands: runner, worker, quickstart, cluster."""

from __future__ import annotations

import argparse

from appliance.cli.not_yet import not_available


def register(subparsers: argparse._SubParsersAction) -> None:
    runner = subparsers.add_parser("runner", help="run one voter from a runner config file")
    runner.add_argument("config", metavar="CONFIG.json", help="runner configuration file")
    runner.set_defaults(func=not_available("the runner role"))

    worker = subparsers.add_parser("worker", help="run the dedicated worker and its engine")
    worker.add_argument(
        "--config",
        metavar="PATH",
        help="worker config file (default: JSON from MCP_SCHEDULED_WORKER_CONFIG)",
    )
    worker.set_defaults(func=not_available("the worker role"))

    quickstart = subparsers.add_parser(
        "quickstart", help="start one voter, one worker and a demo schedule on loopback"
    )
    quickstart.add_argument("--data-dir", metavar="DIR", help="where the stores live")
    quickstart.set_defaults(func=not_available("quickstart"))
