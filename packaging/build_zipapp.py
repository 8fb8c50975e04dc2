"""Build dist/appliance.pyz: the appliance and its dependencies in one file (docs/packaging.md).

Usage:
    python packaging/build_zipapp.py [--out dist/appliance.pyz] [--python /path/to/python]
                                     [--deps registry|installed]

Theory of operation: a staging site-packages is filled, then shiv turns it into a zipapp.

1. The project is copied (sources only) to a scratch directory and installed from there with
   ``pip install --target``, so the build never writes into the checkout. pip builds its wheel in
   an isolated environment, fetching the build backend from the registry like any pip install.
2. The dependencies come either from the registry (``--deps registry``, the default: pip
   resolves ``[project].dependencies`` for the *target* interpreter, so native wheels match it)
   or from the target interpreter's own environment (``--deps installed``: the distributions
   already installed there are copied file by file from their RECORD; no download, exactly the
   versions that environment was tested with).
3. shiv writes the archive with the entry point ``appliance.cli.main:main``; its ``__main__`` is
   ``packaging/zipapp_entry.py`` with the target interpreter's description written in, so the
   archive refuses an interpreter whose native ABI differs and honours ``APPLIANCE_CACHE_DIR``.

The result runs on the target's CPython minor version and platform only (native wheels).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# shiv imports "a.b:c" as module a.b.c first: name the module that defines main, not the
# package that re-exports it (appliance.cli.main is itself a module).
ENTRY_POINT = "appliance.cli.main:main"
DEFAULT_OUT = ROOT / "dist" / "appliance.pyz"
# What the project's wheel is built from: everything setuptools reads, nothing else.
PROJECT_FILES = ("pyproject.toml", "README.md")
PROJECT_PACKAGES = ("appliance", "migrations_guard")
BUILT_FOR_LINE = "BUILT_FOR: dict[str, str] = {}"
DESCRIBE_PYTHON = (
    "import json, sys, sysconfig; print(json.dumps({"
    "'implementation': sys.implementation.name, "
    "'python': '%d.%d' % sys.version_info[:2], "
    "'platform': sysconfig.get_platform(), "
    "'executable': sys.executable}))"
)
SUBPROCESS_TIMEOUT_SECONDS = 900


class BuildError(Exception):
    """The zipapp could not be built; the message says why."""


def describe_python(python: str) -> dict[str, str]:
    """Implementation, minor version and platform of the interpreter the archive is built for."""
    completed = _run([python, "-c", DESCRIBE_PYTHON], capture=True)
    return json.loads(completed.stdout)


def project_dependencies(root: Path = ROOT) -> list[str]:
    with open(root / "pyproject.toml", "rb") as handle:
        return list(tomllib.load(handle)["project"]["dependencies"])


def _run(argv: list[str], capture: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PIP_REQUIRE_VIRTUALENV"}
    try:
        completed = subprocess.run(
            argv,
            env=env,
            text=True,
            capture_output=capture,
            timeout=SUBPROCESS_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BuildError(f"{argv[0]}: {err}") from None
    if completed.returncode != 0:
        detail = (completed.stderr or "").strip()[-2000:] if capture else ""
        raise BuildError(f"{' '.join(argv[:4])} … exited with {completed.returncode}\n{detail}")
    return completed


def copy_project(root: Path, scratch: Path) -> Path:
    """A copy of the project's sources (no caches, no venv, no build output) to build from."""
    # Named after the project: setuptools misreads a build directory that is called "src".
    project = scratch / "appliance-project"
    project.mkdir()
    for name in PROJECT_FILES:
        shutil.copy2(root / name, project / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in PROJECT_PACKAGES:
        shutil.copytree(root / name, project / name, ignore=ignore)
    return project


def _pip_install(python: str, target: Path, *args: str) -> None:
    _run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-compile",
            "--no-warn-script-location",
            "--quiet",
            "--target",
            str(target),
            *args,
        ]
    )


def stage(python: str, deps: str, scratch: Path) -> Path:
    """Fill a staging site-packages with the project and its dependencies."""
    project = copy_project(ROOT, scratch)
    site_packages = scratch / "site-packages"
    if deps == "registry":
        _pip_install(python, site_packages, str(project))
    else:
        _pip_install(python, site_packages, "--no-deps", str(project))
        _run(
            [
                python,
                str(HERE / "installed_dists.py"),
                str(site_packages),
                *project_dependencies(),
            ],
            capture=True,
        )
    # pip --target drops console scripts into bin/; the zipapp has its own entry point.
    shutil.rmtree(site_packages / "bin", ignore_errors=True)
    if not (site_packages / "appliance" / "__init__.py").is_file():
        raise BuildError(f"staging {site_packages} holds no appliance package")
    return site_packages


