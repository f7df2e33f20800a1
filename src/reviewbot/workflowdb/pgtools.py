"""``query`` and ``mutate`` on a PostgreSQL store: two fences, each enough on its own.

1. **The parse** (:mod:`reviewbot.core.pgstatement`): the statement is read by
   PostgreSQL's own parser and refused unless it is one statement of the route's kind that
   names only relations the caller may use and calls only functions without side effects.
2. **The role**: the statement runs in a transaction that first does ``SET LOCAL ROLE``
   to :data:`TOOLS_ROLE`, a role without login that holds ``SELECT`` on the readable
   relations (the user's workflow tables, the bot's tables except secrets) and ``INSERT``,
   ``UPDATE``, ``DELETE`` on the user's workflow tables only, nothing else. The
   transaction has a ``statement_timeout``, and a query's is ``READ ONLY``. After the
   statement, the transaction must still be under that role (PostgreSQL lets a session
   return to the role it logged in as); if it is not, nothing is answered and it rolls
   back.

The role is created at start (and its privileges granted after every user migration)
when the bot's own database user may create roles; otherwise an operator creates it once
(docs/security.md). Without it the tools refuse (``tools_role_missing``): never run less
confined.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import logging
import re
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql as pgsql

from reviewbot.core.errors import ReviewbotError
from reviewbot.core.pgstatement import (
    ParsedStatement,
    PgStatementRefused,
    Relations,
    Route,
    check_statement,
)
from reviewbot.store.database import Tx
from reviewbot.store.postgres import _TOKENS, PgTx, PostgresDatabase
from reviewbot.workflowdb import pgparse
from reviewbot.workflowdb.protected import SECRET_TABLES, bot_schema

log = logging.getLogger(__name__)

TOOLS_ROLE = "reviewbot_tools"


def relations(tx: Tx) -> Relations:
    """What the tools may use in the store's schema now (read as the bot's own user)."""
    rows = tx.all(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    )
    existing = {str(r[0]).lower() for r in rows}
    bot = bot_schema().tables
    user = frozenset(existing - bot - SECRET_TABLES)
    readable = user | frozenset((existing & bot) - SECRET_TABLES)
    return Relations(
        readable=readable,
        writable=user,
        protected=frozenset(bot),
        secret=frozenset(SECRET_TABLES),
    )


@dataclass(frozen=True)
class RoleState:
    exists: bool
    usable: bool  # the bot's user may SET ROLE to it
    problem: str | None  # what to set up, when it cannot be used


def role_state(tx: Tx, role: str = TOOLS_ROLE) -> RoleState:
    row = tx.one("SELECT oid FROM pg_roles WHERE rolname = ?", (role,))
    if row is None:
        return RoleState(False, False, _missing_text(role))
    member = tx.one(
        "SELECT rolsuper OR pg_has_role(current_user, ?, 'MEMBER') FROM pg_roles "
        "WHERE rolname = current_user",
        (role,),
    )
    if member is None or not member[0]:
        return RoleState(
            True,
            False,
            f"the database role {role} exists but the bot's user is not a member: "
            f"GRANT {role} TO <the bot's user> (docs/security.md)",
        )
    return RoleState(True, True, None)


def role_report(db: PostgresDatabase, role: str = TOOLS_ROLE) -> tuple[bool, str]:
    """Whether query and mutate can run on this store, and a line saying so (doctor)."""
    with db.read() as tx:
        state = role_state(tx, role)
    if state.usable:
        return True, f"database role {role} exists and confines query and mutate"
    return False, f"query and mutate are refused (tools_role_missing): {state.problem}"


def _missing_text(role: str) -> str:
    return (
        f"the database role {role} is missing and the bot's user may not create "
        f"roles: create it once as an administrator (CREATE ROLE {role} NOLOGIN; "
        f"GRANT {role} TO <the bot's user>; docs/security.md), then restart"
    )


def ensure_role(db: PostgresDatabase, role: str = TOOLS_ROLE) -> RoleState:
    """Create the role when it is missing and the bot's user may (superuser or
    CREATEROLE), make the bot's user a member, and grant its privileges. Never raises for
    a missing right: the answer says what is missing."""
    with db.connection() as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
        if exists.fetchone() is None:
            can = conn.execute(
                "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
            if can is not None and can[0]:
                try:
                    conn.execute(
                        pgsql.SQL("CREATE ROLE {} NOLOGIN NOINHERIT").format(pgsql.Identifier(role))
                    )
                except psycopg.errors.DuplicateObject:
                    pass  # another replica (or database on this server) made it just now
                except psycopg.Error as exc:
                    log.warning("creating the role %s failed: %s", role, exc)
        _join(conn, role)
    with db.write() as tx:
        assert isinstance(tx, PgTx)
        state = role_state(tx, role)
        if state.exists:
            grant_privileges(tx, role)
    return state


def _join(conn: psycopg.Connection[Any], role: str) -> None:
    """Make the bot's user a member of the role (a CREATEROLE user that created it holds
    ADMIN on it; a superuser needs no membership)."""
    row = conn.execute(
        "SELECT r.oid IS NOT NULL AND NOT u.rolsuper "
        "AND NOT pg_has_role(current_user, r.oid, 'MEMBER') "
        "FROM pg_roles u LEFT JOIN pg_roles r ON r.rolname = %s WHERE u.rolname = current_user",
        (role,),
    ).fetchone()
    if row is None or not row[0]:
        return
    try:
        conn.execute(
            pgsql.SQL("GRANT {} TO {}").format(pgsql.Identifier(role), pgsql.SQL("CURRENT_USER"))
        )
    except psycopg.Error as exc:
        log.warning("joining the role %s failed: %s", role, exc)


def grant_privileges(tx: PgTx, role: str = TOOLS_ROLE) -> None:
    """Give the role exactly its privileges on the store's schema, in ``tx``: ``SELECT`` on
    the readable relations, row changes on the user's tables (and their sequences), and
    nothing on anything else. Run after every user migration and at start."""
    if tx.one("SELECT 1 FROM pg_roles WHERE rolname = ?", (role,)) is None:
        return
    ident = pgsql.Identifier(role)
    schema_row = tx.one("SELECT current_schema()")
    schema = pgsql.Identifier(str(schema_row[0] if schema_row else "public"))
    conn = tx.conn
    conn.execute(pgsql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, ident))
    conn.execute(pgsql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {} FROM {}").format(schema, ident))
    conn.execute(
        pgsql.SQL("REVOKE ALL ON ALL SEQUENCES IN SCHEMA {} FROM {}").format(schema, ident)
    )
    rel = relations(tx)
    for name in sorted(rel.readable):
        privileges = "SELECT, INSERT, UPDATE, DELETE" if name in rel.writable else "SELECT"
        conn.execute(
            pgsql.SQL("GRANT " + privileges + " ON {} TO {}").format(pgsql.Identifier(name), ident)
        )
    # serial columns of the user's tables draw from sequences the tables own
    owned = tx.all(
        "SELECT s.relname, t.relname FROM pg_depend d "
        "JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S' "
        "JOIN pg_class t ON t.oid = d.refobjid "
        "WHERE d.deptype = 'a' AND s.relnamespace = current_schema()::regnamespace"
    )
    for row in owned:
        seq, table = str(row[0]), str(row[1])
        if table.lower() in rel.writable:
            conn.execute(
                pgsql.SQL("GRANT USAGE, SELECT ON SEQUENCE {} TO {}").format(
                    pgsql.Identifier(seq), ident
                )
            )


@dataclass
class Answer:
    columns: list[str]
    rows: list[list[Any]]
    rowcount: int
    truncated: bool


class ToolsRoleMissing(ReviewbotError, RuntimeError):
    """The role that confines the tools cannot be used; nothing ran."""

    code = "tools_role_missing"


class RoleEscaped(ReviewbotError, PermissionError):
    """The statement left the tools' role; nothing was answered or kept."""

    code = "statement_refused"


