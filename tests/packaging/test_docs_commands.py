"""Every command quoted in docs/packaging.md is one the archive or the build script accepts."""

from __future__ import annotations

import shlex

import pytest

from tests.cluster_init.docs_commands import appliance_parser, doc_commands, parses

from .conftest import load_packaging_module

build = load_packaging_module("build_zipapp")
ZIPAPP_COMMANDS = doc_commands("packaging.md", "python appliance.pyz")
BUILD_COMMANDS = doc_commands("packaging.md", "python packaging/build_zipapp.py")


def test_the_guide_quotes_every_role_and_several_builds() -> None:
    roles = {command.split()[0] for command in ZIPAPP_COMMANDS}
    assert {"runner", "worker", "admin", "quickstart", "cluster"} <= roles
    assert len(BUILD_COMMANDS) >= 3


@pytest.mark.parametrize("command", ZIPAPP_COMMANDS)
def test_each_zipapp_command_in_the_guide_parses(command: str) -> None:
    assert parses(appliance_parser(), command), command


@pytest.mark.parametrize("command", BUILD_COMMANDS)
def test_each_build_command_in_the_guide_parses(command: str) -> None:
    try:
        build.parse_args(shlex.split(command))
    except SystemExit:
        pytest.fail(command)
