"""The migration allow-list: which statements a migration file may hold, and which destroy.

Allowed, and nothing else:

- ``CREATE TABLE IF NOT EXISTS name (...)``
- ``CREATE [UNIQUE] INDEX IF NOT EXISTS name ON table (...)``
- ``DROP TABLE IF EXISTS name``, ``DROP INDEX IF EXISTS name``
- ``ALTER TABLE name RENAME TO new``, ``ALTER TABLE name RENAME [COLUMN] old TO new``,
  ``ALTER TABLE name ADD [COLUMN] definition``, ``ALTER TABLE name DROP [COLUMN] column``

The bot's own shipped migrations (``packaged``) may also hold ``UPDATE name SET ...``, to
convert the values of a column whose type they change; they are trusted code, still applied
through the ledger and after a pre-migration backup. User migrations never may: data changes
go through ``mutate``.

The statement's kind is read from its code tokens, after comments and whitespace, with
keywords compared case-insensitively; a quoted word is a name, never a keyword. Names may not
be schema-qualified (no other database can be reached), and the migration ledger and
SQLite's own ``sqlite_*`` tables cannot be touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from reviewbot.core.errors import ReviewbotError
from reviewbot.workflowdb.sqltext import Statement, Token, TokenKind

LEDGER_TABLE = "schema_migration_log"

ALLOWED_SUMMARY = (
    "allowed: CREATE TABLE|[UNIQUE] INDEX ... IF NOT EXISTS, DROP TABLE|INDEX IF EXISTS, "
    "ALTER TABLE ... RENAME TO|RENAME COLUMN ... TO|ADD COLUMN|DROP COLUMN"
)


class StatementKind(Enum):
    CREATE_TABLE = "create table"
    CREATE_INDEX = "create index"
    DROP_TABLE = "drop table"
    DROP_INDEX = "drop index"
    RENAME_TABLE = "rename table"
    RENAME_COLUMN = "rename column"
    ADD_COLUMN = "add column"
    DROP_COLUMN = "drop column"
    UPDATE_ROWS = "update"  # the bot's own migrations only

    @property
    def destructive(self) -> bool:
        """Whether the statement can lose data or break readers of the old names."""
        return self not in (
            StatementKind.CREATE_TABLE,
            StatementKind.CREATE_INDEX,
            StatementKind.ADD_COLUMN,
        )


@dataclass(frozen=True)
class ClassifiedStatement:
    statement: Statement
    kind: StatementKind
    name: str  # the table (or index) the statement acts on
    column: str | None = None  # ADD / DROP / RENAME COLUMN: the column
    new_name: str | None = None  # RENAME TO: the table's new name
    index: str | None = None  # CREATE INDEX: the index (``name`` is its table)

    @property
    def destructive(self) -> bool:
        return self.kind.destructive


class StatementRejected(ReviewbotError, ValueError):
    """A statement is outside the allow-list; the message names its number and first line."""

    def __init__(self, statement: Statement, reason: str) -> None:
        super().__init__(
            f"statement {statement.number} (line {statement.line}: {statement.first_line}) "
            f"is not allowed: {reason}"
        )
        self.statement = statement
        self.reason = reason


class _Reader:
    """Walks a statement's code tokens."""

    def __init__(self, statement: Statement) -> None:
        self.stmt = statement
        self.toks = statement.tokens
        self.pos = 0

    def reject(self, reason: str) -> StatementRejected:
        return StatementRejected(self.stmt, reason)

    def peek(self) -> Token | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def keyword(self, *words: str) -> bool:
        """Consume the keywords ``words`` if they come next."""
        end = self.pos + len(words)
        if end > len(self.toks):
            return False
        if all(t.upper == w for t, w in zip(self.toks[self.pos : end], words, strict=True)):
            self.pos = end
            return True
        return False

    def expect(self, *words: str, why: str) -> None:
        if not self.keyword(*words):
            raise self.reject(why)

    def name(self, what: str, *, guarded: bool = True) -> str:
        tok = self.peek()
        name = tok.name if tok is not None else None
        if tok is None or name is None:
            raise self.reject(f"expected a {what} name")
        self.pos += 1
        nxt = self.peek()
        if nxt is not None and nxt.kind is TokenKind.PUNCT and nxt.text == ".":
            raise self.reject(f"schema-qualified {what} names are not allowed ({name}.…)")
        if guarded and name.lower() == LEDGER_TABLE:
            raise self.reject(f"{LEDGER_TABLE} is the migration ledger; only the engine writes it")
        if guarded and name.lower().startswith("sqlite_"):
            raise self.reject(f"{name} is reserved for SQLite itself")
        return name

    def end(self, what: str) -> None:
        tok = self.peek()
        if tok is not None:
            raise self.reject(f"unexpected {tok.text!r} after {what}")

    def next_is(self, punct: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind is TokenKind.PUNCT and tok.text == punct


def classify(statement: Statement, *, packaged: bool = False) -> ClassifiedStatement:
    """The allow-listed kind of ``statement``, or :class:`StatementRejected`.

    ``packaged`` is for the bot's own shipped migrations only (it also allows ``UPDATE``).
    """
    r = _Reader(statement)
    first = r.peek()
    if first is None or first.kind is not TokenKind.WORD:
        raise r.reject(f"a statement must start with a keyword; {ALLOWED_SUMMARY}")
    if r.keyword("CREATE"):
        return _create(r)
    if r.keyword("DROP"):
        return _drop(r)
    if r.keyword("ALTER"):
        return _alter(r)
    if packaged and r.keyword("UPDATE"):
        table = r.name("table")
        r.expect("SET", why="UPDATE must name its table and then SET")
        return ClassifiedStatement(r.stmt, StatementKind.UPDATE_ROWS, table)
    raise r.reject(f"{first.upper} is not allowed in a migration; {ALLOWED_SUMMARY}")


def _create(r: _Reader) -> ClassifiedStatement:
    if r.keyword("TABLE"):
        r.expect("IF", "NOT", "EXISTS", why="CREATE TABLE must say IF NOT EXISTS")
        name = r.name("table")
        if r.keyword("AS"):
            raise r.reject("CREATE TABLE ... AS SELECT is not allowed; declare the columns")
        if not r.next_is("("):
            raise r.reject("CREATE TABLE must declare its columns in parentheses")
        return ClassifiedStatement(r.stmt, StatementKind.CREATE_TABLE, name)
    unique = r.keyword("UNIQUE")
    if r.keyword("INDEX"):
        r.expect("IF", "NOT", "EXISTS", why="CREATE INDEX must say IF NOT EXISTS")
        index = r.name("index")
        r.expect("ON", why="CREATE INDEX must name its table with ON")
        table = r.name("table")
        if not r.next_is("("):
            raise r.reject("CREATE INDEX must list its columns in parentheses")
        return ClassifiedStatement(r.stmt, StatementKind.CREATE_INDEX, table, index=index)
    nxt = r.peek()
    what = "CREATE UNIQUE" if unique else "CREATE " + (nxt.text.upper() if nxt else "")
    raise r.reject(f"{what.strip()} is not allowed in a migration; {ALLOWED_SUMMARY}")


def _drop(r: _Reader) -> ClassifiedStatement:
    for word, kind in (("TABLE", StatementKind.DROP_TABLE), ("INDEX", StatementKind.DROP_INDEX)):
        if r.keyword(word):
            r.expect("IF", "EXISTS", why=f"DROP {word} must say IF EXISTS")
            name = r.name(word.lower())
            r.end(f"DROP {word} IF EXISTS {name}")
            return ClassifiedStatement(r.stmt, kind, name)
    nxt = r.peek()
    what = "DROP " + (nxt.text.upper() if nxt else "")
    raise r.reject(f"{what.strip()} is not allowed in a migration; {ALLOWED_SUMMARY}")


def _alter(r: _Reader) -> ClassifiedStatement:
    r.expect("TABLE", why=f"only ALTER TABLE is allowed; {ALLOWED_SUMMARY}")
    table = r.name("table")
    if r.keyword("RENAME", "TO"):
        new = r.name("table")
        r.end("RENAME TO")
        return ClassifiedStatement(r.stmt, StatementKind.RENAME_TABLE, table, new_name=new)
    if r.keyword("RENAME"):
        r.keyword("COLUMN")
        column = r.name("column", guarded=False)
        r.expect("TO", why="RENAME COLUMN must say TO")
        r.name("column", guarded=False)
        r.end("RENAME COLUMN")
        return ClassifiedStatement(r.stmt, StatementKind.RENAME_COLUMN, table, column)
    if r.keyword("ADD"):
        r.keyword("COLUMN")
        column = r.name("column", guarded=False)
        return ClassifiedStatement(r.stmt, StatementKind.ADD_COLUMN, table, column)
    if r.keyword("DROP"):
        r.keyword("COLUMN")
        column = r.name("column", guarded=False)
        r.end("DROP COLUMN")
        return ClassifiedStatement(r.stmt, StatementKind.DROP_COLUMN, table, column)
    raise r.reject(
        "ALTER TABLE allows only RENAME TO, RENAME COLUMN ... TO, ADD COLUMN and DROP COLUMN"
    )


def classify_all(
    statements: list[Statement], *, packaged: bool = False
) -> list[ClassifiedStatement]:
    """Classify every statement; the first one outside the allow-list raises."""
    return [classify(s, packaged=packaged) for s in statements]
