"""The zipapp, built once per test session, and how to run it like an operator would.

The archive is built in the offline mode (``--deps installed``: the dependencies are copied from
this test environment, only the project's own wheel is built) and run by the *base* interpreter
of this virtual environment, which does not have the appliance installed, from a directory that
is not the checkout, with a scrubbed environment and a private cache directory.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "packaging" / "build_zipapp.py"
BUILD_TIMEOUT_S = 150.0
RUN_TIMEOUT_S = 60.0
# Variables that would let the archive find code outside itself, or another cache.
SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "APPLIANCE_CACHE_DIR", "XDG_CACHE_HOME")


def load_packaging_module(name: str) -> ModuleType:
    """Import packaging/NAME.py by path: packaging/ is deliberately not a Python package."""
    spec = importlib.util.spec_from_file_location(
        f"_packaging_{name}", ROOT / "packaging" / f"{name}.py"
    )
    if spec is None or spec.loader is None:
        raise ImportError(name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing resolve names through sys.modules
    spec.loader.exec_module(module)
    return module


def base_python() -> str:
    """The interpreter this venv was made from: same ABI, but without the appliance installed."""
    return str(getattr(sys, "_base_executable", None) or sys.executable)


class Zipapp:
    def __init__(self, path: Path, cache_dir: Path, elsewhere: Path) -> None:
        self.path = path
        self.cache_dir = cache_dir
        self.elsewhere = elsewhere

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith("SHIV_")
        }
        env["APPLIANCE_CACHE_DIR"] = str(self.cache_dir)
        env.update(extra)
        return env

    def argv(self, *args: str) -> list[str]:
        return [base_python(), str(self.path), *args]

    def run(self, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            cwd=self.elsewhere,
            env=self.env(**extra_env),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )


@pytest.fixture(scope="session")
def zipapp(tmp_path_factory: pytest.TempPathFactory) -> Zipapp:
    build_dir = tmp_path_factory.mktemp("zipapp-build")
    out = build_dir / "appliance.pyz"
    completed = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), "--out", str(out), "--deps", "installed"],
        cwd=build_dir,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return Zipapp(
        out, tmp_path_factory.mktemp("zipapp-cache"), tmp_path_factory.mktemp("elsewhere")
    )
