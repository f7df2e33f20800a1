"""The PostgreSQL statement check on its own (no server): what PostgreSQL's parser reads
(workflowdb.pgparse) and the decision on it (core.pgstatement)."""

from __future__ import annotations

import pytest

from reviewbot.core.pgstatement import (
    CheckedStatement,
    PgStatementRefused,
    Relations,
    Route,
    check_statement,
)
from reviewbot.workflowdb.pgtools import parse_for


def check(sql: str, route: Route, relations: Relations) -> CheckedStatement:
    return check_statement(parse_for(route, sql), route, relations)


RELATIONS = Relations(
    readable=frozenset({"notes", "leases"}),
    writable=frozenset({"notes"}),
    protected=frozenset({"leases", "api_tokens"}),
    secret=frozenset({"api_tokens"}),
)


@pytest.mark.parametrize(
    ("route", "sql", "kind", "names"),
    [
        (Route.QUERY, "SELECT count(*) FROM notes", "select", {"notes"}),
        (Route.QUERY, "WITH t AS (SELECT * FROM notes) SELECT * FROM t", "select", {"notes"}),
        (Route.QUERY, "SELECT 'DELETE FROM leases; --' AS s", "select", set()),
        (Route.QUERY, "EXPLAIN SELECT * FROM leases", "explain", {"leases"}),
        (Route.QUERY, "SELECT lower(body) FROM notes WHERE n = $1 -- x", "select", {"notes"}),
        (Route.MUTATE, "UPDATE notes SET n = 1 WHERE n IN (SELECT epoch FROM leases)", "update",
         {"notes", "leases"}),
        (Route.MUTATE, "INSERT INTO notes (body) VALUES ($1) RETURNING id", "insert", {"notes"}),
    ],
)  # fmt: skip
def test_allowed(route: Route, sql: str, kind: str, names: set[str]) -> None:
    checked = check(sql, route, RELATIONS)
    assert (checked.kind, set(checked.relations)) == (kind, names)


@pytest.mark.parametrize(
    ("route", "sql", "reason", "table"),
    [
        (Route.QUERY, "SELECT * FROM api_tokens", "holds secrets", "api_tokens"),
        (Route.QUERY, "WITH api_tokens AS (SELECT 1) SELECT * FROM api_tokens", "secrets",
         "api_tokens"),
        (Route.QUERY, "SELECT 1; /* */ DELETE FROM notes", "exactly one statement", None),
        (Route.QUERY, "SELECT * FROM notes FOR SHARE", "FOR UPDATE/SHARE", None),
        (Route.QUERY, "SELECT pg_sleep(1)", "function pg_sleep", None),
        (Route.QUERY, "SELECT x.pg_sleep(1)", "schema-qualified functions", None),
        (Route.QUERY, "COPY notes TO STDOUT", "COPY is not allowed", None),
        (Route.QUERY, "DO $$ BEGIN END $$", "DO is not allowed", None),
        (Route.QUERY, "SET ROLE postgres", "SET ROLE is not allowed", None),
        (Route.QUERY, "SET search_path = x", "SET is not allowed", None),
        (Route.QUERY, "SELECT * FROM other", "no table or view named other", None),
        (Route.MUTATE, "DELETE FROM leases", "leases is one of reviewbot's own", "leases"),
        (Route.MUTATE, "CREATE INDEX i ON notes (n)", "CREATE INDEX is not allowed", None),
        (Route.MUTATE, "MERGE INTO notes USING notes n2 ON true WHEN MATCHED THEN DELETE",
         "MERGE is not allowed", None),
    ],
)  # fmt: skip
def test_refused(route: Route, sql: str, reason: str, table: str | None) -> None:
    with pytest.raises(PgStatementRefused, match=reason) as err:
        check(sql, route, RELATIONS)
    assert err.value.table == table