def entry_source(built_for: dict[str, str]) -> str:
    """packaging/zipapp_entry.py with the target interpreter's description written in."""
    source = (HERE / "zipapp_entry.py").read_text(encoding="utf-8")
    described = {key: built_for[key] for key in ("implementation", "python", "platform")}
    if source.count(BUILT_FOR_LINE) != 1:
        raise BuildError(f"zipapp_entry.py must contain exactly one line {BUILT_FOR_LINE!r}")
    return source.replace(BUILT_FOR_LINE, f"BUILT_FOR: dict[str, str] = {described!r}")


@contextlib.contextmanager
def _main_template(source: str) -> Iterator[None]:
    """Make shiv write our entry as the archive's __main__.py (it has no option for that)."""
    from shiv import builder

    original = builder.MAIN_TEMPLATE
    # create_archive formats the template with {module}/{fn}; ours has no placeholders.
    builder.MAIN_TEMPLATE = source.replace("{", "{{").replace("}", "}}")
    try:
        yield
    finally:
        builder.MAIN_TEMPLATE = original


def write_archive(site_packages: Path, out: Path, built_for: dict[str, str]) -> str:
    """Write the zipapp; return its build id (the cache subdirectory it extracts into)."""
    import zipfile

    from shiv import __version__ as shiv_version
    from shiv import builder
    from shiv.bootstrap.environment import Environment
    from shiv.constants import BUILD_AT_TIMESTAMP_FORMAT

    env = Environment(
        built_at=datetime.now(UTC).strftime(BUILD_AT_TIMESTAMP_FORMAT),
        shiv_version=shiv_version,
        entry_point=ENTRY_POINT,
        compile_pyc=False,  # Python writes caches lazily into the (writable) extraction dir
        extend_pythonpath=True,  # children started as `python -m appliance…` find the package
    )
    source = entry_source(built_for)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with _main_template(source):
        builder.create_archive(
            [site_packages],
            target=partial,
            interpreter=f"/usr/bin/env python{built_for['python']}",
            main="_bootstrap:bootstrap",
            env=env,
            compressed=True,
        )
    with zipfile.ZipFile(partial) as archive:
        if archive.read("__main__.py").decode("utf-8") != source:
            raise BuildError("shiv did not write our __main__.py; check the shiv version")
    os.replace(partial, out)  # never leave a half-written archive under the final name
    return str(env.build_id)


def require_shiv() -> None:
    """Fail before the slow part when the build dependency is missing."""
    try:
        import shiv.builder  # noqa: F401
    except ImportError:
        raise BuildError(
            f"shiv is not installed for {sys.executable}: `{sys.executable} -m pip install shiv`"
        ) from None


def build(out: Path, python: str, deps: str) -> dict[str, str]:
    started = time.monotonic()
    require_shiv()
    built_for = describe_python(python)
    with tempfile.TemporaryDirectory(prefix="appliance-zipapp-") as scratch:
        site_packages = stage(python, deps, Path(scratch))
        build_id = write_archive(site_packages, out, built_for)
    return {
        **built_for,
        "out": str(out),
        "bytes": str(out.stat().st_size),
        "build_id": build_id,
        "seconds": f"{time.monotonic() - started:.1f}",
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="build_zipapp.py", description="Build the appliance zipapp (docs/packaging.md)."
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="archive to write")
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter the archive is for (its pip installs the dependencies); "
        "default: this one",
    )
    parser.add_argument(
        "--deps",
        choices=("registry", "installed"),
        default="registry",
        help="registry: pip resolves and downloads the dependencies; installed: copy them from "
        "the --python interpreter's environment (offline, same versions)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        summary = build(args.out.resolve(), args.python, args.deps)
    except BuildError as err:
        print(f"build_zipapp: {err}", file=sys.stderr)
        return 1
    print(
        f"built {summary['out']} ({int(summary['bytes']) // (1024 * 1024)} MiB) for "
        f"{summary['implementation']} {summary['python']} on {summary['platform']} "
        f"in {summary['seconds']} s; build id {summary['build_id'][:12]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
