"""The quickstart's data directory: what the first run writes, what later runs keep or repair."""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from appliance.config.credentials import resolve_runner_credentials, resolve_worker_credentials
from appliance.config.runner import load_runner_config
from appliance.config.worker import load_worker_config
from appliance.quickstart.files import (
    CREDENTIALS_FILE,
    LEGACY_CREDENTIALS_FILE,
    QuickstartError,
    port_is_free,
    prepare,
    read_credentials,
)

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def held() -> Iterator[list[socket.socket]]:
    """Listening sockets a test uses to take ports; closed afterwards."""
    socks: list[socket.socket] = []
    yield socks
    for sock in socks:
        sock.close()


def _take(held: list[socket.socket], port: int) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen(1)
    held.append(sock)


def _port(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1])


def test_the_first_run_writes_valid_configs_with_six_distinct_private_credentials(
    tmp_path: Path,
) -> None:
    layout = prepare(tmp_path / "qs", NOW)
    assert layout.fresh and layout.notes == []
    runner = load_runner_config(layout.runner_path)
    worker = load_worker_config({}, str(layout.worker_path))
    runner_credentials = resolve_runner_credentials(runner, layout.credentials)
    resolve_worker_credentials(worker, layout.credentials)
    assert runner.peers == () and runner.management is not None
    assert runner_credentials.operator is not None and runner_credentials.recovery is not None
    # The web console (issue 34): its own credential, loopback, read-only by default.
    assert runner.console is not None and runner_credentials.console is not None
    assert runner.console.addr.host == "127.0.0.1" and not runner.console.actions
    assert [d.name for d in runner.schedules] == ["hello"]
    assert runner.schedules[0].cron == "* * * * *"
    assert runner.remote.expires_at.year == 2027
    assert len(set(layout.credentials.values())) == 7
    assert runner_credentials.admin is not None
    written = read_credentials(layout.credentials_path)
    # The env file also names the management listener, for `appliance admin` without --addr.
    assert written.pop("APPLIANCE_MANAGEMENT_ADDR") == str(runner.management.addr)
    assert written == layout.credentials
    for path in (layout.credentials_path, layout.runner_path, layout.worker_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    ports = {
        runner.cluster_port,
        runner.admission_addr.port,
        runner.management.addr.port,
        runner.console.addr.port,
        worker.listen_addr.port,
    }
    assert len(ports) == 5


def test_a_second_run_reuses_configs_and_credentials_unchanged(tmp_path: Path) -> None:
    first = prepare(tmp_path, NOW)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    second = prepare(tmp_path, datetime(2030, 1, 1, tzinfo=UTC))
    assert not second.fresh and second.notes == []
    assert second.credentials == first.credentials
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_taken_sealed_port_is_a_clear_error_and_changes_nothing(
    tmp_path: Path, held: list[socket.socket]
) -> None:
    first = prepare(tmp_path, NOW)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    _take(held, first.runner["cluster_port"])
    with pytest.raises(QuickstartError, match=r"cluster port\) is in use.*sealed"):
        prepare(tmp_path, NOW)
    held.pop().close()
    _take(held, _port(first.worker["listen_addr"]))
    with pytest.raises(QuickstartError, match=r"the worker's port\) is in use"):
        prepare(tmp_path, NOW)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_taken_admission_or_management_port_moves_in_both_configs(
    tmp_path: Path, held: list[socket.socket]
) -> None:
    first = prepare(tmp_path, NOW)
    admission = _port(first.runner["admission_addr"])
    management = _port(first.management_addr)
    _take(held, admission)
    _take(held, management)
    second = prepare(tmp_path, NOW)
    assert len(second.notes) == 2
    new_admission = _port(second.runner["admission_addr"])
    assert new_admission != admission and _port(second.management_addr) != management
    worker = json.loads(second.worker_path.read_text())
    assert worker["admission_urls"] == [f"http://127.0.0.1:{new_admission}"]
    assert json.loads(second.runner_path.read_text()) == second.runner
    # The sealed values did not move.
    for key in ("cluster_port", "remote", "schedules", "peers"):
        assert second.runner[key] == first.runner[key]


def test_a_missing_credential_is_generated_and_the_others_kept(tmp_path: Path) -> None:
    first = prepare(tmp_path, NOW)
    kept = {k: v for k, v in first.credentials.items() if k != "MCP_SCHEDULER_RECOVERY_TOKEN"}
    (tmp_path / CREDENTIALS_FILE).write_text("".join(f"export {k}={v}\n" for k, v in kept.items()))
    second = prepare(tmp_path, NOW)
    assert {k: second.credentials[k] for k in kept} == kept
    assert second.credentials["MCP_SCHEDULER_RECOVERY_TOKEN"] not in kept.values()
    assert stat.S_IMODE((tmp_path / CREDENTIALS_FILE).stat().st_mode) == 0o600


def test_a_data_dir_of_the_minimal_quickstart_is_migrated(tmp_path: Path) -> None:
    """Its configs name QUICKSTART_* variables (sealed as remote.bearer_env) and have no
    management listener; its tokens lived in credentials.json."""
    first = prepare(tmp_path, NOW)
    runner = dict(first.runner)
    del runner["management"]
    names = {"admission": "QUICKSTART_ADMISSION_TOKEN", "cluster": "QUICKSTART_CLUSTER_TOKEN"}
    runner["admission_bearer_env"] = names["admission"]
    runner["cluster_bearer_env"] = names["cluster"]
    first.runner_path.write_text(json.dumps(runner))
    legacy = {names["admission"]: "a" * 43, names["cluster"]: "c" * 43}
    (tmp_path / LEGACY_CREDENTIALS_FILE).write_text(json.dumps(legacy))
    (tmp_path / CREDENTIALS_FILE).unlink()
    second = prepare(tmp_path, NOW)
    assert second.credentials[names["admission"]] == "a" * 43
    assert second.credentials[names["cluster"]] == "c" * 43
    assert "management" in second.runner
    assert not (tmp_path / LEGACY_CREDENTIALS_FILE).exists()
    cfg = load_runner_config(second.runner_path)
    assert resolve_runner_credentials(cfg, second.credentials).operator is not None


def test_a_voter_store_without_its_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "runner").mkdir()
    with pytest.raises(QuickstartError, match=r"no runner\.json"):
        prepare(tmp_path, NOW)


