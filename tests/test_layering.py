"""Import layering that keeps cycles out: ``Secret`` lives in a leaf module, so the HTTP layer
never imports the config package (which itself uses the HTTP layer's URL parser)."""

from __future__ import annotations

import ast
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
