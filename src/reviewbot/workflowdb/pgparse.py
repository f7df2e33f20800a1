"""PostgreSQL's own parser (``pglast``, libpg_query) reading one tool statement into the
plain facts :mod:`reviewbot.core.pgstatement` decides on: kinds, relations, CTE names,
function calls, locking, hidden writes. Nothing here decides; nothing here runs SQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from pglast import ast, parse_sql
from pglast.parser import ParseError

from reviewbot.core.errors import ReviewbotError
from reviewbot.core.pgstatement import ParsedStatement, RelationName

_LABELS = {
    "CopyStmt": "COPY",
    "IndexStmt": "CREATE INDEX",
    "ViewStmt": "CREATE VIEW",
    "DoStmt": "DO",
    "VariableSetStmt": "SET",
    "VariableShowStmt": "SHOW",
    "TransactionStmt": "transaction control",
    "CallStmt": "CALL",
    "MergeStmt": "MERGE",
    "ExplainStmt": "EXPLAIN",
    "SelectStmt": "SELECT",
    "InsertStmt": "INSERT",
    "UpdateStmt": "UPDATE",
    "DeleteStmt": "DELETE",
}
_KINDS = {
    "SelectStmt": "select",
    "ExplainStmt": "explain",
    "InsertStmt": "insert",
    "UpdateStmt": "update",
    "DeleteStmt": "delete",
}
_WRITES = (ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt, ast.MergeStmt)


class PgParseError(ReviewbotError, ValueError):
    """The text is not PostgreSQL that its parser accepts."""


def parse(sql: str) -> list[ParsedStatement]:
    """Every statement in ``sql``, as PostgreSQL's parser sees them."""
    try:
        raw = parse_sql(sql)
    except ParseError as exc:
        raise PgParseError(str(exc)) from None
    return [_read(r.stmt) for r in raw if r.stmt is not None]


def label(stmt: ast.Node) -> str:
    """The statement's kind as PostgreSQL spells it (``ALTER TABLE``, ``SET ROLE``)."""
    name = type(stmt).__name__
    if isinstance(stmt, ast.VariableSetStmt) and str(stmt.name or "").lower() == "role":
        return "SET ROLE"
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name.removesuffix("Stmt"))
    return _LABELS.get(name, words.upper() or name)


def _read(stmt: ast.Node) -> ParsedStatement:
    name = type(stmt).__name__
    explained = None
    if isinstance(stmt, ast.ExplainStmt) and stmt.query is not None:
        explained = _KINDS.get(type(stmt.query).__name__, label(stmt.query))
    target = None
    if isinstance(stmt, ast.InsertStmt | ast.UpdateStmt | ast.DeleteStmt):
        target = _relation(stmt.relation)
    relations: list[RelationName] = []
    ctes: set[str] = set()
    functions: list[tuple[str, ...]] = []
    nested: list[str] = []
    locking = select_into = xml = False
    for node in _walk(stmt):
        if node is not stmt and isinstance(node, _WRITES):
            nested.append(label(node))
        if isinstance(node, ast.SelectStmt):
            locking = locking or bool(node.lockingClause)
            select_into = select_into or node.intoClause is not None
        elif isinstance(node, ast.FuncCall):
            functions.append(tuple(str(getattr(p, "sval", "")) for p in node.funcname or ()))
        elif isinstance(node, ast.RangeTableFunc | ast.XmlExpr | ast.XmlSerialize):
            xml = True
        elif isinstance(node, ast.CommonTableExpr):
            ctes.add(str(node.ctename).lower())
        elif isinstance(node, ast.RangeVar):
            relations.append(_relation(node))
    return ParsedStatement(
        kind=_KINDS.get(name, "other"),
        label=label(stmt),
        explained=explained,
        target=target,
        relations=tuple(relations),
        ctes=frozenset(ctes),
        functions=tuple(functions),
        nested_writes=tuple(nested),
        locking=locking,
        select_into=select_into,
        with_clause=getattr(stmt, "withClause", None) is not None,
        xml=xml,
    )


def _relation(rel: Any) -> RelationName:
    if not isinstance(rel, ast.RangeVar):
        return RelationName("?", "?")
    schema = ".".join(str(p) for p in (rel.catalogname, rel.schemaname) if p) or None
    return RelationName(str(rel.relname), schema)


def _children(node: Any) -> Iterator[Any]:
    if isinstance(node, tuple | list):
        yield from node
        return
    if isinstance(node, ast.Node):
        slots: dict[str, Any] = getattr(type(node), "__slots__", {})
        for slot in slots:
            yield getattr(node, slot, None)


def _walk(node: Any) -> Iterator[ast.Node]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Node):
            yield current
        if isinstance(current, ast.Node | tuple | list):
            stack.extend(c for c in _children(current) if c is not None)
