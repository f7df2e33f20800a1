"""Moving the bot's data between stores: ``reviewbot db export`` and ``db import``.

The format is JSON lines, one object a line, independent of the store it came from:

- first a header: ``{"format": "reviewbot-export", "version": 1, "dialect": ...,
  "migrations": [...]}`` (the packaged migrations the source had applied);
- then one ``{"table": NAME, "row": {COLUMN: VALUE}}`` per row of each of the bot's own
  tables; bytes are ``{"$bytes": BASE64}``;
- last a trailer ``{"end": true, "rows": {TABLE: COUNT}}``, so a cut-off file is refused.

The migration ledger is not exported (each store's ledger names its own dialect's files) and
neither are users' workflow tables (their schema is written per dialect: apply your
migrations on the target first, then copy those rows with ``query`` / ``mutate``).

On SQLite the lease epochs are exported as the larger of the ``lease_epochs`` row and the
epoch ledger file beside the database, so a store moved to PostgreSQL never grants an epoch
it granted before.

Import goes into an empty store only (the bot's tables hold no rows; the target's own
packaged migrations are applied first), in one transaction: all rows or none. On
PostgreSQL the identity sequences are moved past the imported ids.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from reviewbot.core.errors import Refused
from reviewbot.store.database import SQLITE, Database, SQLiteDatabase, Tx
from reviewbot.store.epochs import EpochLedger, default_ledger_path
from reviewbot.workflowdb.allowlist import LEDGER_TABLE
from reviewbot.workflowdb.migrations import migration_log, table_exists
from reviewbot.workflowdb.protected import bot_schema
from reviewbot.workflowdb.query import json_value

FORMAT = "reviewbot-export"
VERSION = 1
MAX_LINE_BYTES = 64 * 1024 * 1024  # one row: a delivery body is at most 25 MB, as base64


class TransferError(Refused):
    """The export cannot be imported here (nothing was written)."""

    code = "transfer_refused"


@dataclass(frozen=True)
class TransferResult:
    rows: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def bot_tables(tx: Tx) -> list[str]:
    """The bot's own tables present in this store (without the ledger), in name order."""
    names = sorted(bot_schema().tables - {LEDGER_TABLE})
    return [name for name in names if table_exists(tx, name)]


def table_columns(tx: Tx, table: str) -> list[str]:
    if tx.dialect == SQLITE:
        return [str(r["name"]) for r in tx.all("SELECT name FROM pragma_table_info(?)", (table,))]
    rows = tx.all(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = ? ORDER BY ordinal_position",
        (table,),
    )
    return [str(r["column_name"]) for r in rows]


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) != {"$bytes"}:
            raise TransferError('a value is an object other than {"$bytes": ...}')
        return base64.b64decode(value["$bytes"], validate=True)
    return value


def _ledger_marks(db: Database) -> dict[tuple[str, str, int, str], int]:
    """SQLite: the epoch ledger file's marks by (forge, repo, number, role)."""
    if not isinstance(db, SQLiteDatabase):
        return {}
    path = default_ledger_path(db.path)
    if not path.exists():
        return {}
    ledger = EpochLedger(path)
    try:
        rows = ledger.marks()
    finally:
        ledger.close()
    marks: dict[tuple[str, str, int, str], int] = {}
    for name, epoch in rows:
        head, role = str(name).rsplit("/", 1)
        where, number = head.rsplit("#", 1)
        forge, repo = where.split(":", 1)
        marks[(forge, repo, int(number), role)] = int(epoch)
    return marks


