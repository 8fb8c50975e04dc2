"""The archive's __main__: where the cache lives, and which interpreters it refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import load_packaging_module

entry = load_packaging_module("zipapp_entry")

HOME = "/home/op"
BUILT = {"implementation": "cpython", "python": "3.11", "platform": "linux-x86_64"}


def test_appliance_cache_dir_wins_over_shiv_root_and_xdg() -> None:
    environ = {"APPLIANCE_CACHE_DIR": "/a", "SHIV_ROOT": "/b", "XDG_CACHE_HOME": "/c"}
    assert entry.cache_root(environ, HOME) == "/a"


def test_shiv_root_is_honoured_when_appliance_cache_dir_is_unset_or_empty() -> None:
    assert entry.cache_root({"APPLIANCE_CACHE_DIR": "", "SHIV_ROOT": "/b"}, HOME) == "/b"


def test_default_cache_is_under_xdg_cache_home() -> None:
    assert entry.cache_root({"XDG_CACHE_HOME": "/c"}, HOME) == "/c/appliance"


def test_default_cache_is_under_home_dot_cache_without_xdg() -> None:
    assert entry.cache_root({}, HOME) == "/home/op/.cache/appliance"


def test_a_relative_xdg_cache_home_is_ignored_as_the_spec_says() -> None:
    assert entry.cache_root({"XDG_CACHE_HOME": "rel"}, HOME) == "/home/op/.cache/appliance"


def test_a_relative_or_tilde_cache_dir_becomes_absolute() -> None:
    assert entry.cache_root({"APPLIANCE_CACHE_DIR": "~"}, HOME).startswith("/")
    assert entry.cache_root({"APPLIANCE_CACHE_DIR": "cache"}, HOME).startswith("/")


def test_the_interpreter_it_was_built_for_is_accepted() -> None:
    assert entry.incompatibility(BUILT, dict(BUILT)) is None


@pytest.mark.parametrize(
    ("key", "other"),
    [("python", "3.12"), ("platform", "linux-aarch64"), ("implementation", "pypy")],
)
def test_another_minor_version_platform_or_implementation_is_refused(key: str, other: str) -> None:
    message = entry.incompatibility(BUILT, {**BUILT, key: other})
    assert message is not None
    assert f"{key} {other!r} (built for {BUILT[key]!r})" in message
    assert "build_zipapp.py --python" in message


def test_the_running_interpreter_describes_itself_in_the_recorded_shape() -> None:
    assert set(entry.running_python()) == set(BUILT)


def test_an_unfilled_description_accepts_any_interpreter() -> None:
    """The source file itself (BUILT_FOR = {}) is runnable in development."""
    assert entry.BUILT_FOR == {}
    assert entry.incompatibility(entry.BUILT_FOR, entry.running_python()) is None


def test_a_missing_cache_directory_is_created_private(tmp_path: Path) -> None:
    root = tmp_path / "a" / "cache"
    assert entry.cache_problem(str(root)) is None
    assert root.is_dir()
    assert root.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_cache_directory_others_can_write_to_is_refused(tmp_path: Path, mode: int) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, mode)
    problem = entry.cache_problem(str(root))
    assert problem is not None
    assert "writable by other users" in problem


def test_a_cache_directory_others_can_only_read_is_accepted(tmp_path: Path) -> None:
    root = tmp_path / "readable"
    root.mkdir()
    os.chmod(root, 0o755)
    assert entry.cache_problem(str(root)) is None


def test_a_cache_path_below_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    problem = entry.cache_problem(str(tmp_path / "file" / "cache"))
    assert problem is not None
    assert "cannot create the cache directory" in problem
