"""Rendering the status page: pure functions from plain rows to HTML."""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser

import pytest

from reviewbot.core.findings import Finding, Severity
from reviewbot.core.lease_history import HistoryEntry, LeaseEvent
from reviewbot.core.leases import LeaseTarget, Role
from reviewbot.core.models import PullRef, Reason
from reviewbot.runtime.explain import PullFacts
from reviewbot.server.ui import markup, pr_page, render
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.reviews import ReviewDecision
from reviewbot.store.status import (
    Activity,
    LeaseRow,
    MergeRow,
    PullRow,
    QueueState,
    RunRow,
    StatusSnapshot,
)

NOW = 1_800_000_000.0
XSS = "<script>alert('x')</script>\"'&"
HEAD = "a" * 40


def review(
    decision: str, code: str, *, failed: tuple[str, ...] = (), at: float = NOW
) -> ReviewDecision:
    return ReviewDecision(
        id=1,
        forge="gitea",
        repo="acme/api",
        number=7,
        head_sha=HEAD,
        decision=decision,
        reason_code=code,
        detail=f"{', '.join(failed)} failed" if failed else "",
        blockers=(),
        pending=(),
        missing=("ci/lint",) if failed else (),
        failed=failed,
        delivery_id="del-review",
        source="gitea",
        worker=None,
        epoch=None,
        outbox_id=None,
        decided_at=at,
    )


def lease_entry(event: LeaseEvent, reason: str = "", holder: str = "worker-1") -> HistoryEntry:
    target = LeaseTarget("gitea", "acme/api", 7, Role.MERGER)
    return HistoryEntry(target, event, holder, 4, HEAD, NOW - 3, reason=reason, actor="reviewbot")


def with_activity(snap: StatusSnapshot) -> StatusSnapshot:
    """``snap`` with its timeline: its decisions and merges, a review and a lease event."""
    rows = [
        *(Activity("gate", d.decided_at, d.forge, d.repo, d.number, d) for d in snap.decisions),
        *(Activity("merge", m.started_at, m.forge, m.repo, m.number, m) for m in snap.merges),
        Activity("review", NOW - 8, "gitea", "acme/api", 7, review("approve", "checks_passed")),
        Activity(
            "lease", NOW - 3, "gitea", "acme/api", 7, lease_entry(LeaseEvent.RELEASED, "merged")
        ),
    ]
    rows.sort(key=lambda a: a.at, reverse=True)
    return StatusSnapshot(
        queue=snap.queue,
        decisions=snap.decisions,
        pulls=snap.pulls,
        leases=snap.leases,
        merges=snap.merges,
        runs=snap.runs,
        display=snap.display,
        activity=rows,
    )


def snapshot(text: str = "plain", *, queue_id: str | None = "d-1") -> StatusSnapshot:
    """One row of every kind, each text field carrying ``text``."""
    return with_activity(_rows(text, queue_id))


def _rows(text: str, queue_id: str | None) -> StatusSnapshot:
    repo = "acme/api"
    return StatusSnapshot(
        queue=QueueState(
            counts={"queued": 2, "done": 5},
            oldest_at=NOW - 60,
            oldest_id=queue_id,
            oldest_source="gitea" if queue_id else None,
            jobs_pending=1,
        ),
        decisions=[
            DecisionRecord(
                delivery_id=f"del-{text}",
                source="gitea",
                decision="skip",
                reasons=(Reason("skip_label", f"label {text}"), Reason("pr_draft", "")),
                decided_at=NOW - 10,
                forge="gitea",
                repo=repo,
                number=7,
                head_sha=HEAD,
                event="pull_request",
                action="opened",
            ),
            DecisionRecord(
                delivery_id="del-2",
                source=f"crew {text}",
                decision="error",
                reasons=(Reason("delivery_unresolved", f"number: {text}"),),
                decided_at=NOW - 9,
            ),
        ],
        pulls=[
            PullRow(
                "gitea",
                repo,
                f"Acme/{text}",
                7,
                HEAD,
                "eligible",
                ("eligible",),
                NOW - 10,
                "approve",
                "checks_passed",
                HEAD,
                False,
            )
        ],
        leases=[LeaseRow("gitea", repo, 7, "merger", f"worker {text}", 4, HEAD, NOW + 90)],
        merges=[
            MergeRow(
                "gitea",
                repo,
                7,
                HEAD,
                "refused",
                ("not_approved",),
                f"merge {text}",
                "squash",
                f"worker {text}",
                4,
                NOW - 30,
            )
        ],
        runs=[RunRow("gitea", repo, 7, HEAD, 0, f"run {text}", 3, NOW - 5)],
        display={("gitea", repo): f"Acme/{text}"},
    )