class PgTimeout(ReviewbotError, RuntimeError):
    code = "query_timeout"


class PgTooLarge(ReviewbotError, RuntimeError):
    code = "query_too_large"


class PgDenied(ReviewbotError, PermissionError):
    """The role refused a relation (``table`` names it, when the message does)."""

    code = "permission_denied"

    def __init__(self, detail: str, table: str | None) -> None:
        super().__init__(detail)
        self.table = table


class PgFailed(ReviewbotError, RuntimeError):
    code = "statement_failed"


_CURSOR = "reviewbot_tool"
_BATCH = 200


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, int | float | bool) or value is None:
        return 8
    return len(str(value))


def plain(value: Any) -> Any:
    """A PostgreSQL value as the SQLite routes answer: text for times, numbers as numbers."""
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, uuid.UUID | datetime.timedelta):
        return str(value)
    if isinstance(value, memoryview):
        return bytes(value)
    return value


class _Running:
    """The connections of statements running now, so a stopping server can cancel them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conns: dict[int, psycopg.Connection[Any]] = {}
        self.cancelled: set[int] = set()

    def add(self, conn: psycopg.Connection[Any]) -> None:
        with self.lock:
            self.conns[id(conn)] = conn

    def remove(self, conn: psycopg.Connection[Any]) -> bool:
        """Forget ``conn``; whether it was cancelled."""
        with self.lock:
            self.conns.pop(id(conn), None)
            if id(conn) in self.cancelled:
                self.cancelled.discard(id(conn))
                return True
            return False

    def cancel_all(self) -> None:
        with self.lock:
            conns = list(self.conns.items())
            self.cancelled.update(key for key, _ in conns)
        for _, conn in conns:
            try:
                conn.cancel_safe(timeout=5)
            except psycopg.Error as exc:  # it ends at its statement_timeout anyway
                log.warning("cancelling a workflow-DB statement failed: %s", exc)


_RUNNING = _Running()


def cancel_running() -> None:
    """Cancel every statement the tools run now (a server stopping)."""
    _RUNNING.cancel_all()


class Cancelled(ReviewbotError, RuntimeError):
    code = "statement_failed"


def run_confined(
    url: str,
    route: Route,
    sql: str,
    params: Sequence[Any],
    *,
    timeout_s: float,
    max_rows: int,
    max_bytes: int,
    parse_fence: bool = True,
    role: str = TOOLS_ROLE,
    cancelled: Callable[[], bool] = lambda: False,
) -> Answer:
    """Run one statement of ``route`` under both fences (``parse_fence=False`` only to show
    that the role alone holds: tests)."""
    text = numbered(sql, len(params))
    values = tuple(params)
    parsed = parse_for(route, text) if parse_fence else None
    if cancelled():
        raise Cancelled(f"{route.value}: the server is stopping; the statement was cancelled")
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        _RUNNING.add(conn)
        try:
            return _transaction(conn, route, text, values, timeout_s, max_rows, max_bytes,
                                parsed, role)  # fmt: skip
        except PgTimeout:
            if _RUNNING.remove(conn):
                raise Cancelled(
                    f"{route.value}: the server is stopping; the statement was cancelled"
                ) from None
            raise
        finally:
            _RUNNING.remove(conn)


def _transaction(
    conn: psycopg.Connection[Any],
    route: Route,
    text: str,
    values: tuple[Any, ...],
    timeout_s: float,
    max_rows: int,
    max_bytes: int,
    parsed: list[ParsedStatement] | None,
    role: str,
) -> Answer:
    read_only = route is Route.QUERY
    conn.execute(
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        if read_only
        else "BEGIN ISOLATION LEVEL READ COMMITTED"
    )
    try:
        answer = _confined(conn, route, text, values, timeout_s, max_rows, max_bytes, parsed, role)
    except BaseException:
        with contextlib.suppress(psycopg.Error):  # a broken connection rolls back by itself
            conn.execute("ROLLBACK")
        raise
    conn.execute("ROLLBACK" if read_only else "COMMIT")
    return answer


def _confined(
    conn: psycopg.Connection[Any],
    route: Route,
    text: str,
    values: tuple[Any, ...],
    timeout_s: float,
    max_rows: int,
    max_bytes: int,
    parsed: list[ParsedStatement] | None,
    role: str,
) -> Answer:
    tx = PgTx(conn)
    state = role_state(tx, role)
    if not state.usable:
        raise ToolsRoleMissing(f"{route.value}: {state.problem}; nothing ran")
    checked = None if parsed is None else check_statement(parsed, route, relations(tx))
    conn.execute(
        "SELECT set_config('statement_timeout', %s, true)", (str(max(1, int(timeout_s * 1000))),)
    )
    conn.execute(pgsql.SQL("SET LOCAL ROLE {}").format(pgsql.Identifier(role)))
    cur = psycopg.RawCursor(conn)
    try:
        if route is Route.QUERY and (checked is None or checked.kind == "select"):
            answer = _declared(cur, route, text, values, max_rows, max_bytes)
        else:
            cur.execute(text, values, prepare=True)  # one statement: the server says so too
            columns = [d.name for d in cur.description or ()]
            rows = _take(cur, route, max_rows, max_bytes) if cur.description else []
            if route is Route.MUTATE and len(rows) > max_rows:
                raise PgTooLarge(
                    f"mutate: RETURNING gave more than {max_rows} rows; nothing was changed"
                )
            count = len(rows) if route is Route.QUERY else max(cur.rowcount, 0)
            truncated = len(rows) > max_rows
            answer = Answer(
                columns,
                rows[:max_rows],
                min(count, max_rows) if route is Route.QUERY else count,
                truncated,
            )
        who = conn.execute("SELECT current_user").fetchone()
    except psycopg.errors.QueryCanceled:
        raise PgTimeout(
            f"{route.value}: the statement ran longer than {timeout_s:g} s and was cancelled "
            "(nothing was changed); narrow it or add a LIMIT"
        ) from None
    except psycopg.errors.InsufficientPrivilege as exc:
        raise _denied(route, exc) from None
    except psycopg.Error as exc:
        raise PgFailed(f"{route.value}: {str(exc).strip()}") from None
    if who is None or who[0] != role:
        raise RoleEscaped(
            f"{route.value}: the statement left the role {role}; nothing was answered or changed"
        )
    return answer


def _declared(
    cur: psycopg.RawCursor[Any],
    route: Route,
    text: str,
    values: tuple[Any, ...],
    max_rows: int,
    max_bytes: int,
) -> Answer:
    """A SELECT through a server-side cursor: only ``max_rows + 1`` rows ever leave the
    server, a batch at a time, and the byte limit is counted as they arrive."""
    cur.execute(f"DECLARE {_CURSOR} NO SCROLL CURSOR FOR {text}", values, prepare=True)
    rows: list[list[Any]] = []
    columns: list[str] = []
    total = 0
    while len(rows) <= max_rows:
        want = min(_BATCH, max_rows + 1 - len(rows))
        cur.execute(f"FETCH FORWARD {int(want)} FROM {_CURSOR}")
        columns = [d.name for d in cur.description or ()]
        batch = cur.fetchall()
        for row in batch:
            total += sum(_size(v) for v in row)
            if total > max_bytes:
                raise _too_large(route, max_bytes)
            rows.append([plain(v) for v in row])
        if len(batch) < want:
            break
    cur.execute(f"CLOSE {_CURSOR}")
    truncated = len(rows) > max_rows
    return Answer(columns, rows[:max_rows], min(len(rows), max_rows), truncated)


def _take(
    cur: psycopg.RawCursor[Any], route: Route, max_rows: int, max_bytes: int
) -> list[list[Any]]:
    rows: list[list[Any]] = []
    total = 0
    for row in cur:
        total += sum(_size(v) for v in row)
        if total > max_bytes:
            raise _too_large(route, max_bytes)
        rows.append([plain(v) for v in row])
        if len(rows) > max_rows:
            break
    return rows


def _too_large(route: Route, max_bytes: int) -> PgTooLarge:
    return PgTooLarge(
        f"{route.value}: the answer is larger than {max_bytes} bytes; select fewer columns "
        "or rows (LIMIT), or aggregate"
    )


_DENIED_TABLE = re.compile(r"permission denied for (?:table|relation|view|sequence) (\S+)")


def _denied(route: Route, exc: psycopg.Error) -> PgDenied:
    text = str(exc).strip().splitlines()[0]
    match = _DENIED_TABLE.search(text)
    table = match.group(1).strip('"').lower() if match else None
    return PgDenied(
        f"{route.value}: {text} (the statement reaches outside what {route.value} allows)", table
    )


def grant_after_migration(tx: PgTx) -> None:
    """:func:`grant_privileges` inside a migration's transaction, behind a savepoint: a
    bot user that may not grant (it does not own a table) leaves the migration applied and
    the new table out of the tools' reach, never the other way round."""
    tx.conn.execute("SAVEPOINT reviewbot_tools_grants")
    try:
        grant_privileges(tx)
    except psycopg.Error as exc:
        tx.conn.execute("ROLLBACK TO SAVEPOINT reviewbot_tools_grants")
        log.warning("granting %s its privileges failed: %s", TOOLS_ROLE, exc)
    else:
        tx.conn.execute("RELEASE SAVEPOINT reviewbot_tools_grants")


def parse_for(route: Route, text: str) -> list[ParsedStatement]:
    """``text`` read by PostgreSQL's parser; text it cannot parse is refused."""
    try:
        return pgparse.parse(text)
    except pgparse.PgParseError as exc:
        raise PgStatementRefused(f"{route.value}: the statement does not parse: {exc}") from None


def numbered(sql: str, count: int) -> str:
    """``?`` placeholders (outside quotes and comments) as PostgreSQL's ``$1``, ``$2``...:
    the exact text that is parsed and then run (with no values, ``sql`` as written)."""
    if count == 0:
        return sql
    n = 0

    def swap(match: Any) -> str:
        nonlocal n
        text = str(match.group(0))
        if text == "?":
            n += 1
            return f"${n}"
        return text

    return _TOKENS.sub(swap, sql)
