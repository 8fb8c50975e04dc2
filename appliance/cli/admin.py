"""``appliance admin``: operator tooling.

Every tool group lives in its own module with a ``register(subparsers)`` function.
"""

from __future__ import annotations

import argparse

from appliance.cli import (
    admin_config,
    admin_contract,
    admin_cron,
    admin_ops,
    admin_schedule,
    admin_store,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    admin = subparsers.add_parser("admin", help="operator tooling")
    groups = admin.add_subparsers(dest="admin_command", metavar="TOOL")
    groups.required = True
    admin_cron.register(groups)
    admin_config.register(groups)
    admin_schedule.register(groups)
    admin_store.register(groups)
    admin_ops.register(groups)
    admin_contract.register(groups)
