"""The one rule for the database in async code: the event loop never calls the store itself.

A blocking store call (a ``reviewbot.store`` function, a method of a store object, a
transaction) made in the body of an ``async def`` would stop every other task while SQLite
works or waits for its lock. Async code awaits ``db.run(fn, *args)`` instead, which runs the
call on the database's bounded executor. This test reads every ``async def`` under
``src/reviewbot`` (the simulator and the demo's own checks aside) and fails on a direct call,
and on ``asyncio.to_thread`` used for a store call (there is one door, not two).

What it can see: calls written in the async body itself (a lambda or a nested ``def`` in it
is what ``run`` gets, so it is not looked into), on a module imported from
``reviewbot.store``, on a function imported from it, or on a receiver named like a store
object (``db``, ``store``, ``leases``...) with a method the store classes have.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from reviewbot.runtime.review.outbox import StoreReviewerLeases
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.epochs import EpochStore
from reviewbot.store.leases import LeaseStore
from reviewbot.store.merges import MergeStore
from reviewbot.store.review_outbox import OutboxStore
from reviewbot.store.reviews import ReviewStore
from reviewbot.store.state_comments import StateCommentStore
from reviewbot.store.workers import WorkerStore

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "reviewbot"
EXEMPT = ("sim", "demo")  # the simulator has no store; the demo reads it to report

STORE_CLASSES = (
    SQLiteDatabase,
    LeaseStore,
    WorkerStore,
    EpochStore,
    MergeStore,
    ReviewStore,
    OutboxStore,
    StateCommentStore,
    StoreReviewerLeases,
)
# Receivers that hold a store object in this code base.
STORE_RECEIVERS = frozenset(
    {"db", "store", "leases", "workers", "epochs", "merges", "lease_store", "reviews", "outbox"}
    | {"rows"}
)
# Not store calls: the door itself, the injected clock, values without I/O, and closing;
# ``bell`` binds a socket of the lease line (no database).
NOT_IO = frozenset({"run", "clock", "fence", "worker", "timing", "path", "close", "bell"})
# Functions of store modules that are pure (shapes and hashes, no database; ``fence`` only
# builds the check a write transaction runs later).
PURE = frozenset(
    {"delivery_json", "body_sha256", "describe", "is_transient", "is_row_fault", "fence"}
)
# Opening the store runs its migrations before there is a database to run them on.
OPENING = frozenset({"open_store"})

STORE_METHODS = frozenset(
    name
    for cls in STORE_CLASSES
    for name, member in inspect.getmembers(cls)
    if not name.startswith("_") and callable(member) and name not in NOT_IO
)


def _store_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names bound to store modules, and to functions imported from store modules."""
    modules: set[str] = set()
    functions: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "reviewbot.store":
                modules |= {a.asname or a.name for a in node.names}
            elif node.module.startswith("reviewbot.store."):
                functions |= {
                    a.asname or a.name
                    for a in node.names
                    if a.name[0].islower() and a.name not in PURE | OPENING
                }
    return modules, functions


def _receiver(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _own_body(fn: ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of an async function, not of the functions and lambdas defined in it."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                stack.append(child)


def _is_store_call(call: ast.Call, modules: set[str], functions: set[str]) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in functions
    if isinstance(func, ast.Attribute):
        owner = _receiver(func.value)
        if owner in modules:
            return func.attr not in PURE
        return owner in STORE_RECEIVERS and func.attr in STORE_METHODS
    return False


def _refers_to_store(node: ast.expr, modules: set[str], functions: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in functions
    if isinstance(node, ast.Attribute):
        owner = _receiver(node.value)
        return owner in modules or (owner in STORE_RECEIVERS and node.attr in STORE_METHODS)
    if isinstance(node, ast.Lambda):
        return any(
            isinstance(n, ast.Call) and _is_store_call(n, modules, functions)
            for n in ast.walk(node.body)
        )
    return False


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    modules, functions = _store_names(tree)
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.AsyncFunctionDef):
            continue
        for node in _own_body(fn):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            is_to_thread = isinstance(func, ast.Attribute) and func.attr == "to_thread"
            if is_to_thread and node.args and _refers_to_store(node.args[0], modules, functions):
                found.append(f"{fn.name}:{node.lineno} asyncio.to_thread of a store call")
            elif _is_store_call(node, modules, functions):
                found.append(f"{fn.name}:{node.lineno} {ast.unparse(func)}(...) on the loop")
    return found


SOURCES = sorted(
    p
    for p in PACKAGE.rglob("*.py")
    if p.relative_to(PACKAGE).parts[0] not in EXEMPT and "async def" in p.read_text()
)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_async_code_reaches_the_store_only_through_its_executor(path: Path) -> None:
    assert violations(path) == []


def test_the_rule_sees_a_direct_call(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from reviewbot.store import journal\n"
        "from reviewbot.store.tokens import lookup_token\n"
        "async def handler(db, store):\n"
        "    journal.get_delivery(db, 'x')\n"
        "    lookup_token(db, 't')\n"
        "    store.latest_verdict('github', 'a/b', 1)\n"
        "    await asyncio.to_thread(store.record_decision, None)\n"
        "    await db.run(journal.get_delivery, db, 'x')\n"
        "    await db.run(lambda: store.latest_verdict('github', 'a/b', 1))\n"
    )
    assert sorted(v.split(" ")[0] for v in violations(sample)) == [
        "handler:4",
        "handler:5",
        "handler:6",
        "handler:7",
    ]
