"""One pull request's page: what the bot knows of it, in sections (pure, like
:mod:`.render`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reviewbot.core.lease_history import HistoryEntry
from reviewbot.core.merge import Readiness
from reviewbot.runtime.explain import PullFacts
from reviewbot.server.ui.markup import (
    Reader,
    badge,
    e,
    page,
    reasons,
    short,
    table,
    time_tag,
)
from reviewbot.server.ui.render import (
    leases_section,
    merges_section,
    pulls_section,
    runs_section,
)
from reviewbot.server.ui.wording import (
    gate_why,
    lease_why,
    merged_text,
    review_why,
)
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.reviews import ReviewDecision
from reviewbot.store.status import StatusSnapshot


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
    facts: PullFacts | None = None  # the records `explain` words, shown as sections
    lease_history: Sequence[HistoryEntry] = ()  # oldest first, as `explain` prints it
    # The merge-readiness answer over the PR's live facts, or why they were not read.
    readiness: Readiness | None = None
    readiness_unread: str = ""


def readiness_section(readiness: Readiness | None, unread: str = "") -> str:
    """May it be merged now: the one merge-readiness answer (the one ``MERGE_READY``,
    ``resolve_capability`` and a merge's refusal give), with every blocker."""
    if readiness is None:
        why = unread or "no forge is configured for it here"
        body = f'<p class="state unknown">Not read: {e(why)}</p>'
    elif readiness.ready:
        body = (
            f'<p class="state ok">{badge("merge_ready")} at '
            f"<code>{e(short(readiness.head))}</code>: the forge's rules allow a merge "
            "under the merger lease.</p>"
        )
    else:
        body = (
            f'<p class="state failing">{badge("not_merge_ready")} at '
            f"<code>{e(short(readiness.head))}</code></p>"
            + reasons((b.code.value, b.detail) for b in readiness.blockers)
            + f'<p class="detail">Next: {e(readiness.next_prompt())}</p>'
        )
    return (
        '<section id="merge-readiness"><h2>Merge readiness now</h2>'
        '<p class="note">Read live from the forge, judged as a merge at the head would be.</p>'
        f"{body}</section>"
    )


def gate_section(rows: Sequence[DecisionRecord], now: float) -> str:
    shown = table(
        ("when", "outcome", "why", "delivery"),
        [
            (
                time_tag(d.decided_at, now),
                badge(d.decision)
                + (f" at <code>{e(short(d.head_sha))}</code>" if d.head_sha else ""),
                gate_why(d),
                f"<code>{e(d.delivery_id)}</code>",
            )
            for d in rows
        ],
        "No gate decision recorded.",
    )
    return (
        '<section id="gate"><h2>Gate decisions</h2>'
        '<p class="note">May the bot act on an event about this pull request? Newest first.</p>'
        f"{shown}</section>"
    )


def reviews_section(rows: Sequence[ReviewDecision], now: float) -> str:
    shown = table(
        ("when", "verdict", "why", "delivery"),
        [
            (
                time_tag(r.decided_at, now),
                f"{badge(r.decision)} at <code>{e(short(r.head_sha))}</code>",
                review_why(r),
                f"<code>{e(r.delivery_id)}</code>" if r.delivery_id else "",
            )
            for r in rows
        ],
        "No review verdict recorded.",
    )
    return (
        '<section id="reviews"><h2>Review verdicts</h2>'
        '<p class="note">What the required checks said at each head, and what was posted. '
        f"Newest first.</p>{shown}</section>"
    )


def lease_history_section(rows: Sequence[HistoryEntry], now: float) -> str:
    shown = table(
        ("when", "event", "what", "by"),
        [
            (
                time_tag(x.at, now),
                f"{badge(x.event.value)} at <code>{e(short(x.head_sha))}</code>",
                lease_why(x),
                e(x.actor),
            )
            for x in rows
        ],
        "No lease history.",
    )
    return (
        '<section id="lease-history"><h2>Lease history</h2>'
        '<p class="note">Who held the reviewer and merger leases, and how each claim ended. '
        f"Oldest first.</p>{shown}</section>"
    )


def findings_section(facts: PullFacts) -> str:
    if not facts.findings or not facts.reviews:
        return ""
    head = short(facts.reviews[0].head_sha)
    items = "".join(
        f"<li>{badge(f.severity.value)} <code>{e(f.path)}:{e(f.line)}</code> {e(f.message)}</li>"
        for f in facts.findings
    )
    return (
        f'<section id="findings"><h2>External reviewers\' findings at <code>{e(head)}</code>'
        f'</h2><ul class="findings">{items}</ul></section>'
    )


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
    facts = view.facts
    merge = None if facts is None else facts.merge
    lead = ""
    if merge is not None:
        what = merged_text(merge["head_sha"], merge["merge_commit_sha"], merge["method"])
        lead = f"{what} by {e(merge['holder'])} under lease epoch {e(merge['epoch'])}."
    merges = merges_section(scoped, view.now, lead=lead)
    # A merged PR's merge comes first; an unmerged one's attempts after why it waits.
    parts = [
        f"<h1>{e(label)}</h1>",
        readiness_section(view.readiness, view.readiness_unread),
        pulls_section(scoped, "Verdict now"),
    ]
    parts += [merges] if lead else []
    if facts is not None:
        parts += [
            reviews_section(facts.reviews, view.now),
            gate_section(facts.decisions, view.now),
        ]
    parts += [] if lead else [merges]
    parts.append(leases_section(scoped, view.now))
    if facts is not None:
        parts += [lease_history_section(view.lease_history, view.now), findings_section(facts)]
    parts += [
        runs_section(scoped, view.now),
        # The same records as the command prints them, to paste into an issue.
        '<section id="explain"><h2>As text</h2><details><summary>What '
        f"<code>reviewbot explain {e(label)}</code> prints</summary>"
        f"<pre>{e(view.explanation)}</pre></details></section>",
    ]
    return page(f"{label} · reviewbot", "".join(parts), view.reader, view.csrf)
