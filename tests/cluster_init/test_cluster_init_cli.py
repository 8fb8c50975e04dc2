"""``appliance cluster init``: what it writes, how privately, and what it refuses to touch."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from appliance.cli.main import main as appliance_main
from appliance.cluster_init.readme import installed_command
from appliance.config.contract import contract_digest
from appliance.config.runner import load_runner_config

from .conftest import cluster_init, read_env_file
from .docs_commands import appliance_parser, commands_in, parses

EXPECTED_FILES = {
    "README.md",
    "cluster.env",
    "voter-1.json",
    "voter-2.json",
    "voter-3.json",
    "worker.json",
    "tls",
}


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_writes_three_voter_configs_a_worker_config_an_env_file_and_a_readme(
    tmp_path: Path,
) -> None:
    out = tmp_path / "cluster"
    assert cluster_init("--voters", "3", "--out", str(out)) == 0
    assert {p.name for p in out.iterdir()} == EXPECTED_FILES


def test_env_file_is_private_from_creation_even_under_a_permissive_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        assert cluster_init("--out", str(tmp_path / "c")) == 0
    finally:
        os.umask(previous)
    assert mode_of(tmp_path / "c" / "cluster.env") == 0o600
    assert mode_of(tmp_path / "c" / "voter-1.json") == 0o644


def credentials_of(path: Path) -> dict[str, str]:
    return {k: v for k, v in read_env_file(path).items() if k != "APPLIANCE_MANAGEMENT_ADDR"}


def test_env_file_exports_six_distinct_credentials_and_every_management_listener(
    tmp_path: Path,
) -> None:
    assert cluster_init("--out", str(tmp_path / "c"), "--base-port", "30000") == 0
    values = credentials_of(tmp_path / "c" / "cluster.env")
    assert len(values) == 6 and "MCP_SCHEDULER_ADMIN_TOKEN" in values
    assert len(set(values.values())) == 6
    exported = read_env_file(tmp_path / "c" / "cluster.env")
    listeners = "127.0.0.1:30020,127.0.0.1:30021,127.0.0.1:30022"
    assert exported["APPLIANCE_MANAGEMENT_ADDR"] == listeners
    voter = json.loads((tmp_path / "c" / "voter-1.json").read_text())
    assert voter["management"]["admin_bearer_env"] == "MCP_SCHEDULER_ADMIN_TOKEN"


def test_two_inits_never_share_a_credential(tmp_path: Path) -> None:
    assert cluster_init("--out", str(tmp_path / "a")) == 0
    assert cluster_init("--out", str(tmp_path / "b")) == 0
    first = credentials_of(tmp_path / "a" / "cluster.env")
    second = credentials_of(tmp_path / "b" / "cluster.env")
    assert not set(first.values()) & set(second.values())


def test_credentials_are_never_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cluster_init("--out", str(tmp_path / "c")) == 0
    printed = capsys.readouterr()
    for value in credentials_of(tmp_path / "c" / "cluster.env").values():
        assert value not in printed.out + printed.err


@pytest.fixture
def exported_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scrubbed_environ: None
) -> Path:
    """A cluster written by ``cluster init``, its credentials exported into the environment."""
    out = tmp_path / "c"
    assert cluster_init("--out", str(out)) == 0
    for variable, value in read_env_file(out / "cluster.env").items():
        monkeypatch.setenv(variable, value)
    return out


@pytest.mark.parametrize("name", ["voter-1.json", "voter-2.json", "voter-3.json"])
def test_admin_config_check_accepts_each_written_voter_config_with_its_credentials(
    exported_cluster: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    argv = ["admin", "config", "check", str(exported_cluster / name), "--check-env"]
    assert appliance_main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("ok\n")
    assert "credentials: all set and distinct" in printed


def test_admin_config_check_accepts_the_written_worker_config(
    exported_cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = str(exported_cluster / "worker.json")
    argv = ["admin", "config", "check", worker, "--worker", "--check-env"]
    capsys.readouterr()
    assert appliance_main(argv) == 0
    assert capsys.readouterr().out.startswith("ok\n")


def test_written_voters_share_one_contract_digest(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert cluster_init("--voters", "5", "--out", str(out)) == 0
    digests = {contract_digest(load_runner_config(out / f"voter-{i}.json")) for i in range(1, 6)}
    assert len(digests) == 1


def test_configs_use_the_requested_base_port_and_absolute_data_dirs(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert cluster_init("--out", str(out), "--base-port", "30000") == 0
    voter = json.loads((out / "voter-2.json").read_text())
    worker = json.loads((out / "worker.json").read_text())
    assert voter["cluster_port"] == 30001
    assert voter["admission_addr"] == "127.0.0.1:30011"
    assert voter["management"]["addr"] == "127.0.0.1:30021"
    assert worker["listen_addr"] == "127.0.0.1:30030"
    assert voter["data_dir"] == str(out / "data" / "voter-2")
    assert worker["data_dir"] == str(out / "data" / "worker-1")


def test_readme_gives_a_start_command_for_every_process(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert cluster_init("--out", str(out), "--base-port", "30000") == 0
    readme = (out / "README.md").read_text()
    app = installed_command()
    for i in (1, 2, 3):
        assert f". ./cluster.env && {app} runner voter-{i}.json" in readme
    assert f"{app} worker --config worker.json" in readme
    assert "APPLIANCE_MANAGEMENT_ADDR=127.0.0.1:30020,127.0.0.1:30021,127.0.0.1:30022" in readme
    assert f"    {app} admin status\n" in readme  # the env file names every listener


def test_readme_uses_the_installed_command_never_a_bare_appliance(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert cluster_init("--out", str(out)) == 0
    readme = (out / "README.md").read_text()
    app = installed_command()
    assert app.endswith("/appliance") or app.endswith(" -m appliance")
    assert Path(shlex.split(app)[0]).is_absolute() and Path(shlex.split(app)[0]).exists()
    for line in readme.splitlines():
        code = line.strip()
        if line.startswith("    ") and code:
            assert not code.startswith("appliance "), line
            assert "&& appliance " not in code, line
    # the command really runs: --version through the written path
    result = subprocess.run(
        [*shlex.split(app), "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_every_command_in_the_written_readme_parses(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert cluster_init("--voters", "5", "--out", str(out)) == 0
    commands = commands_in((out / "README.md").read_text(), installed_command())
    # checks, voters, worker check, worker, look (status, list, watch)
    assert len(commands) == 5 + 5 + 1 + 1 + 3
    parser = appliance_parser()
    assert all(parses(parser, command) for command in commands), commands


def test_readme_quotes_a_directory_with_a_space_for_the_shell(tmp_path: Path) -> None:
    out = tmp_path / "my cluster"
    assert cluster_init("--out", str(out)) == 0
    readme = (out / "README.md").read_text()
    app = installed_command()
    assert f"cd '{out}' && . ./cluster.env && {app} runner voter-1.json" in readme


def test_readme_mentions_the_demo_only_when_it_was_written(tmp_path: Path) -> None:
    assert cluster_init("--out", str(tmp_path / "demo")) == 0
    assert cluster_init("--out", str(tmp_path / "plain"), "--no-demo") == 0
    assert "demo schedule runs every minute" in (tmp_path / "demo" / "README.md").read_text()
    assert "No schedule was written" in (tmp_path / "plain" / "README.md").read_text()
    plain = json.loads((tmp_path / "plain" / "voter-1.json").read_text())
    assert plain["schedules"] == []


def test_an_existing_empty_directory_is_used(tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    assert cluster_init("--out", str(out)) == 0
    assert {p.name for p in out.iterdir()} == EXPECTED_FILES


def test_a_non_empty_directory_is_refused_and_left_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "cluster.env").write_text("export KEEP=me\n")
    assert cluster_init("--out", str(out)) == 2
    assert "not empty" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["cluster.env"]
    assert (out / "cluster.env").read_text() == "export KEEP=me\n"


def test_a_directory_holding_only_a_hidden_file_is_not_empty(tmp_path: Path) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / ".keep").write_text("")
    assert cluster_init("--out", str(out)) == 2
    assert [p.name for p in out.iterdir()] == [".keep"]


def test_a_file_in_place_of_the_directory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "file"
    out.write_text("x")
    assert cluster_init("--out", str(out)) == 2
    assert out.read_text() == "x"


@pytest.mark.parametrize(
    ("flag", "value"), [("--voters", "2"), ("--voters", "11"), ("--base-port", "1023")]
)
def test_invalid_input_writes_nothing(tmp_path: Path, flag: str, value: str) -> None:
    out = tmp_path / "c"
    assert cluster_init("--out", str(out), flag, value) == 2
    assert not out.exists()