def export_lines(db: Database) -> Iterator[str]:
    """The store's bot tables as JSON lines (see the module docstring), from one snapshot."""
    applied = [r["file_name"] for r in migration_log(db)]
    marks = _ledger_marks(db)
    counts: dict[str, int] = {}
    yield _dump(
        {"format": FORMAT, "version": VERSION, "dialect": db.dialect, "migrations": applied}
    )
    with db.read() as tx:
        for table in bot_tables(tx):
            columns = table_columns(tx, table)
            order = ", ".join(c for c in ("id",) if c in columns) or ", ".join(columns[:1])
            n = 0
            for row in tx.all(f"SELECT * FROM {table} ORDER BY {order}"):
                item = {c: json_value(row[c]) for c in columns}
                if table == "lease_epochs":
                    key = (item["forge"], item["repo"], int(item["number"]), item["role"])
                    item["epoch"] = max(int(item["epoch"]), marks.pop(key, 0))
                yield _dump({"table": table, "row": item})
                n += 1
            if table == "lease_epochs":
                for (forge, repo, number, role), epoch in sorted(marks.items()):
                    row_ = {"forge": forge, "repo": repo, "number": number, "role": role}
                    yield _dump({"table": table, "row": {**row_, "epoch": epoch}})
                    n += 1
            counts[table] = n
    yield _dump({"end": True, "rows": counts})


def _dump(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def write_export(db: Database, out: TextIO) -> TransferResult:
    last = ""
    for line in export_lines(db):
        out.write(line)
        last = line
    return TransferResult(dict(json.loads(last)["rows"]))


def _parse(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_LINE_BYTES:
            raise TransferError(f"line {number} is longer than {MAX_LINE_BYTES} bytes")
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise TransferError(f"line {number} is not JSON ({exc})") from None
        if not isinstance(item, dict):
            raise TransferError(f"line {number} is not a JSON object")
        yield item


def import_lines(db: Database, lines: Iterable[str]) -> TransferResult:
    """Import an export into ``db`` (which must hold no rows in the bot's tables)."""
    items = _parse(lines)
    header = next(items, None)
    if header is None or header.get("format") != FORMAT:
        raise TransferError("not a reviewbot export (the first line is not its header)")
    if header.get("version") != VERSION:
        raise TransferError(f"export version {header.get('version')!r}; this build reads {VERSION}")
    counts: dict[str, int] = {}
    ended = False
    with db.write() as tx:
        tables = set(bot_tables(tx))
        for name in sorted(tables - {"health_probe"}):
            if tx.one(f"SELECT 1 FROM {name} LIMIT 1") is not None:
                raise TransferError(
                    f"the target store already holds rows in {name}; import into a new store"
                )
        columns = {t: set(table_columns(tx, t)) for t in tables}
        for item in items:
            if ended:
                raise TransferError("rows after the end of the export")
            if item.get("end") is True:
                declared = item.get("rows")
                if (
                    not isinstance(declared, dict)
                    or {t: n for t, n in declared.items() if n} != counts
                ):
                    raise TransferError(
                        f"the export's counts {item.get('rows')} differ from the rows read {counts}"
                    )
                ended = True
                continue
            table, row = item.get("table"), item.get("row")
            if not isinstance(table, str) or table not in tables or not isinstance(row, dict):
                raise TransferError(f"a row of an unknown table {table!r}")
            unknown = set(row) - columns[table]
            if unknown:
                raise TransferError(f"{table} has no columns {sorted(unknown)} in this store")
            # Only names this store has reach the SQL: the table and columns were checked.
            names = sorted(row)
            if table == "health_probe":
                tx.execute("DELETE FROM health_probe")
            marks = ", ".join("?" for _ in names)
            tx.execute(
                f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})",
                [_decode(row[c]) for c in names],
            )
            counts[table] = counts.get(table, 0) + 1
        if not ended:
            raise TransferError("the export is cut off (no end line); nothing was imported")
        if tx.dialect != SQLITE:
            _move_sequences(tx, tables, columns)
    return TransferResult(counts)


def _move_sequences(tx: Tx, tables: set[str], columns: dict[str, set[str]]) -> None:
    """PostgreSQL: the next generated id of each table comes after the imported ones."""
    for table in sorted(t for t in tables if "id" in columns[t]):
        seq = tx.one("SELECT pg_get_serial_sequence(?, 'id') AS s", (table,))
        if seq is None or seq["s"] is None:
            continue
        tx.execute(
            f"SELECT setval(?, COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)",
            (seq["s"],),
        )