def test_an_incomplete_data_dir_is_refused(tmp_path: Path) -> None:
    prepare(tmp_path, NOW)
    (tmp_path / "worker.json").unlink()
    with pytest.raises(QuickstartError, match=r"worker\.json is missing"):
        prepare(tmp_path, NOW)


def test_a_malformed_credentials_line_is_named_without_its_value(tmp_path: Path) -> None:
    path = tmp_path / CREDENTIALS_FILE
    path.write_text("# comment\n\nexport GOOD=abc\nBAD secret-value\n")
    with pytest.raises(QuickstartError, match=r"credentials.env:4: expected") as info:
        read_credentials(path)
    assert "secret-value" not in str(info.value)


def test_port_is_free_sees_a_listener(held: list[socket.socket]) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    assert port_is_free(port)
    _take(held, port)
    assert not port_is_free(port)


def test_the_cli_default_data_dir_is_the_quickstart_default() -> None:
    from appliance.cli import role_quickstart
    from appliance.quickstart import run as quickstart

    assert role_quickstart.DEFAULT_DATA_DIR == quickstart.DEFAULT_DATA_DIR


def test_a_new_data_dir_is_private_and_an_existing_one_keeps_its_mode(tmp_path: Path) -> None:
    prepare(tmp_path / "new", NOW)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    existing = tmp_path / "mine"
    existing.mkdir(mode=0o755)
    existing.chmod(0o755)
    prepare(existing, NOW)
    assert stat.S_IMODE(existing.stat().st_mode) == 0o755


