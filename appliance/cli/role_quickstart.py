"""``appliance quickstart``: the embedded default on loopback."""

from __future__ import annotations

import argparse

from appliance.cli.not_yet import not_available


def register(subparsers: argparse._SubParsersAction) -> None:
    quickstart = subparsers.add_parser(
        "quickstart", help="start one voter, one worker and a demo schedule on loopback"
    )
    quickstart.add_argument("--data-dir", metavar="DIR", help="where the stores live")
    quickstart.set_defaults(func=not_available("quickstart"))
