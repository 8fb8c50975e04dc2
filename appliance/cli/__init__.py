"""Command-line entry point: one binary, the subcommand selects the role."""

from appliance.cli.main import main

__all__ = ["main"]
