"""The folders show the architecture, and these import rules keep it that way."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "reviewbot"

# layer -> reviewbot layers it must never import
FORBIDDEN: dict[str, set[str]] = {
    "core": {"app", "cli", "config", "forges", "ingress", "runtime", "sim", "store", "workflowdb"},
    "ingress": {"app", "cli", "forges", "runtime", "sim", "store"},
    "forges": {"app", "cli", "ingress", "runtime", "sim", "store"},
    "store": {"app", "cli", "forges", "ingress", "runtime", "sim"},
    "workflowdb": {"app", "cli", "forges", "ingress", "runtime", "sim"},
    # Nothing on the serving path imports the simulator.
    "runtime": {"cli", "sim"},
    "api": {"cli", "sim"},
    "app": {"cli", "sim"},
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if _layer(p) in FORBIDDEN)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_layer_imports_only_what_it_may(path: Path) -> None:
    layer = _layer(path)
    ours = {m.split(".")[1] for m in _imports(path) if m.startswith("reviewbot.")}
    assert not ours & FORBIDDEN[layer], f"{layer} imports {sorted(ours & FORBIDDEN[layer])}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "core").glob("*.py")), ids=lambda p: p.name)
def test_core_uses_only_the_standard_library(path: Path) -> None:
    outside = {
        m.split(".")[0]
        for m in _imports(path)
        if not m.startswith("reviewbot") and m.split(".")[0] not in sys.stdlib_module_names
    }
    assert not outside, f"core/{path.name} imports {sorted(outside)}"
