"""The status page as HTML: pure functions from plain data to text (no I/O, no clock).

Every value that came from a forge, a caller or the store goes through :func:`e` (HTML
escaping, quotes included), and every path segment of a link through :func:`pr_href`, so a
PR, branch or check named ``<script>`` is shown as text. The page has no script at all and
one stylesheet (``/ui/style.css``), which the Content-Security-Policy allows alone.
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
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Reader:
    """Who is looking: the token's name and its repository binding (None: every one)."""

    name: str
    repo: str | None


@dataclass(frozen=True)
class StatusView:
    reader: Reader
    checks: Sequence[Check]
    snapshot: StatusSnapshot
    now: float
    csrf: str
    repo_filter: str = ""


@dataclass(frozen=True)
class PullView:
    reader: Reader
    forge: str
    repo: str  # the canonical key
    number: int
    explanation: str  # what `reviewbot explain FORGE:OWNER/REPO#N` prints
    snapshot: StatusSnapshot  # scoped to the repository; this PR's rows are picked here
    now: float
    csrf: str


def pr_href(forge: str, repo: str, number: int) -> str:
    owner, _, name = repo.partition("/")
    parts = (quote(p, safe="") for p in (forge, owner, name, str(number)))
    return "/pr/" + "/".join(parts)


def short(sha: str | None) -> str:
    return (sha or "")[:12]


def _ago(moment: float, now: float) -> str:
    seconds = now - moment
    when = "ago" if seconds >= 0 else "from now"
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s {when}"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min {when}"
    return f"{seconds / 3600:.1f} h {when}"


def _time(moment: float, now: float) -> str:
    text = iso(moment)
    return f'<time datetime="{e(text)}" title="{e(text)}">{e(_ago(moment, now))}</time>'


def _page(title: str, body: str, reader: Reader | None = None, csrf: str = "") -> str:
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


def _table(headings: Sequence[str], rows: Iterable[Sequence[str]], empty: str) -> str:
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


def _pr(snapshot: StatusSnapshot, forge: str, repo: str, number: int) -> str:
    label = f"{forge}:{snapshot.name(forge, repo)}#{number}"
    return f'<a href="{e(pr_href(forge, repo, number))}">{e(label)}</a>'


def _badge(word: str | None) -> str:
    if not word:
        return '<span class="badge">none</span>'
    return f'<span class="badge {e(word)}">{e(word)}</span>'


def _reasons(codes: Iterable[tuple[str, str]]) -> str:
    items = "".join(
        f"<li><code>{e(code)}</code> {e(PLAIN_WORDS.get(code, ''))}"
        + (f'<br><span class="detail">{e(detail)}</span>' if detail else "")
        + "</li>"
        for code, detail in codes
    )
    return f'<ul class="reasons">{items}</ul>'


def health_section(checks: Sequence[Check]) -> str:
    ready = all(c.ok for c in checks)
    state = "ready" if ready else "not ready: " + ", ".join(c.name for c in checks if not c.ok)
    rows = [(_badge("ok" if c.ok else "failing"), e(c.name), e(c.detail)) for c in checks]
    return (
        f'<section id="health"><h2>Health</h2><p class="state {"ok" if ready else "failing"}">'
        f"Serving; {e(state)}</p>{_table(('state', 'check', 'detail'), rows, 'No checks ran.')}"
        "</section>"
    )


def queue_section(snapshot: StatusSnapshot, now: float) -> str:
    queue = snapshot.queue
    counts = ", ".join(f"{e(n)} {e(status)}" for status, n in sorted(queue.counts.items()))
    oldest = "Nothing is waiting to be gated."
    if queue.oldest_at is not None:
        which = f" ({e(queue.oldest_id)}, {e(queue.oldest_source)})" if queue.oldest_id else ""
        oldest = f"The oldest waiting delivery{which} arrived {_time(queue.oldest_at, now)}."
    return (
        '<section id="queue"><h2>Queue</h2>'
        f"<p>Deliveries: {counts or 'none yet'}.</p><p>{oldest}</p>"
        f"<p>Review jobs waiting: {e(queue.jobs_pending)}.</p></section>"
    )


def pulls_section(snapshot: StatusSnapshot) -> str:
    rows = [
        (
            _pr(snapshot, p.forge, p.repo, p.number),
            f"<code>{e(short(p.verdict_head or p.head_sha))}</code>",
            _badge(p.verdict) + (" " + _badge("merged") if p.merged else ""),
            _badge(p.gate) + " " + e(", ".join(p.gate_reasons)),
        )
        for p in snapshot.pulls
    ]
    table = _table(("pull request", "head", "verdict", "last gate"), rows, "No pull request yet.")
    return f'<section id="pulls"><h2>Pull requests</h2>{table}</section>'


def decisions_section(snapshot: StatusSnapshot, now: float) -> str:
    rows = [
        (
            _time(d.decided_at, now),
            _pr(snapshot, d.forge, d.repo, d.number)
            if d.forge and d.repo and d.number is not None
            else e(d.source),
            f"{_badge(d.decision)} <code>{e(short(d.head_sha))}</code>",
            _reasons((r.code, r.detail) for r in d.reasons),
        )
        for d in snapshot.decisions
    ]
    table = _table(("when", "about", "decision", "reasons"), rows, "No decision yet.")
    return f'<section id="decisions"><h2>Recent decisions</h2>{table}</section>'


