"""``appliance worker [--config PATH]``: the dedicated worker and its engine (docs/worker.md)."""

from __future__ import annotations

import argparse
import os
import sys


def run(args: argparse.Namespace) -> int:
    from appliance.worker.runtime import run_worker  # keep `appliance --help` light

    return run_worker(os.environ, args.config, sys.stdout)


def register(subparsers: argparse._SubParsersAction) -> None:
    worker = subparsers.add_parser("worker", help="run the dedicated worker and its engine")
    worker.add_argument(
        "--config",
        metavar="PATH",
        help="worker config file (default: JSON from MCP_SCHEDULED_WORKER_CONFIG)",
    )
    worker.set_defaults(func=run)
