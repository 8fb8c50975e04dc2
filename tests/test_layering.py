"""Import layering that keeps cycles out: ``Secret`` lives in a leaf module, so the HTTP layer
never imports the config package (which itself uses the HTTP layer's URL parser)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "appliance"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "http").glob("*.py")), ids=lambda p: p.name)
def test_the_http_layer_does_not_import_the_config_package(path: Path) -> None:
    assert not any(m.startswith("appliance.config") for m in _imports(path))


def test_the_secret_module_is_a_leaf() -> None:
    assert not any(m.startswith("appliance") for m in _imports(ROOT / "secret.py"))


def _package_of(path: Path) -> str:
    parts = path.relative_to(ROOT).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


@functools.cache
def package_imports() -> dict[str, set[str]]:
    """Package → the project packages its modules import (``appliance.X`` → X)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        me = _package_of(path)
        targets = graph.setdefault(me, set())
        for module in _imports(path):
            parts = module.split(".")
            if parts[0] == "appliance" and len(parts) > 1 and parts[1] != me:
                targets.add(parts[1])
    return graph


def test_imports_point_down_no_package_reaches_back_into_one_that_imports_it() -> None:
    """docs/architecture.md's package map is a hierarchy: a cycle between packages (metrics
    importing the runner that imports metrics, say) would make it a tangle."""
    graph = package_imports()
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for target in sorted(graph.get(node, ())):
                assert target != start, "import cycle: " + " -> ".join([*path, target])
                if target not in seen:
                    seen.add(target)
                    stack.append((target, [*path, target]))


@pytest.mark.parametrize("package", ["owner", "commands", "core", "protocol"])
def test_the_sans_io_packages_import_nothing_that_does_io(package: str) -> None:
    graph = package_imports()
    allowed = {"owner", "commands", "core", "protocol", "config", "capabilities", "secret"}
    assert graph[package] <= allowed, sorted(graph[package] - allowed)


def test_the_runner_never_imports_the_raft_package_the_replication_interface_hides_it() -> None:
    assert "raft" not in package_imports()["runner"]
