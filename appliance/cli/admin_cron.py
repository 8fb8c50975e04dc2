"""`appliance admin cron`."""

from __future__ import annotations

import argparse

from appliance.cli.not_yet import not_available


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("cron", help="cron tools (not available yet)")
    parser.set_defaults(func=not_available("admin cron"))
