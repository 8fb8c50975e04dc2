"""The offline build mode copies exactly the installed distributions a requirement set needs."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from .conftest import ROOT, load_packaging_module

installed = load_packaging_module("installed_dists")
build = load_packaging_module("build_zipapp")


def names(dists: list[metadata.Distribution]) -> set[str]:
    return {dist.metadata["Name"].lower().replace("_", "-") for dist in dists}


def test_closure_follows_requires_dist_transitively() -> None:
    found = names(installed.closure(["cryptography"]))
    assert {"cryptography", "cffi", "pycparser"} <= found


def test_closure_of_the_project_dependencies_holds_every_native_part() -> None:
    found = names(installed.closure(build.project_dependencies(ROOT)))
    assert {"apsw", "cryptography", "mini-racer", "falcon", "waitress", "tzdata"} <= found
    assert "pytest" not in found  # a test extra, not a runtime dependency


def test_requirements_whose_marker_excludes_this_interpreter_are_skipped() -> None:
    assert installed.closure(['falcon; python_version < "3"']) == []


def test_a_missing_distribution_stops_the_build() -> None:
    with pytest.raises(installed.MissingDistributions, match="not installed"):
        installed.closure(["surely-not-an-installed-distribution-xyz"])


def test_an_installed_version_outside_the_specifier_stops_the_build() -> None:
    with pytest.raises(installed.MissingDistributions, match="is installed"):
        installed.closure(["falcon<1"])


def test_copy_takes_the_recorded_files_and_metadata_but_no_caches(tmp_path: Path) -> None:
    dist = metadata.distribution("waitress")
    count = installed.copy_distribution(dist, tmp_path)
    assert count > 0
    assert (tmp_path / "waitress" / "__init__.py").is_file()
    assert any(p.name == "RECORD" for p in tmp_path.glob("waitress-*.dist-info/*"))
    assert not list(tmp_path.rglob("__pycache__"))
    assert not (tmp_path / "bin").exists()


class _WithoutRecord:
    files = None
    metadata = {"Name": "recordless"}  # stands in for Distribution.metadata


def test_a_distribution_without_record_stops_the_build(tmp_path: Path) -> None:
    with pytest.raises(installed.MissingDistributions, match="recordless has no RECORD"):
        installed.copy_distribution(_WithoutRecord(), tmp_path)
