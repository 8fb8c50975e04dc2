"""``appliance worker``: the dedicated worker and its engine."""

from __future__ import annotations

import argparse

from appliance.cli.not_yet import not_available


def register(subparsers: argparse._SubParsersAction) -> None:
    worker = subparsers.add_parser("worker", help="run the dedicated worker and its engine")
    worker.add_argument(
        "--config",
        metavar="PATH",
        help="worker config file (default: JSON from MCP_SCHEDULED_WORKER_CONFIG)",
    )
    worker.set_defaults(func=not_available("the worker role"))
