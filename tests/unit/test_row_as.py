"""row_as: columns become dataclass fields by name; conversions only where named."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import pytest

from reviewbot.store.database import row_as, rows_as


@dataclass(frozen=True)
class Thing:
    id: int
    name: str
    tags: tuple[str, ...]
    seen_at: float | None = None


def _rows(sql: str) -> list[sqlite3.Row]:
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    return list(conn.execute(sql).fetchall())


def test_fields_by_name_extra_columns_ignored_and_conversions_applied() -> None:
    (row,) = _rows("SELECT 'a,b' AS tags, 'x' AS name, 7 AS id, 'joined' AS other")
    thing = row_as(Thing, row, tags=lambda r: tuple(r["tags"].split(",")))
    assert thing == Thing(7, "x", ("a", "b"))  # seen_at: no column, its default


def test_rows_as_keeps_the_order() -> None:
    rows = _rows("SELECT 1 AS id, 'a' AS name, 1.5 AS seen_at UNION ALL SELECT 2, 'b', NULL")
    things = rows_as(Thing, rows, tags=lambda r: ())
    assert [(t.id, t.name, t.seen_at) for t in things] == [(1, "a", 1.5), (2, "b", None)]


def test_a_field_with_neither_column_nor_conversion_nor_default_fails() -> None:
    (row,) = _rows("SELECT 1 AS id, 'a' AS name")
    with pytest.raises(TypeError):
        row_as(Thing, row)
