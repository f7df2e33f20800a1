"""The building blocks of the status page's HTML: escaping, links, times, tables, the frame.

Every value that came from a forge, a caller or the store goes through :func:`e` (HTML
escaping, quotes included), and every path segment of a link through :func:`pr_href`, so a
PR, branch or check named ``<script>`` is shown as text. Cells handed to :func:`table` are
already escaped.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from reviewbot.core.clock import iso
from reviewbot.runtime.explain import PLAIN_WORDS
from reviewbot.store.status import StatusSnapshot

STYLESHEET = "/ui/style.css"


def e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


@dataclass(frozen=True)
class Reader:
    """Who is looking: the token's name and its repository binding (None: every one)."""

    name: str
    repo: str | None


def pr_href(forge: str, repo: str, number: int) -> str:
    owner, _, name = repo.partition("/")
    parts = (quote(p, safe="") for p in (forge, owner, name, str(number)))
    return "/pr/" + "/".join(parts)


def short(sha: str | None) -> str:
    return (sha or "")[:12]


def ago(moment: float, now: float) -> str:
    seconds = now - moment
    when = "ago" if seconds >= 0 else "from now"
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s {when}"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min {when}"
    return f"{seconds / 3600:.1f} h {when}"


def time_tag(moment: float, now: float) -> str:
    text = iso(moment)
    return f'<time datetime="{e(text)}" title="{e(text)}">{e(ago(moment, now))}</time>'


def page(title: str, body: str, reader: Reader | None = None, csrf: str = "") -> str:
    who = ""
    if reader is not None:
        bound = f" (only {e(reader.repo)})" if reader.repo else ""
        who = (
            f'<span class="who">signed in as {e(reader.name)}{bound}</span>'
            '<form method="post" action="/logout" class="inline">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            '<button type="submit">Sign out</button></form>'
        )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{e(title)}</title><link rel="stylesheet" href="{STYLESHEET}"></head>'
        f'<body><header><a class="home" href="/">reviewbot</a>{who}</header>'
        f"<main>{body}</main></body></html>\n"
    )


def table(headings: Sequence[str], rows: Iterable[Sequence[str]], empty: str) -> str:
    """A table of already-escaped cells (or the ``empty`` sentence)."""
    # Each cell names its column, so a narrow screen shows a row as a labelled card.
    body = "".join(
        "<tr>"
        + "".join(f'<td data-label="{e(h)}">{c}</td>' for h, c in zip(headings, row, strict=True))
        + "</tr>"
        for row in rows
    )
    if not body:
        return f'<p class="empty">{e(empty)}</p>'
    head = "".join(f"<th>{e(h)}</th>" for h in headings)
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="scroll">{table}</div>'


def pr_link(snapshot: StatusSnapshot, forge: str, repo: str, number: int) -> str:
    label = f"{forge}:{snapshot.name(forge, repo)}#{number}"
    return f'<a href="{e(pr_href(forge, repo, number))}">{e(label)}</a>'


def badge(word: str | None) -> str:
    """An outcome as a coloured word; the class keeps the code, the text reads as words."""
    if not word:
        return '<span class="badge">none</span>'
    return f'<span class="badge {e(word)}">{e(word.replace("_", " "))}</span>'


def plain(code: str) -> str:
    """What a reason code means, in the words ``reviewbot explain`` uses."""
    return PLAIN_WORDS.get(code, code.replace("_", " "))


def reasons(codes: Iterable[tuple[str, str]], outcome: str = "") -> str:
    """Each reason in plain words, then its code (unless it only repeats ``outcome``, as
    ``eligible`` does) and its detail."""
    items = "".join(
        f"<li>{e(plain(code))}"
        + (f" <code>{e(code)}</code>" if code != outcome else "")
        + (f'<br><span class="detail">{e(detail)}</span>' if detail else "")
        + "</li>"
        for code, detail in codes
    )
    return f'<ul class="reasons">{items}</ul>'


CHECK_STATES = ("failed", "missing", "pending")


def checks(failed: Sequence[str], missing: Sequence[str], pending: Sequence[str]) -> str:
    """The required checks that stand in the way, by state (empty when none does)."""
    parts = [
        f'<span class="check {state}">{state}: '
        + ", ".join(f"<code>{e(name)}</code>" for name in names)
        + "</span>"
        for state, names in zip(CHECK_STATES, (failed, missing, pending), strict=True)
        if names
    ]
    return f'<p class="checks">{"; ".join(parts)}</p>' if parts else ""


def says_only_checks(
    detail: str, failed: Sequence[str], missing: Sequence[str], pending: Sequence[str]
) -> bool:
    """Whether ``detail`` only lists checks :func:`checks` shows (as the review's
    ``failed: ci/test`` does), so showing both would say it twice."""
    listed = {
        f"{state}: {', '.join(names)}"
        for state, names in zip(CHECK_STATES, (failed, missing, pending), strict=True)
        if names
    }
    return bool(detail) and set(detail.split("; ")) <= listed
