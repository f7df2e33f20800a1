"""What ``query`` and ``mutate`` may run on a PostgreSQL store, decided on what PostgreSQL's
own parser read from the statement (:mod:`reviewbot.workflowdb.pgparse`: pglast,
libpg_query, the server's grammar, never a pattern).

A statement is allowed when all of these hold:

- the text is exactly one statement (a second one hidden after a comment or a string is
  still a second statement to the parser);
- its kind is the route's: ``query`` takes ``SELECT`` (incl. ``WITH``, ``VALUES``, set
  operations) and ``EXPLAIN`` of one; ``mutate`` takes one ``INSERT``, ``UPDATE`` or
  ``DELETE`` without ``WITH`` (as on SQLite). ``COPY``, ``DO``, ``SET``, ``SET ROLE``,
  ``CALL``, DDL and transaction control are other kinds, so they are refused;
- nothing in it writes or locks outside that kind: no data-changing CTE, no
  ``SELECT ... FOR UPDATE/SHARE``, no ``SELECT ... INTO``, no XML functions;
- every function it calls is on a list of functions without side effects (no
  ``pg_sleep``, ``pg_read_file``, ``dblink``, ``set_config``, ``nextval``, ``query_to_xml``,
  ...), named without a schema or in ``pg_catalog``;
- every relation it names resolves, after its CTE names, to one the caller may use: a query
  reads the readable relations; a mutation changes only the writable ones (and reads the
  readable ones); a schema-qualified name is refused (no other schema is reachable).

Pure: no I/O. The caller passes the parsed facts and which relations are readable and
writable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from reviewbot.core.errors import ReviewbotError


class Route(Enum):
    QUERY = "query"
    MUTATE = "mutate"


class PgStatementRefused(ReviewbotError, ValueError):
    """The statement is not allowed on this route; nothing ran. ``table`` names a bot
    table or secret the refusal is about, when it is one."""

    def __init__(self, message: str, *, table: str | None = None, unknown: bool = False) -> None:
        super().__init__(message)
        self.table = table
        self.unknown = (
            unknown  # a name that is no relation the caller may use (SQLite: no such table)
        )


@dataclass(frozen=True)
class Relations:
    """Which relations (lower-cased names in the store's schema) a route may use.

    ``protected`` are the bot's own tables (a refusal names them as such); ``secret``
    never appear in any answer.
    """

    readable: frozenset[str]
    writable: frozenset[str]
    protected: frozenset[str] = frozenset()
    secret: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RelationName:
    name: str  # as written (a quoted name keeps its case)
    schema: str | None = None  # a schema (or catalog.schema) it was qualified with


@dataclass(frozen=True)
class ParsedStatement:
    """What the parser read from one statement."""

    kind: str  # "select", "explain", "insert", "update", "delete" or "other"
    label: str  # the kind as PostgreSQL spells it, for refusals ("COPY", "SET ROLE")
    explained: str | None  # EXPLAIN: the kind of what it explains
    target: RelationName | None  # INSERT / UPDATE / DELETE: the table changed
    relations: tuple[RelationName, ...]  # every relation named anywhere in it
    ctes: frozenset[str]  # its CTE names, lower-cased
    functions: tuple[tuple[str, ...], ...]  # every function call, as its name's parts
    nested_writes: tuple[str, ...]  # labels of writes inside it (a data-changing CTE)
    locking: bool  # SELECT ... FOR UPDATE / SHARE
    select_into: bool  # SELECT ... INTO
    with_clause: bool  # the statement itself has a WITH
    xml: bool  # XML functions or XMLTABLE


@dataclass(frozen=True)
class CheckedStatement:
    kind: str  # "select", "explain", "insert", "update", "delete"
    relations: frozenset[str]  # every relation the statement names (CTE names excluded)
    target: str | None  # a mutation's table


# Functions with no side effect and no way to reach other relations, files or servers.
# Anything not listed is refused: a new function is allowed by adding it here on purpose.
SAFE_FUNCTIONS = frozenset(
    {
        # aggregates and window functions
        *("count", "sum", "avg", "min", "max", "bool_and", "bool_or", "every"),
        *("string_agg", "array_agg", "json_agg", "jsonb_agg", "json_object_agg"),
        *("jsonb_object_agg", "stddev", "variance", "percentile_cont", "percentile_disc"),
        *("row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile"),
        *("lag", "lead", "first_value", "last_value", "nth_value", "mode"),
        # text
        *("lower", "upper", "length", "char_length", "character_length", "octet_length"),
        *("substr", "substring", "trim", "btrim", "ltrim", "rtrim", "replace", "concat"),
        *("concat_ws", "left", "right", "position", "strpos", "split_part", "starts_with"),
        *("lpad", "rpad", "repeat", "reverse", "initcap", "format", "regexp_replace"),
        *("regexp_match", "regexp_matches", "regexp_split_to_array", "translate", "md5"),
        *("encode", "decode", "quote_ident", "quote_literal", "to_hex", "chr", "ascii"),
        # numbers
        *("abs", "round", "floor", "ceil", "ceiling", "mod", "power", "sqrt", "trunc"),
        *("sign", "div", "exp", "ln", "log", "greatest", "least", "random", "width_bucket"),
        # dates and times
        *("now", "date_trunc", "date_part", "extract", "age", "to_char", "to_date"),
        *("to_timestamp", "to_number", "make_date", "make_time", "make_timestamp"),
        *("make_timestamptz", "make_interval", "timezone", "date_bin", "isfinite"),
        *("clock_timestamp", "statement_timestamp", "transaction_timestamp"),
        # JSON and arrays
        *("to_json", "to_jsonb", "json_build_object", "jsonb_build_object"),
        *("json_build_array", "jsonb_build_array", "json_extract_path"),
        *("json_extract_path_text", "jsonb_extract_path", "jsonb_extract_path_text"),
        *("json_array_length", "jsonb_array_length", "json_typeof", "jsonb_typeof"),
        *("json_array_elements", "jsonb_array_elements", "json_array_elements_text"),
        *("jsonb_array_elements_text", "json_each", "jsonb_each", "json_each_text"),
        *("jsonb_each_text", "json_object_keys", "jsonb_object_keys", "jsonb_set"),
        *("jsonb_insert", "jsonb_strip_nulls", "jsonb_pretty", "row_to_json"),
        *("array_length", "array_to_string", "string_to_array", "array_position"),
        *("array_append", "array_prepend", "array_cat", "array_remove", "cardinality"),
        *("unnest", "generate_series", "coalesce", "nullif", "gen_random_uuid"),
    }
)
_CATALOG = "pg_catalog"


def _refuse(route: Route, reason: str, *, table: str | None = None) -> PgStatementRefused:
    return PgStatementRefused(f"{route.value}: {reason}", table=table)


def check_statement(
    statements: Sequence[ParsedStatement], route: Route, relations: Relations
) -> CheckedStatement:
    """The verdict on the parsed ``statements`` for ``route``, or
    :class:`PgStatementRefused` with a reason a caller can act on."""
    if len(statements) != 1:
        raise _refuse(
            route,
            f"exactly one statement is allowed; found {len(statements)} "
            "(a second statement is refused wherever it hides, also after a comment)",
        )
    stmt = statements[0]
    _check_kind(stmt, route)
    if stmt.nested_writes:
        raise _refuse(
            route,
            f"{stmt.nested_writes[0]} inside the statement is not allowed (a write hidden "
            "in a CTE is still a write)",
        )
    if stmt.locking:
        raise _refuse(route, "SELECT ... FOR UPDATE/SHARE takes row locks; not allowed")
    if stmt.select_into:
        raise _refuse(route, "SELECT ... INTO creates a table; not allowed")
    if stmt.xml:
        raise _refuse(route, "XML functions are not allowed")
    for parts in stmt.functions:
        _check_function(parts, route)
    if route is Route.MUTATE and stmt.with_clause:
        raise _refuse(route, "WITH is not allowed in a mutation (as on SQLite)")
    target = _name(stmt.target, route) if stmt.target is not None else None
    names: set[str] = set()
    for rel in stmt.relations:
        name = _name(rel, route)
        if name in stmt.ctes and name not in relations.protected | relations.secret:
            continue
        names.add(name)
    for name in sorted(names):
        if name in relations.secret:
            raise _refuse(
                route,
                f"{name} holds secrets (API token hashes) and cannot be read through "
                f"{route.value}; use `reviewbot token list`",
                table=name,
            )
        if name not in relations.readable and name not in relations.writable:
            if name in relations.protected:
                raise _protected(route, name)
            raise PgStatementRefused(
                f"{route.value}: no table or view named {name} that {route.value} may use "
                "(your workflow tables and the bot's readable tables only)",
                unknown=True,
            )
    if target is not None and target not in relations.writable:
        if target in relations.protected:
            raise _protected(route, target)
        raise _refuse(route, f"{target} is not one of your workflow tables; it cannot be changed")
    return CheckedStatement(stmt.kind, frozenset(names), target)


def _protected(route: Route, name: str) -> PgStatementRefused:
    return PgStatementRefused(
        f"{route.value}: {name} is one of reviewbot's own tables; {route.value} cannot "
        "change it (only workflow tables created by your migrations can be changed)",
        table=name,
    )


def _check_kind(stmt: ParsedStatement, route: Route) -> None:
    if route is Route.QUERY:
        if stmt.kind == "select":
            return
        if stmt.kind == "explain":
            if stmt.explained != "select":
                raise _refuse(route, "EXPLAIN is allowed only of a SELECT")
            return
        raise _refuse(
            route,
            f"{stmt.label} is not allowed; use SELECT, WITH, EXPLAIN or describe TABLE "
            "(mutate changes rows, apply changes the schema)",
        )
    if stmt.kind not in ("insert", "update", "delete"):
        raise _refuse(
            route,
            f"{stmt.label} is not allowed; use exactly one INSERT, UPDATE or DELETE "
            "(schema changes go through db apply with a migration file)",
        )


def _name(rel: RelationName, route: Route) -> str:
    if rel.schema:
        raise _refuse(route, f"schema-qualified names are not allowed ({rel.schema}.{rel.name})")
    return rel.name.lower()


def _check_function(parts: tuple[str, ...], route: Route) -> None:
    shown = ".".join(parts)
    if (len(parts) == 2 and parts[0].lower() != _CATALOG) or len(parts) > 2:
        raise _refuse(route, f"function {shown}: schema-qualified functions are not allowed")
    name = parts[-1].lower() if parts else ""
    if name not in SAFE_FUNCTIONS:
        raise _refuse(
            route,
            f"function {shown} is not allowed (only functions without side effects that "
            "reach nothing but the statement's own rows, e.g. count, lower, now, "
            "jsonb_extract_path)",
        )
