"""The build script's own rules: what it copies, what it writes as __main__, what it refuses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import ROOT, load_packaging_module

build = load_packaging_module("build_zipapp")

TARGET = {
    "implementation": "cpython",
    "python": "3.11",
    "platform": "linux-x86_64",
    "executable": "/usr/bin/python3.11",
}


def test_there_is_no_init_file_that_would_shadow_the_packaging_library() -> None:
    assert not (ROOT / "packaging" / "__init__.py").exists()
    import packaging.version  # the library pip and setuptools import, not our directory

    assert "site-packages" in str(packaging.version.__file__)


def test_the_project_copy_holds_sources_and_metadata_but_no_caches(tmp_path: Path) -> None:
    project = build.copy_project(ROOT, tmp_path)
    assert project.name == "appliance-project"  # setuptools misreads a directory named "src"
    assert (project / "pyproject.toml").is_file()
    assert (project / "appliance" / "__init__.py").is_file()
    assert (project / "migrations_guard").is_dir()
    assert not list(project.rglob("__pycache__"))
    assert not list(project.rglob("*.egg-info"))
    assert not (project / ".venv").exists()


def test_the_entry_records_the_target_interpreter_and_nothing_else(tmp_path: Path) -> None:
    source = build.entry_source(TARGET)
    expected = {key: TARGET[key] for key in ("implementation", "python", "platform")}
    assert f"BUILT_FOR: dict[str, str] = {expected!r}" in source
    assert "/usr/bin/python3.11" not in source  # the build machine's paths stay out
    compile(source, "__main__.py", "exec")


def test_an_entry_without_its_placeholder_line_stops_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "packaging"
    fake.mkdir()
    (fake / "zipapp_entry.py").write_text("print('no placeholder')\n")
    monkeypatch.setattr(build, "HERE", fake)
    with pytest.raises(build.BuildError, match="exactly one line"):
        build.entry_source(TARGET)


def test_shivs_main_template_is_restored_after_writing(tmp_path: Path) -> None:
    from shiv import builder

    original = builder.MAIN_TEMPLATE
    with build._main_template("x = {'a': 1}\n"):
        assert builder.MAIN_TEMPLATE.format(module="m", fn="f") == "x = {'a': 1}\n"
    assert builder.MAIN_TEMPLATE is original


def test_the_running_interpreter_is_described_in_the_recorded_shape() -> None:
    described = build.describe_python(sys.executable)
    assert described["python"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert described["implementation"] == sys.implementation.name


def test_a_missing_target_interpreter_stops_the_build(tmp_path: Path) -> None:
    with pytest.raises(build.BuildError):
        build.describe_python(str(tmp_path / "no-such-python"))


def test_the_runtime_dependencies_are_read_from_pyproject() -> None:
    dependencies = build.project_dependencies(ROOT)
    assert any(dep.startswith("mini-racer") for dep in dependencies)
    assert not any(dep.startswith("pytest") for dep in dependencies)
