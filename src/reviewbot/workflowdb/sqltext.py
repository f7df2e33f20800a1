"""Reading SQL text the way SQLite's tokenizer does: quotes, identifiers and comments.

A ``;`` inside ``'...'``, ``"..."``, `````...`````, ``[...]``, ``-- ...`` or ``/* ... */`` does
not end a statement. SQLite has no backslash escapes (a quote is doubled instead) and its
block comments do not nest; this reader agrees, so a quoting trick cannot make it see a
different statement boundary than the engine does. An unterminated quote is an error here
rather than a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from reviewbot.core.errors import ReviewbotError


class SqlTextError(ReviewbotError, ValueError):
    """The text cannot be read as SQL (an unterminated quote or identifier)."""


class TokenKind(Enum):
    WORD = "word"  # a keyword or a bare identifier (also numbers)
    QUOTED_IDENT = "quoted_ident"  # "x", `x`, [x]
    STRING = "string"  # 'x'
    COMMENT = "comment"  # -- x, /* x */
    SPACE = "space"
    SEMICOLON = "semicolon"
    PUNCT = "punct"  # any other single character


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str
    start: int  # offset in the text that was tokenized

    @property
    def upper(self) -> str:
        """The keyword spelling of a bare word (empty for anything else)."""
        return self.text.upper() if self.kind is TokenKind.WORD else ""

    @property
    def name(self) -> str | None:
        """The identifier this token spells, if it can name a table or column."""
        if self.kind is TokenKind.WORD:
            return self.text
        if self.kind is TokenKind.QUOTED_IDENT:
            body = self.text[1:-1]
            if self.text[0] == '"':
                return body.replace('""', '"')
            if self.text[0] == "`":
                return body.replace("``", "`")
            return body  # [x]: no escapes
        if self.kind is TokenKind.STRING:  # SQLite accepts 'x' as a name in DDL
            return self.text[1:-1].replace("''", "'")
        return None


_CLOSERS = {"'": "'", '"': '"', "`": "`", "[": "]"}
_KINDS = {
    "'": TokenKind.STRING,
    '"': TokenKind.QUOTED_IDENT,
    "`": TokenKind.QUOTED_IDENT,
    "[": TokenKind.QUOTED_IDENT,
}


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_$" or ord(ch) >= 0x80


def line_of(text: str, offset: int) -> int:
    """1-based line number of ``offset``."""
    return text.count("\n", 0, offset) + 1


def tokenize(sql: str) -> list[Token]:
    """Every token of ``sql``; concatenating their texts gives ``sql`` back."""
    tokens: list[Token] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        start = i
        if ch in _CLOSERS:
            close = _CLOSERS[ch]
            j = i + 1
            while True:
                k = sql.find(close, j)
                if k < 0:
                    what = "string" if ch == "'" else "quoted identifier"
                    raise SqlTextError(
                        f"unterminated {what} starting at line {line_of(sql, i)}: "
                        f"{sql[i : i + 30].splitlines()[0]}"
                    )
                # A doubled quote is an escaped quote; [...] has no escapes.
                if ch != "[" and k + 1 < n and sql[k + 1] == close:
                    j = k + 2
                    continue
                i = k + 1
                break
            tokens.append(Token(_KINDS[ch], sql[start:i], start))
        elif sql.startswith("--", i):
            k = sql.find("\n", i)
            i = n if k < 0 else k  # the newline itself is whitespace
            tokens.append(Token(TokenKind.COMMENT, sql[start:i], start))
        elif sql.startswith("/*", i):
            k = sql.find("*/", i + 2)
            i = n if k < 0 else k + 2  # SQLite lets a block comment run to the end
            tokens.append(Token(TokenKind.COMMENT, sql[start:i], start))
        elif ch.isspace():
            while i < n and sql[i].isspace():
                i += 1
            tokens.append(Token(TokenKind.SPACE, sql[start:i], start))
        elif ch == ";":
            i += 1
            tokens.append(Token(TokenKind.SEMICOLON, ";", start))
        elif _is_word_char(ch):
            while i < n and _is_word_char(sql[i]):
                i += 1
            tokens.append(Token(TokenKind.WORD, sql[start:i], start))
        else:
            i += 1
            tokens.append(Token(TokenKind.PUNCT, ch, start))
    return tokens


def split_segments(sql: str) -> list[str]:
    """The text between top-level semicolons: ``";".join(split_segments(s)) == s``."""
    segments: list[str] = []
    last = 0
    for tok in tokenize(sql):
        if tok.kind is TokenKind.SEMICOLON:
            segments.append(sql[last : tok.start])
            last = tok.start + 1
    segments.append(sql[last:])
    return segments


@dataclass(frozen=True)
class Statement:
    """One statement as written (without its ``;``), with its place in the file."""

    number: int  # 1-based, in file order
    line: int  # line of its first code token
    text: str  # as written, surrounding whitespace removed, comments kept
    tokens: tuple[Token, ...] = field(repr=False)  # code tokens only (no space, no comments)

    @property
    def code(self) -> str:
        """The text from its first code token on (leading comments removed)."""
        first = self.tokens[0].start if self.tokens else 0
        return self.text[first:]

    @property
    def first_line(self) -> str:
        """The first line of code, for error messages."""
        lines = self.code.splitlines()
        return lines[0].strip() if lines else ""

    @property
    def words(self) -> tuple[str, ...]:
        """Upper-cased spelling of the leading bare words, up to the first other token."""
        out: list[str] = []
        for tok in self.tokens:
            if tok.kind is not TokenKind.WORD:
                break
            out.append(tok.upper)
        return tuple(out)


def split_statements(sql: str) -> list[Statement]:
    """The statements of ``sql``; pieces holding only whitespace or comments are dropped."""
    statements: list[Statement] = []
    offset = 0
    for segment in split_segments(sql):
        stripped = segment.strip()
        lead = len(segment) - len(segment.lstrip())
        seg_start = offset + lead
        offset += len(segment) + 1
        if not stripped:
            continue
        code = tuple(
            Token(t.kind, t.text, t.start)
            for t in tokenize(stripped)
            if t.kind not in (TokenKind.SPACE, TokenKind.COMMENT)
        )
        if not code:
            continue
        statements.append(
            Statement(
                number=len(statements) + 1,
                line=line_of(sql, seg_start + code[0].start),
                text=stripped,
                tokens=code,
            )
        )
    return statements


_BEGIN_FORMS = {("BEGIN",), ("BEGIN", "TRANSACTION"), ("BEGIN", "IMMEDIATE")}
_BEGIN_FORMS |= {("BEGIN", "IMMEDIATE", "TRANSACTION")}
_COMMIT_FORMS = {("COMMIT",), ("COMMIT", "TRANSACTION"), ("END",), ("END", "TRANSACTION")}


def _is_exactly(stmt: Statement, forms: set[tuple[str, ...]]) -> bool:
    return len(stmt.words) == len(stmt.tokens) and stmt.words in forms


def migration_statements(sql: str) -> list[Statement]:
    """The statements of a migration file, without the file's own transaction envelope.

    A leading ``BEGIN`` (``BEGIN TRANSACTION``, ``BEGIN IMMEDIATE``) and a trailing ``COMMIT``
    (``COMMIT TRANSACTION``, ``END``, ``END TRANSACTION``) are dropped: the engine runs the
    whole migration in its own transaction. Anywhere else they are ordinary statements
    (and the allow-list rejects them). Numbers stay those of the file.
    """
    statements = split_statements(sql)
    if statements and _is_exactly(statements[0], _BEGIN_FORMS):
        statements = statements[1:]
    if statements and _is_exactly(statements[-1], _COMMIT_FORMS):
        statements = statements[:-1]
    return statements
