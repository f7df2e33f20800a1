"""The folders show the architecture, and these import rules keep it that way.

    cli/ ──► service.py ◄── server/        (the composition root; the HTTP face over it)
                 │
                 ▼
             runtime/  ingestion · review · merge · reviewers
                 │
       ┌─────────┼──────────┬───────────┐
       ▼         ▼          ▼           ▼
    ingress/   forges/    store/ ◄── workflowdb/ (bootstrap, migrations, query, mutate)
       └─────────┴──────────┴───────────┘
                       ▼
                     core/     (pure; the standard library only)

``sim/`` and ``demo/`` sit beside it: the tests, ``reviewbot sim`` and ``reviewbot demo`` use
them, nothing on the serving path does.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "reviewbot"

SERVING = {"sim", "demo"}  # never imported on the serving path
ABOVE_RUNTIME = {"cli", "server", "service"}

# layer -> reviewbot layers it must never import
FORBIDDEN: dict[str, set[str]] = {
    "core": {
        *SERVING,
        *ABOVE_RUNTIME,
        "config",
        "forges",
        "ingress",
        "progress",
        "runtime",
        "store",
        "workflowdb",
    },
    "config": {*SERVING, *ABOVE_RUNTIME, "forges", "ingress", "runtime", "store", "workflowdb"},
    "ingress": {*SERVING, *ABOVE_RUNTIME, "forges", "runtime", "store", "workflowdb"},
    "forges": {*SERVING, *ABOVE_RUNTIME, "ingress", "runtime", "store", "workflowdb"},
    # The store knows neither the settings model nor the managed route built over it.
    "store": {*SERVING, *ABOVE_RUNTIME, "config", "forges", "ingress", "runtime", "workflowdb"},
    "workflowdb": {*SERVING, *ABOVE_RUNTIME, "forges", "ingress", "runtime"},
    "progress": {*SERVING, *ABOVE_RUNTIME, "runtime"},
    "runtime": {*SERVING, *ABOVE_RUNTIME},
    "service": {*SERVING, "cli", "server"},
    "server": {*SERVING, "cli"},
}

# Packages whose modules may carry an HTTP status; nothing below the server may.
HTTP_STATUS_WORDS = ("HTTPStatus", "status=4", "status=5", "web.Response", "json_response")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


ALL = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports at module level (not in functions), including those for the type checker: a
    cycle that only ``if TYPE_CHECKING:`` hides is still a cycle a reader must untangle."""
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            stack += node.body + node.orelse
        elif isinstance(node, ast.Try):
            stack += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                stack += handler.body


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The reviewbot modules an import loads (``from pkg import mod`` names ``pkg.mod``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            here = here[: len(here) - (node.level - 1)]
            base = ".".join([*here, *([node.module] if node.module else [])])
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in ALL else base for a in node.names]
    found = set()
    for name in names:
        while name and name not in ALL:
            name = name.rpartition(".")[0]
        if name.startswith("reviewbot") and name != module:
            found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in ALL.items():
        tree = ast.parse(path.read_text())
        graph[module] = set()
        for node in _module_level(tree):
            graph[module] |= _targets(module, path, node)
    return graph


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


def test_the_app_factory_and_the_lease_api_live_in_the_server_package() -> None:
    assert not (PACKAGE / "app.py").exists() and not (PACKAGE / "api").exists()


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "server").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_file_of_the_http_face_is_over_300_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 300


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "runtime").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_runtime_knows_no_http(path: Path) -> None:
    text = path.read_text()
    assert "aiohttp" not in _imports(path) and not any(w in text for w in HTTP_STATUS_WORDS)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``a -> b -> ... -> a``, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_no_import_cycle_between_modules() -> None:
    cycle = find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_cycle_between_packages() -> None:
    def layer(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else ""  # "": the package root (its version)

    packages: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        packages.setdefault(layer(module), set()).update(
            layer(t) for t in targets if layer(t) not in ("", layer(module))
        )
    cycle = find_cycle(packages)
    assert cycle is None, "package cycle: " + " -> ".join(cycle or [])


def test_imports_for_the_type_checker_count_as_edges() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from reviewbot.sim.simulator import Simulator\n"
        "if typing.TYPE_CHECKING:\n"
        "    import reviewbot.core.models\n"
    )
    found = [n for n in _module_level(tree) if isinstance(n, ast.ImportFrom | ast.Import)]
    names = {n.module if isinstance(n, ast.ImportFrom) else n.names[0].name for n in found}
    assert {"reviewbot.sim.simulator", "reviewbot.core.models"} <= names
    assert all(_is_type_checking(n) for n in tree.body if isinstance(n, ast.If))


def test_the_cycle_finder_names_the_path() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def _commented(lines: list[str], lineno: int) -> bool:
    """The import's line, the line above it, or the line above its run of imports says why."""
    i = lineno - 1
    if "#" in lines[i]:
        return True
    while i > 0 and lines[i - 1].strip().startswith(("from ", "import ")):
        i -= 1
        if "#" in lines[i]:
            return True
    return i > 0 and lines[i - 1].strip().startswith("#")


def imports_in_functions_without_a_reason(path: Path) -> list[int]:
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for fn in ast.walk(ast.parse(text)):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom) and not _commented(
                    lines, node.lineno
                ):
                    found.append(node.lineno)
    return sorted(set(found))


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_an_import_inside_a_function_says_why(path: Path) -> None:
    assert imports_in_functions_without_a_reason(path) == []


# Collaborators a part gets at construction; assigning one from outside is patching.
HOOKS = frozenset(
    {"on_finished", "after_drain", "state_comment", "re_review", "on_commit", "on_eligible"}
)


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_collaborator_is_patched_in_after_construction(path: Path) -> None:
    patched = [
        f"{node.lineno}: {ast.unparse(target)}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Attribute)
        and target.attr in HOOKS
        # ``self`` sets its own; an ``outcome`` is a result value (its state_comment is text)
        and not (isinstance(target.value, ast.Name) and target.value.id in ("self", "outcome"))
    ]
    assert patched == []
