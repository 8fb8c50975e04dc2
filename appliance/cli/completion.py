"""``appliance completion bash|zsh``: a shell completion script for every subcommand and flag.

The script is generated from the argparse parser itself by ``shtab`` (a static script: completing
a word never starts Python), so it always matches the installed command. Load it with
``source <(appliance completion bash)`` (bash) or ``source <(appliance completion zsh)`` (zsh),
or write it where the shell looks for completions (docs/management.md).
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

SHELLS: Final = ("bash", "zsh")


def run(args: argparse.Namespace) -> int:
    import shtab

    from appliance.cli.main import build_parser

    print(shtab.complete(build_parser(), shell=args.shell), file=sys.stdout)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description="Print a completion script for every appliance subcommand and flag. Load it "
        "with: source <(appliance completion bash)",
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(func=run)