def view(snap: StatusSnapshot, reader: markup.Reader | None = None) -> render.StatusView:
    checks = [render.Check("store_writable", True, "a write committed")]
    return render.StatusView(
        reader=reader or markup.Reader("dashboard", None),
        checks=checks,
        snapshot=snap,
        now=NOW,
        csrf="csrf-value",
    )


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs


def parsed(text: str) -> Tags:
    tags = Tags()
    tags.feed(text)
    return tags


def test_every_part_of_the_page_shows_its_rows() -> None:
    text = render.render_status(view(snapshot()))
    for section in ("health", "queue", "pulls", "decisions", "leases", "merges", "runs"):
        assert f'<section id="{section}">' in text
    assert "Serving; ready" in text
    assert "2 queued" in text and "5 done" in text and "(d-1, gitea)" in text
    assert "Review jobs waiting: 1." in text
    assert '<a href="/pr/gitea/acme/api/7">gitea:Acme/plain#7</a>' in text
    assert "label plain" in text and "skip_label" in text and "pr_draft" in text
    assert "the pull request is a draft" in text  # the words explain uses
    assert "worker plain" in text and '<td data-label="epoch">4</td>' in text
    assert "90 s from now" in text
    assert "run plain" in text and "not_approved" in text and "merge plain" in text
    assert "crew plain" in text  # a decision about no PR names its source


def test_a_reader_who_sees_one_repository_is_told_so_and_gets_no_delivery_id() -> None:
    reader = markup.Reader("bound", "gitea:acme/api")
    text = render.render_status(view(snapshot(queue_id=None), reader))
    assert "(only gitea:acme/api)" in text
    assert 'value="gitea:acme/api" placeholder="FORGE:OWNER/NAME" readonly' in text
    assert "The oldest waiting delivery arrived" in text and "d-1" not in text


def test_empty_lists_say_so() -> None:
    snap = StatusSnapshot(queue=QueueState({}, None, None, None, 0))
    text = render.render_status(view(snap))
    for sentence in (
        "No pull request yet.",
        "No decision yet.",
        "No live lease.",
        "No merge yet.",
        "No external reviewer ran.",
        "Nothing is waiting to be gated.",
    ):
        assert sentence in text


def test_a_failing_check_is_named() -> None:
    v = view(snapshot())
    failing = render.StatusView(
        reader=v.reader,
        checks=[*v.checks, render.Check("queue_age", False, "300 s old")],
        snapshot=v.snapshot,
        now=NOW,
        csrf="c",
    )
    assert "not ready: queue_age" in render.render_status(failing)


@pytest.mark.parametrize("page", ["status", "pull", "login", "error"])
def test_text_from_the_forge_or_a_caller_is_never_markup(page: str) -> None:
    snap = snapshot(XSS)
    reader = markup.Reader(XSS, f"gitea:{XSS}")
    if page == "status":
        text = render.render_status(view(snap, reader))
    elif page == "pull":
        text = pr_page.render_pull(
            pr_page.PullView(reader, "gitea", "acme/api", 7, f"explained {XSS}", snap, NOW, XSS)
        )
    elif page == "login":
        text = render.render_login(XSS, message=XSS, link=XSS)
    else:
        text = render.render_error("code", XSS, reader, XSS)
    tags = parsed(text)
    assert "script" not in tags.tags
    assert not any(name.startswith("on") for name, _ in tags.attrs)
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&quot;&#x27;&amp;" in text
    assert set(tags.tags) <= {
        "html",
        "head",
        "meta",
        "title",
        "link",
        "body",
        "header",
        "main",
        "a",
        "span",
        "form",
        "input",
        "button",
        "h1",
        "h2",
        "p",
        "section",
        "div",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "code",
        "ul",
        "li",
        "br",
        "time",
        "pre",
        "label",
        "details",
        "summary",
    }


def test_pr_links_quote_every_segment() -> None:
    assert markup.pr_href("gitea", "acme/api", 3) == "/pr/gitea/acme/api/3"
    assert markup.pr_href("gitea", "a?b/..", 3) == "/pr/gitea/a%3Fb/../3"
    assert markup.pr_href("gitea", 'x"y/<z>', 1) == "/pr/gitea/x%22y/%3Cz%3E/1"


