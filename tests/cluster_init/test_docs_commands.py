"""Every appliance command quoted in docs/cluster.md is one the CLI accepts."""

from __future__ import annotations

import pytest

from .docs_commands import appliance_parser, doc_commands, parses

COMMANDS = doc_commands("cluster.md", "appliance")


def test_the_guide_quotes_init_check_start_and_look_commands() -> None:
    verbs = {" ".join(command.split()[:2]) for command in COMMANDS}
    assert {"cluster init", "admin config", "runner voter-1.json", "worker --config"} <= verbs
    assert {"admin status", "admin list"} <= verbs


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_in_the_cluster_guide_parses(command: str) -> None:
    assert parses(appliance_parser(), command), command
