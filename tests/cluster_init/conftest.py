"""Driving ``appliance cluster init`` through its own parser (as the CLI will register it)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from appliance.cli import role_cluster


def cluster_init(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="appliance")
    role_cluster.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["cluster", "init", *argv])
    return int(args.func(args))


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            values[name] = value
    return values


@pytest.fixture
def scrubbed_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No credential variable leaks in from the developer's shell."""
    for name in list(os.environ):
        if name.startswith("MCP_SCHEDULER_"):
            monkeypatch.delenv(name)