def leases_section(snapshot: StatusSnapshot, now: float) -> str:
    rows = [
        (
            _pr(snapshot, x.forge, x.repo, x.number),
            e(x.role),
            e(x.holder),
            e(x.epoch),
            f"<code>{e(short(x.head_sha))}</code>",
            _time(x.expires_at, now),
        )
        for x in snapshot.leases
    ]
    heads = ("pull request", "role", "holder", "epoch", "head", "expires")
    table = _table(heads, rows, "No live lease.")
    return f'<section id="leases"><h2>Live leases</h2>{table}</section>'


def merges_section(snapshot: StatusSnapshot, now: float) -> str:
    rows = [
        (
            _time(m.started_at, now),
            _pr(snapshot, m.forge, m.repo, m.number),
            f"{_badge(m.status)} <code>{e(short(m.head_sha))}</code>",
            e(m.method),
            f"{e(m.holder)} (epoch {e(m.epoch)})",
            _reasons((code, m.detail if i == 0 else "") for i, code in enumerate(m.codes))
            if m.codes
            else e(m.detail),
        )
        for m in snapshot.merges
    ]
    heads = ("when", "pull request", "outcome", "method", "by", "why")
    table = _table(heads, rows, "No merge yet.")
    return f'<section id="merges"><h2>Recent merges</h2>{table}</section>'


def runs_section(snapshot: StatusSnapshot, now: float) -> str:
    rows = [
        (
            _time(r.ran_at, now),
            _pr(snapshot, r.forge, r.repo, r.number),
            f"<code>{e(short(r.head_sha))}</code> round {e(r.round)}",
            e(r.run_id),
            e(r.findings),
        )
        for r in snapshot.runs
    ]
    heads = ("when", "pull request", "head", "run", "findings")
    table = _table(heads, rows, "No external reviewer ran.")
    return f'<section id="runs"><h2>Reviewer runs</h2>{table}</section>'


def render_status(view: StatusView) -> str:
    snap, now = view.snapshot, view.now
    locked = view.reader.repo is not None
    filter_form = (
        '<form class="filter" method="get" action="/"><label for="repo">Repository</label>'
        f'<input id="repo" name="repo" value="{e(view.repo_filter or view.reader.repo or "")}"'
        f' placeholder="FORGE:OWNER/NAME"{" readonly" if locked else ""}>'
        '<button type="submit">Filter</button><a href="/">all</a></form>'
    )
    body = "".join(
        [
            "<h1>Status</h1>",
            health_section(view.checks),
            queue_section(snap, now),
            filter_form,
            pulls_section(snap),
            decisions_section(snap, now),
            leases_section(snap, now),
            merges_section(snap, now),
            runs_section(snap, now),
        ]
    )
    return _page("reviewbot status", body, view.reader, view.csrf)


def render_pull(view: PullView) -> str:
    snap, n = view.snapshot, view.number
    label = f"{view.forge}:{snap.name(view.forge, view.repo)}#{n}"

    scoped = StatusSnapshot(
        queue=snap.queue,
        pulls=[p for p in snap.pulls if p.number == n],
        leases=[x for x in snap.leases if x.number == n],
        merges=[m for m in snap.merges if m.number == n],
        runs=[r for r in snap.runs if r.number == n],
        display=snap.display,
    )
    body = "".join(
        [
            f"<h1>{e(label)}</h1>",
            pulls_section(scoped),
            leases_section(scoped, view.now),
            merges_section(scoped, view.now),
            runs_section(scoped, view.now),
            '<section id="explain"><h2>Explanation</h2>'
            f"<p>What <code>reviewbot explain {e(label)}</code> says:</p>"
            f"<pre>{e(view.explanation)}</pre></section>",
        ]
    )
    return _page(f"{label} · reviewbot", body, view.reader, view.csrf)


def render_error(code: str, detail: str, reader: Reader | None, csrf: str) -> str:
    body = (
        f'<h1>Not shown</h1><p class="error" role="alert">{e(detail)} (<code>{e(code)}</code>)'
        '</p><p><a href="/">Back to the status page</a></p>'
    )
    return _page("Not shown · reviewbot", body, reader, csrf)


def render_login(csrf: str, *, message: str = "", link: str = "") -> str:
    note = f'<p class="error" role="alert">{e(message)}</p>' if message else ""
    if link:
        fields = (
            f'<input type="hidden" name="link" value="{e(link)}">'
            "<p>This sign-in link opens the status page in this browser.</p>"
            '<button type="submit">Open the status page</button>'
        )
    else:
        fields = (
            '<label for="token">Token with the <code>read</code> scope</label>'
            '<input id="token" name="token" type="password" autocomplete="off" required>'
            '<button type="submit">Sign in</button>'
        )
    body = (
        f"<h1>Sign in</h1>{note}"
        '<form method="post" action="/login" class="login">'
        f'<input type="hidden" name="csrf" value="{e(csrf)}">{fields}</form>'
        "<p>Create a token with <code>reviewbot token create --name NAME --scopes read</code>"
        " or a sign-in link with <code>reviewbot token link NAME</code>.</p>"
    )
    return _page("Sign in · reviewbot", body)
