"""The command line: every subcommand answers --help, unbuilt roles refuse clearly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from appliance.cli.main import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "appliance", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "argv",
    [[], ["runner"], ["worker"], ["quickstart"], ["admin"]],
)
def test_every_subcommand_has_help(argv: list[str]) -> None:
    result = run_cli(*argv, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


def test_missing_subcommand_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
