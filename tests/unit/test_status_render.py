"""Rendering the status page: pure functions from plain rows to HTML."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from reviewbot.core.models import Reason
from reviewbot.server.ui import markup, render
from reviewbot.store.decisions import DecisionRecord
from reviewbot.store.status import (
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


def snapshot(text: str = "plain", *, queue_id: str | None = "d-1") -> StatusSnapshot:
    """One row of every kind, each text field carrying ``text``."""
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
        text = render.render_pull(
            render.PullView(reader, "gitea", "acme/api", 7, f"explained {XSS}", snap, NOW, XSS)
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
    text = render.render_pull(
        render.PullView(reader, "gitea", "acme/api", 7, "line one\nline two", snap, NOW, "c")
    )
    assert "<h1>gitea:Acme/plain#7</h1>" in text
    assert "worker plain" in text and "someone-else" not in text
    assert "<pre>line one\nline two</pre>" in text
    assert "reviewbot explain gitea:Acme/plain#7" in text


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
