"""A clear refusal for subcommands whose capability has not been built yet."""

from __future__ import annotations

import argparse
import sys


def not_available(what: str) -> object:
    def run(_args: argparse.Namespace) -> int:
        print(f"appliance: {what} is not available yet in this build", file=sys.stderr)
        return 1

    return run
