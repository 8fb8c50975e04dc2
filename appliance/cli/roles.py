"""Role subcommands: each role registers itself from its own module."""

from __future__ import annotations

import argparse

from appliance.cli import role_cluster, role_quickstart, role_runner, role_worker


def register(subparsers: argparse._SubParsersAction) -> None:
    role_runner.register(subparsers)
    role_worker.register(subparsers)
    role_quickstart.register(subparsers)
    role_cluster.register(subparsers)
