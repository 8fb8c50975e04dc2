"""Top-level argument parsing.

Each role or admin tool lives in its own module exposing ``register(subparsers)``; the module sets
``func`` on its parser so that ``main`` only dispatches. Exit codes: 0 success, 1 runtime failure,
2 invalid input (argparse uses 2 as well).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from appliance import __version__
from appliance.cli import admin, completion, roles

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="appliance",
        description="Replicated cron appliance: voters agree through Raft on which occurrence "
        "may run; a worker runs it at most once in an embedded V8 engine.",
    )
    parser.add_argument("--version", action="version", version=f"appliance {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    roles.register(subparsers)
    admin.register(subparsers)
    completion.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or EXIT_OK)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
