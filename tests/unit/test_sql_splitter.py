"""Splitting SQL text into statements the way SQLite reads it."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reviewbot.workflowdb.sqltext import (
    SqlTextError,
    migration_statements,
    split_segments,
    split_statements,
)


def texts(sql: str) -> list[str]:
    return [s.text for s in split_statements(sql)]


# --- examples ------------------------------------------------------------------------------


def test_splits_on_top_level_semicolons_and_keeps_text() -> None:
    sql = "CREATE TABLE IF NOT EXISTS a (x);\n  DROP TABLE IF EXISTS b ;\n"
    assert texts(sql) == ["CREATE TABLE IF NOT EXISTS a (x)", "DROP TABLE IF EXISTS b"]


@pytest.mark.parametrize(
    "inner",
    [
        "'a;b'",
        "'it''s; fine'",
        '"odd;name"',
        '"say ""hi""; there"',
        "`odd;name`",
        "[odd;name]",
        "/* a; b */",
        "-- a; b\n",
        "/* -- ; */",
        "-- /* ;\n",
        "'--;'",
        "'/*;'",
    ],
)
def test_semicolon_inside_literal_or_comment_does_not_split(inner: str) -> None:
    sql = f"SELECT {inner} AS v; SELECT 2"
    got = texts(sql)
    assert len(got) == 2
    assert inner.strip() in got[0]
    assert got[1] == "SELECT 2"


def test_backslash_is_not_an_escape() -> None:
    # SQLite reads 'x\' as a whole string, so the PRAGMA is a statement of its own.
    sql = "CREATE TABLE IF NOT EXISTS t (a TEXT DEFAULT 'x\\'); PRAGMA foreign_keys = OFF; --')"
    got = split_statements(sql)
    assert [s.words[0] for s in got] == ["CREATE", "PRAGMA"]
    assert sqlite3.complete_statement(got[0].text + ";")


def test_block_comments_do_not_nest() -> None:
    got = texts("/* a /* b */ SELECT 1; SELECT 2")
    assert len(got) == 2
    assert got[0].endswith("SELECT 1")


def test_unterminated_block_comment_runs_to_the_end() -> None:
    assert texts("SELECT 1; /* ; PRAGMA x") == ["SELECT 1"]


@pytest.mark.parametrize(
    "sql", ["SELECT 'abc; PRAGMA x", 'SELECT "abc', "SELECT [abc", "SELECT `a"]
)
def test_unterminated_quote_is_an_error(sql: str) -> None:
    with pytest.raises(SqlTextError, match="unterminated"):
        split_statements(sql)


def test_comment_only_pieces_are_not_statements() -> None:
    assert texts("-- header\n;;  /* nothing */ ; SELECT 1; -- trailer") == ["SELECT 1"]


def test_kind_is_read_after_leading_comments() -> None:
    (stmt,) = split_statements("-- why\n/* more */\n  pragma foreign_keys = OFF")
    assert stmt.words[0] == "PRAGMA"
    assert stmt.first_line == "pragma foreign_keys = OFF"
    assert stmt.line == 3
    assert stmt.text.startswith("-- why")


def test_statement_numbers_and_lines_follow_the_file() -> None:
    sql = "SELECT 1;\n\n-- c\nSELECT 2;\nSELECT\n  3"
    got = split_statements(sql)
    assert [(s.number, s.line) for s in got] == [(1, 1), (2, 4), (3, 5)]


@pytest.mark.parametrize(
    ("begin", "end"),
    [
        ("BEGIN", "COMMIT"),
        ("begin transaction", "commit transaction"),
        ("BEGIN IMMEDIATE", "END"),
        ("Begin Immediate Transaction", "END TRANSACTION"),
    ],
)
def test_migration_envelope_is_dropped(begin: str, end: str) -> None:
    sql = f"{begin};\nCREATE TABLE IF NOT EXISTS a (x);\n{end};\n"
    got = migration_statements(sql)
    assert [s.text for s in got] == ["CREATE TABLE IF NOT EXISTS a (x)"]
    assert got[0].number == 2  # numbers stay those of the file


def test_begin_or_commit_inside_the_migration_is_kept() -> None:
    sql = "CREATE TABLE IF NOT EXISTS a (x); COMMIT; CREATE TABLE IF NOT EXISTS b (y)"
    assert [s.words[0] for s in migration_statements(sql)] == ["CREATE", "COMMIT", "CREATE"]


def test_begin_deferred_or_exclusive_is_not_an_envelope() -> None:
    got = migration_statements("BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS a (x); COMMIT")
    assert got[0].words == ("BEGIN", "EXCLUSIVE")


# --- properties -------------------------------------------------------------------------------

_free = st.text(alphabet="abc;'\"`[]-*/ \n\\", max_size=12)
_word = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
_string = _free.map(lambda s: "'" + s.replace("'", "''") + "'")
_dquoted = _free.map(lambda s: '"' + s.replace('"', '""') + '"')
_backquoted = _free.map(lambda s: "`" + s.replace("`", "``") + "`")
_bracketed = _free.map(lambda s: "[" + s.replace("]", "") + "]")
_line_comment = _free.map(lambda s: "--" + s.replace("\n", " ") + "\n")
_block_comment = _free.map(lambda s: "/*" + s.replace("*/", "* /") + "*/")
_punct = st.sampled_from(["(", ")", ",", ".", "=", "+", "?", "1", "\n", "\t"])
_literal = st.one_of(_string, _dquoted, _backquoted, _bracketed, _line_comment, _block_comment)
_statement = st.tuples(_word, st.lists(st.one_of(_word, _literal, _punct), max_size=8)).map(
    lambda t: " ".join([t[0], *t[1]])
)


@given(st.lists(_statement, min_size=1, max_size=6))
def test_split_then_join_gives_back_the_statements(statements: list[str]) -> None:
    sql = ";".join(statements)
    assert split_segments(sql) == statements
    assert texts(sql) == [s.strip() for s in statements]
    assert ";".join(split_segments(sql)) == sql


@given(_literal, _word, _word)
def test_no_split_inside_a_literal_or_comment(literal: str, before: str, after: str) -> None:
    sql = f"{before} {literal} {after}"
    assert split_segments(sql) == [sql]


@given(st.text(max_size=60))
def test_segments_always_join_back_to_the_input(sql: str) -> None:
    try:
        segments = split_segments(sql)
    except SqlTextError:
        return
    assert ";".join(segments) == sql


@given(st.lists(_statement, min_size=1, max_size=4))
def test_sqlite_agrees_on_statement_ends(statements: list[str]) -> None:
    for text in texts(";".join(statements)):
        # Every quote and comment the splitter saw closed, SQLite sees closed too.
        assert sqlite3.complete_statement(text + "\n;")
