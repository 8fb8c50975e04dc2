"""The policy core, the wire protocol, the owner core, the command table and the Raft core are
sans-I/O (SPEC §2, STYLE; issue 31: the owner and command packages are globbed, not listed).

They take time and randomness as arguments and return decisions; they never import a clock,
threads, sockets, the SQLite driver or the HTTP stack, and never read the wall clock. Only the Raft
package's driver and transport modules (with the per-peer parts and the reply slot they use),
which exist to do I/O, are exempt.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "appliance"
FORBIDDEN_MODULES = {
    "time",
    "threading",
    "socket",
    "random",
    "falcon",
    "apsw",
    "waitress",
    "subprocess",
    "asyncio",
    "os",
    "selectors",
    "multiprocessing",
    "urllib",
    "http",
    "queue",
    "concurrent",
}
# Nor does any of them reach the project's own I/O layers.
FORBIDDEN_PROJECT_MODULES = ("appliance.http", "appliance.store", "appliance.runner")
# The Raft package's I/O side: the driver thread and the transport with its per-peer parts.
IO_MODULE_NAMES = {
    "driver.py",
    "inbox.py",
    "transport.py",
    "reply_slot.py",
    "peer_pipeline.py",
    "peer_probe.py",
    "reclaimer.py",
}


def core_files() -> list[Path]:
    files = []
    for package in ("core", "protocol", "owner", "commands"):
        files += sorted((ROOT / package).rglob("*.py"))
    raft = ROOT / "raft"
    if raft.is_dir():
        files += [p for p in sorted(raft.rglob("*.py")) if p.name not in IO_MODULE_NAMES]
    return files


def imported_modules(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def imported_roots(tree: ast.AST) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def clock_reads(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        is_method_call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if is_method_call and node.func.attr in {"now", "utcnow", "today"}:
            found.append(f"line {node.lineno}: .{node.func.attr}()")
    return found


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_module_does_no_io(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    leaked = imported_roots(tree) & FORBIDDEN_MODULES
    assert not leaked, f"{path.name} imports I/O modules {sorted(leaked)}"
    layers = sorted(m for m in imported_modules(tree) if m.startswith(FORBIDDEN_PROJECT_MODULES))
    assert not layers, f"{path.name} imports the project's I/O layers {layers}"
    assert not clock_reads(tree), f"{path.name} reads the clock: {clock_reads(tree)}"