def test_the_pull_page_shows_only_that_pulls_rows_and_the_explanation() -> None:
    snap = snapshot()
    other = LeaseRow("gitea", "acme/api", 8, "reviewer", "someone-else", 1, HEAD, NOW + 5)
    snap = StatusSnapshot(
        queue=snap.queue,
        pulls=snap.pulls,
        leases=[*snap.leases, other],
        merges=snap.merges,
        runs=snap.runs,
        display=snap.display,
    )
    reader = markup.Reader("r", None)
    text = pr_page.render_pull(
        pr_page.PullView(reader, "gitea", "acme/api", 7, "line one\nline two", snap, NOW, "c")
    )
    assert "<h1>gitea:Acme/plain#7</h1>" in text
    assert "worker plain" in text and "someone-else" not in text
    assert "<pre>line one\nline two</pre>" in text
    assert "reviewbot explain gitea:Acme/plain#7" in text


def pull_row(**changes: object) -> PullRow:
    row = PullRow(
        "gitea",
        "acme/api",
        "acme/api",
        7,
        HEAD,
        "eligible",
        ("eligible",),
        NOW - 20,
        None,
        None,
        None,
        False,
        gate_details=("",),
    )
    return replace(row, **changes)  # type: ignore[arg-type]


def cells(text: str, section: str) -> str:
    """The visible text of one section, tags dropped and spaces collapsed."""
    part = text.split(f'<section id="{section}">', 1)[1].split("</section>", 1)[0]
    return " ".join(re.sub(r"<[^>]+>", " ", part).split())


def test_a_rejected_pull_shows_its_verdict_the_reason_and_the_failing_check() -> None:
    rejected = pull_row(
        verdict="request_changes",
        verdict_reason="checks_failed",
        verdict_detail="failed: ci/test",
        verdict_head=HEAD,
        verdict_at=NOW - 5,
        failed=("ci/test",),
        missing=("ci/lint",),
    )
    snap = replace(_rows("plain", "d-1"), pulls=[rejected])
    shown = cells(render.render_status(view(snap)), "pulls")
    assert "request changes" in shown and "a required check failed checks_failed" in shown
    assert "failed: ci/test" in shown and "missing: ci/lint" in shown
    assert shown.count("ci/test") == 1  # the detail only listed it: said once
    assert "eligible" not in shown  # the gate let it through; the verdict is what counts


def test_a_newer_gate_skip_that_blocks_the_pull_is_its_verdict_and_noise_is_not() -> None:
    reviewed = {"verdict": "approve", "verdict_reason": "checks_passed", "verdict_at": NOW - 30}
    draft = pull_row(gate="skip", gate_reasons=("pr_draft",), gate_details=("",), **reviewed)
    shown = cells(render.render_status(view(replace(_rows("p", None), pulls=[draft]))), "pulls")
    assert "skip the pull request is a draft pr_draft" in shown and "approve" not in shown
    noise = pull_row(gate="skip", gate_reasons=("action_ignored",), gate_details=("",), **reviewed)
    shown = cells(render.render_status(view(replace(_rows("p", None), pulls=[noise]))), "pulls")
    assert "approve every required check passed checks_passed" in shown


def test_rows_never_repeat_the_outcome_as_their_reason() -> None:
    gate = DecisionRecord(
        "d-9",
        "gitea",
        "eligible",
        (Reason("eligible", ""),),
        NOW - 2,
        "gitea",
        "acme/api",
        7,
        HEAD,
        "status",
        None,
    )
    snap = replace(_rows("p", None), pulls=[pull_row()], decisions=[gate])
    text = render.render_status(view(with_activity(snap)))
    for section in ("pulls", "decisions"):
        assert "eligible eligible" not in cells(text, section), section
    assert "eligible the pull request can be reviewed" in cells(text, "pulls")
    decisions = cells(text, "decisions")
    assert "gate eligible at aaaaaaaaaaaa the pull request can be reviewed on status" in decisions


def test_every_stage_says_its_outcome_and_why_and_a_merge_names_what_merged() -> None:
    merged = MergeRow(
        "gitea",
        "acme/api",
        7,
        HEAD,
        "merged",
        (),
        "merged",
        "squash",
        "bot-1",
        3,
        NOW - 1,
        merge_commit="c" * 40,
    )
    snap = replace(
        _rows("p", None),
        merges=[merged],
        pulls=[
            pull_row(merged=True, merged_head=HEAD, merge_commit="c" * 40, merge_method="squash")
        ],
    )
    text = render.render_status(view(with_activity(snap)))
    decisions = cells(text, "decisions")
    assert (
        f"merge merged at {HEAD[:12]} merged {HEAD[:12]} as {'c' * 12} (squash) by bot-1"
        " (lease epoch 3)" in decisions
    )
    assert "why: merged" not in decisions
    assert "review approve at aaaaaaaaaaaa every required check passed checks_passed" in decisions
    assert (
        "lease released at aaaaaaaaaaaa merger lease, epoch 4, held by worker-1: the pull"
        " request was merged under it merged" in decisions
    )
    assert f"merged {HEAD[:12]} as {'c' * 12} (squash)" in cells(text, "pulls")
    assert f"merged {HEAD[:12]} as {'c' * 12}" in cells(text, "merges")


