"""Commands quoted in docs/cluster.md and docs/packaging.md, checked against the real parsers."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from appliance.cli import admin_ops, role_cluster
from appliance.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
# Indented code lines, minus a leading "cd DIR && . ./cluster.env && ".
_CODE_LINE = re.compile(r"^    (?:\$ )?(?:cd \S+ && (?:\. \./cluster\.env && )?)?(.+)$")


def doc_commands(doc: str, program: str) -> list[str]:
    """Every indented line of docs/DOC that runs PROGRAM, without the program itself."""
    return commands_in((ROOT / "docs" / doc).read_text(), program)


def commands_in(text: str, program: str) -> list[str]:
    """Every indented (Markdown code) line of TEXT that runs PROGRAM, without the program."""
    found = []
    for line in text.splitlines():
        match = _CODE_LINE.match(line)
        if match and match.group(1).startswith(program + " "):
            command = match.group(1).split("#", 1)[0].strip()
            found.append(command.removeprefix(program).strip())
    return found


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def appliance_parser() -> argparse.ArgumentParser:
    """The CLI parser, with the subcommands the integrator registers added if still missing."""
    parser = build_parser()
    roles = _subparsers(parser)
    if "cluster" not in roles.choices:
        role_cluster.register(roles)
    admin_tools = _subparsers(roles.choices["admin"])
    if "status" not in admin_tools.choices:
        admin_ops.register(admin_tools)
    return parser


def parses(parser: argparse.ArgumentParser, command: str) -> bool:
    try:
        parser.parse_args(shlex.split(command))
    except SystemExit:
        return False
    return True