def test_the_default_data_dir_is_per_user_outside_the_checkout(tmp_path: Path) -> None:
    from appliance.quickstart.files import default_data_dir

    cwd = tmp_path / "checkout"
    cwd.mkdir()
    found, why = default_data_dir(cwd, {"XDG_DATA_HOME": str(tmp_path / "xdg"), "HOME": "/h"})
    assert found == tmp_path / "xdg" / "appliance" / "quickstart" and "XDG_DATA_HOME" in why
    found, why = default_data_dir(cwd, {"HOME": str(tmp_path / "home")})
    assert found == tmp_path / "home" / ".local" / "share" / "appliance" / "quickstart"
    # a relative XDG_DATA_HOME is ignored (XDG Base Directory spec)
    found, _ = default_data_dir(cwd, {"XDG_DATA_HOME": "rel", "HOME": str(tmp_path / "home")})
    assert found.parent.parent.parent == tmp_path / "home" / ".local"
    assert cwd not in found.parents


def test_an_existing_checkout_data_dir_is_still_found_and_used(tmp_path: Path) -> None:
    from appliance.quickstart.files import default_data_dir

    (tmp_path / "appliance-quickstart").mkdir()
    found, why = default_data_dir(tmp_path, {"XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert found == tmp_path / "appliance-quickstart" and "earlier run" in why
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "appliance-quickstart").write_text("not a directory")
    found, _ = default_data_dir(tmp_path / "elsewhere", {"XDG_DATA_HOME": str(tmp_path / "x")})
    assert found == tmp_path / "x" / "appliance" / "quickstart"


def test_git_ignores_a_checkout_data_dir() -> None:
    root = Path(__file__).resolve().parents[2]
    assert "appliance-quickstart/" in (root / ".gitignore").read_text().splitlines()


def test_without_data_dir_the_quickstart_writes_outside_the_working_directory(
    tmp_path: Path,
) -> None:
    """The README's command as is (no --data-dir): files go to ~/.local/share, path printed."""
    from tests.quickstart.session import Quickstart

    home, cwd = tmp_path / "home", tmp_path / "checkout"
    home.mkdir()
    cwd.mkdir()
    qs = Quickstart(tmp_path / "unused", "--time-scale", "60")
    qs.argv = [a for a in qs.argv if a not in ("--data-dir", str(tmp_path / "unused"))]
    qs.env = {**qs.env, "HOME": str(home)}
    qs.env.pop("XDG_DATA_HOME", None)
    expected = home / ".local" / "share" / "appliance" / "quickstart"
    original = os.getcwd()
    os.chdir(cwd)  # Popen inherits it
    try:
        qs.start()
    finally:
        os.chdir(original)
    try:
        qs.expect(lambda line: "Ctrl-C stops both" in line, "the banner")
        assert qs.stdout_lines[0].startswith(f"appliance quickstart: data in {expected} ")
        assert "per-user data directory (~/.local/share)" in qs.stdout_lines[1]
        assert (expected / "credentials.env").exists()
        assert list(cwd.iterdir()) == []  # nothing in the checkout
        assert qs.interrupt() == 0
    finally:
        qs.kill()


def test_an_egress_section_added_by_the_operator_is_kept_when_ports_move(
    tmp_path: Path, held: list[socket.socket]
) -> None:
    # docs/quickstart.md tells operators to add `egress` to worker.json; a repair that rewrites
    # the file must keep it.
    first = prepare(tmp_path, NOW)
    worker = json.loads(first.worker_path.read_text())
    worker["egress"] = {"policy_file": "egress.rego"}
    first.worker_path.write_text(json.dumps(worker))
    _take(held, _port(first.runner["admission_addr"]))
    second = prepare(tmp_path, NOW)
    assert second.notes  # the admission port moved: worker.json was rewritten
    rewritten = json.loads(second.worker_path.read_text())
    assert rewritten["egress"] == {"policy_file": "egress.rego"}
    loaded = load_worker_config({}, second.worker_path).egress
    assert loaded is not None and loaded.policy_file == str(tmp_path / "egress.rego")