def test_the_pull_page_shows_reviews_gate_decisions_merge_and_lease_history_as_sections() -> None:
    snap = snapshot()
    facts = PullFacts(
        pr=PullRef("gitea", "acme", "api", 7),
        shown="gitea:acme/api#7",
        decisions=snap.decisions[:1],
        reviews=[review("request_changes", "checks_failed", failed=("ci/test",))],
        merge={
            "head_sha": HEAD,
            "merge_commit_sha": "c" * 40,
            "method": "merge",
            "holder": "bot-1",
            "epoch": 2,
        },
        findings=(Finding("src/app.py", 3, "unused <name>", Severity.ERROR),),
    )
    history = [
        lease_entry(LeaseEvent.GRANTED),
        lease_entry(LeaseEvent.EXPIRED, "heartbeat-lapsed"),
        lease_entry(LeaseEvent.TAKEOVER, holder="worker-2"),
    ]
    text = pr_page.render_pull(
        pr_page.PullView(
            markup.Reader("r", None),
            "gitea",
            "acme/api",
            7,
            "as text",
            snap,
            NOW,
            "c",
            facts=facts,
            lease_history=history,
        )
    )
    reviews = cells(text, "reviews")
    assert "request changes at aaaaaaaaaaaa a required check failed checks_failed" in reviews
    assert "failed: ci/test" in reviews and "del-review" in reviews
    gate = cells(text, "gate")
    assert "skip at aaaaaaaaaaaa the pull request carries a label" in gate
    assert "label plain" in gate and "on pull_request/opened" in gate
    trail = cells(text, "lease-history")
    assert "its holder stopped renewing it and its term ran out heartbeat-lapsed" in trail
    assert trail.index("granted") < trail.index("expired") < trail.index("takeover")
    assert f"merged {HEAD[:12]} as {'c' * 12} (merge) by bot-1 under lease epoch 2." in " ".join(
        re.sub(r"<[^>]+>", " ", text).split()
    )
    assert "unused &lt;name&gt;" in cells(text, "findings")
    assert "<pre>as text</pre>" in text


def test_times_read_as_ages_with_the_moment_in_the_title() -> None:
    text = render.render_status(view(snapshot()))
    moment = re.search(r'<time datetime="([^"]+)" title="[^"]+">([^<]+)</time>', text)
    assert moment and moment.group(2).endswith("ago")
    assert "90 s from now" in text  # the lease's expiry


def test_the_page_loads_only_its_own_stylesheet_and_nothing_else() -> None:
    tags = parsed(render.render_status(view(snapshot())))
    urls = [v for k, v in tags.attrs if k in ("src", "href") and v and not v.startswith("/")]
    assert urls == []
    assert ("href", markup.STYLESHEET) in tags.attrs


def test_a_new_head_without_a_verdict_is_not_shown_the_old_heads_verdict() -> None:
    new = "b" * 40
    moved = pull_row(
        head_sha=new,
        gate_at=NOW - 1,
        verdict="request_changes",
        verdict_reason="checks_failed",
        verdict_head=HEAD,
        verdict_at=NOW - 5,
        failed=("ci/test",),
    )
    shown = cells(render.render_status(view(replace(_rows("p", None), pulls=[moved]))), "pulls")
    assert f"{new[:12]} eligible the pull request can be reviewed" in shown
    assert "No review verdict at this head yet." in shown and "request changes" not in shown


def test_a_merged_pull_keeps_the_verdict_it_merged_on_after_it_is_closed() -> None:
    closed = pull_row(
        gate="skip",
        gate_reasons=("pr_closed",),
        gate_at=NOW - 1,
        verdict="approve",
        verdict_reason="checks_passed",
        verdict_head=HEAD,
        verdict_at=NOW - 5,
        merged=True,
        merged_head=HEAD,
        merge_commit="c" * 40,
        merge_method="squash",
    )
    shown = cells(render.render_status(view(replace(_rows("p", None), pulls=[closed]))), "pulls")
    assert (
        f"{HEAD[:12]} approve merged merged {HEAD[:12]} as {'c' * 12} (squash)"
        " every required check passed checks_passed" in shown
    )
