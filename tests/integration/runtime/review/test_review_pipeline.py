"""The review pipeline end to end: simulator over real HTTP, the real server, real SQLite.

A webhook from the simulator reaches the server, is journalled, gated, evaluated against the
required checks of the base branch, recorded with its outbox row, and posted as a native
review pinned to the head SHA, exactly once.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from reviewbot.runtime.review.outbox import REREAD_AFTER_S
from reviewbot.runtime.review.reconcile import Reconciler
from tests.integration.review_support import (
    APPROVED,
    BOT,
    CHANGES,
    COMMENTED,
    REPO,
    Bot,
    running_bot,
)

FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])


def sweeper_of(bot: Bot) -> Reconciler:
    """A reconcile sweep over the running bot's store, forges and pipeline."""
    st = bot.service
    assert st.review is not None and st.journal is not None
    return Reconciler(bot.settings, bot.store, st.forges, st.review.pipeline, st.journal.append)


@FORGES
async def test_all_green_gets_one_approval_at_the_head(tmp_path: Path, forge: str) -> None:
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]
        assert "<!-- reviewbot:outbox:" in reviews[0].body
        assert bot.decisions(forge, pr.number) == ["approve", "posted"]
        # the canonical state comment exists once and tells the truth
        comments = bot.bot_comments(forge, pr.number)
        assert len(comments) == 1
        assert "<!-- reviewbot:pr-state -->" in comments[0].body
        assert pr.head_sha in comments[0].body
        assert "approved at" in comments[0].body


@FORGES
async def test_failing_required_check_requests_changes_naming_it(
    tmp_path: Path, forge: str
) -> None:
    async with running_bot(tmp_path, required=("ci/test", "ci/lint")) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        bot.sim.set_status(
            forge, REPO, pr.head_sha, "ci/lint", "failure", target_url="https://ci.example/7"
        )
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(CHANGES[forge], pr.head_sha)]
        assert "ci/lint" in reviews[0].body
        assert "https://ci.example/7" in reviews[0].body
        assert "ci/test" not in reviews[0].body.split("Failed:")[1]


@FORGES
async def test_pending_waits_then_the_status_event_approves(tmp_path: Path, forge: str) -> None:
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "pending")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        assert bot.bot_reviews(forge, pr.number) == []
        latest = bot.store.latest_verdict(forge, REPO, pr.number)
        assert latest is not None and latest.decision == "waiting"
        assert latest.pending == ("ci/test",)

        status = bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        await bot.sim.deliver_status(forge, REPO, status.id)
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]


async def test_missing_check_is_reported_once_after_the_grace_period(tmp_path: Path) -> None:
    forge = "github"
    async with running_bot(tmp_path, missing_check_grace_s=0.0) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="labeled")
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(COMMENTED[forge], pr.head_sha)]
        assert "`ci/test`" in reviews[0].body
        # still missing on the next events: reported once, not again
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="unlabeled")
        await bot.settle()
        assert len(bot.bot_reviews(forge, pr.number)) == 1
        latest = bot.store.latest_verdict(forge, REPO, pr.number)
        assert latest is not None and latest.missing == ("ci/test",)


@FORGES
async def test_head_pushed_before_posting_posts_nothing_then_reviews_the_new_head(
    tmp_path: Path, forge: str
) -> None:
    later = [0.0]
    async with running_bot(tmp_path, clock=lambda: time.time() + later[0]) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        old = pr.head_sha
        bot.sim.set_status(forge, REPO, old, "ci/test", "success")
        pushed: list[str] = []
        outbox = bot.service.review.outbox if bot.service.review else None
        assert outbox is not None
        begin = outbox.begin_attempt

        # The push lands after the evaluation's reads, as the post's attempt begins, and
        # the clock is past the window in which the evaluation's own read (GitHub's one
        # GraphQL read) could serve as the check before posting: the pull is read again.
        def push_then_begin(*args: Any, **kw: Any) -> Any:
            if not pushed:
                new = bot.sim.push(forge, REPO, pr.number)
                bot.sim.set_status(forge, REPO, new, "ci/test", "success")
                pushed.append(new)
                later[0] += REREAD_AFTER_S + 1.0
            return begin(*args, **kw)

        outbox.begin_attempt = push_then_begin  # type: ignore[method-assign]
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        assert pushed, "the fault hook did not run"
        assert bot.bot_reviews(forge, pr.number) == []
        assert "head_moved" in bot.decisions(forge, pr.number)
        rows = bot.service.review.outbox.for_pull(forge, REPO, pr.number)
        assert [(r.head_sha, r.status) for r in rows] == [(old, "dropped")]

        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="synchronize")
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pushed[0])]


@FORGES
async def test_redeliveries_and_semantic_replays_give_one_review(
    tmp_path: Path, forge: str
) -> None:
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        first = await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        for _ in range(4):
            await bot.sim.deliver_raw(
                forge, first.event, first.body, headers_override=dict(first.headers)
            )
        for _ in range(3):
            await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]
        assert len(bot.service.review.outbox.for_pull(forge, REPO, pr.number)) == 1


@pytest.mark.parametrize(
    ("forge", "fault"),
    [
        ("github", {"status": 500}),
        ("github", {"status": 429, "retry_after": 0.1}),
        ("gitea", {"status": 500}),
        ("github", {"status": 502, "apply_then_fail": True}),
        ("gitea", {"status": 500, "apply_then_fail": True}),
    ],
)
async def test_review_post_errors_are_retried_into_one_review(
    tmp_path: Path, forge: str, fault: dict[str, Any]
) -> None:
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        path = f"/repos/{REPO}/pulls/{pr.number}/reviews"
        bot.sim.faults.add(forge=forge, method="POST", path=path, times=2, **fault)
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]
        (row,) = bot.service.review.outbox.for_pull(forge, REPO, pr.number)
        assert row.status == "posted" and row.forge_review_id == reviews[0].id
        posts = [r for r in bot.sim.requests if r.forge == forge and r.method == "POST"]
        # Refused twice then accepted; or applied-then-failed once, then adopted by marker.
        expected = 1 if fault.get("apply_then_fail") else 3
        assert len([r for r in posts if r.path == path]) == expected
        # the state comment catches up with the post made by the drainer's loop
        deadline = time.monotonic() + 20
        while "approved at" not in "".join(c.body for c in bot.bot_comments(forge, pr.number)):
            assert time.monotonic() < deadline, "the state comment was not updated"
            await asyncio.sleep(0.05)
        assert len(bot.bot_comments(forge, pr.number)) == 1


@FORGES
async def test_bot_authored_pull_request_gets_no_review(tmp_path: Path, forge: str) -> None:
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(forge, REPO, author=BOT)
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        assert bot.sim.pull(forge, REPO, pr.number).reviews == []
        with bot.store.db.read() as tx:
            rows = tx.all(
                "SELECT reason_code FROM pr_gate_decisions WHERE number = ? AND forge = ?",
                (pr.number, forge),
            )
        codes = {r["reason_code"] for r in rows} | set(bot.decisions(forge, pr.number))
        assert "author_is_bot" in codes


@FORGES
async def test_state_comment_is_edited_never_duplicated(tmp_path: Path, forge: str) -> None:
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "pending")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        for n in range(9):
            state = "success" if n == 8 else "pending"
            status = bot.sim.set_status(
                forge, REPO, pr.head_sha, "ci/test", state, description=f"run {n}"
            )
            await bot.sim.deliver_status(forge, REPO, status.id)
            await bot.settle()
        comments = bot.bot_comments(forge, pr.number)
        assert len(comments) == 1
        assert comments[0].updated_at >= comments[0].created_at
        assert "approved at" in comments[0].body
        assert len(bot.bot_reviews(forge, pr.number)) == 1
        edits = [
            r
            for r in bot.sim.requests
            if r.forge == forge and r.method == "PATCH" and "/issues/comments/" in r.path
        ]
        assert len(edits) >= 2


async def test_dismissed_review_reopens_the_head(tmp_path: Path) -> None:
    forge = "github"
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        (review,) = bot.bot_reviews(forge, pr.number)
        repo = bot.sim.repo(forge, REPO)
        bot.sim.api_dismiss(repo, pr.number, review.id)
        await bot.sim.deliver_pull_request_review(
            forge, REPO, pr.number, review.id, action="dismissed"
        )
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert len(reviews) == 2
        assert reviews[-1].state == APPROVED[forge]
        assert "reopened" in bot.decisions(forge, pr.number)


@FORGES
async def test_reconcile_sweep_reviews_a_pull_request_whose_webhook_was_lost(
    tmp_path: Path, forge: str
) -> None:
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        sweeper = sweeper_of(bot)
        report = await sweeper.sweep()
        assert report.queued == [f"sweep:{forge}:{REPO}#{pr.number}@{pr.head_sha}"]
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]
        with bot.store.db.read() as tx:
            row = tx.one(
                "SELECT source, decision FROM pr_gate_decisions WHERE forge = ? AND number = ?",
                (forge, pr.number),
            )
        assert row is not None and (row["source"], row["decision"]) == ("sweep", "eligible")
        # a second sweep finds nothing left to do
        again = await sweeper.sweep()
        assert again.queued == [] and again.reevaluated == []
        await bot.settle()
        assert len(bot.bot_reviews(forge, pr.number)) == 1


async def test_a_head_the_gate_could_not_read_is_gated_again_by_the_sweep(
    tmp_path: Path,
) -> None:
    """ "Could not read" is no answer: a head whose only gate decision is a forge error is
    taken up by the next sweep, under a delivery id of its own, and reviewed."""
    forge = "gitea"
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        bot.sim.faults.add(
            forge=forge, method="GET", path=f"/repos/{REPO}/pulls/*", status=502, times=None
        )
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        assert bot.decisions(forge, pr.number) == []  # nothing reviewed
        with bot.store.db.read() as tx:
            gate = tx.all(
                "SELECT decision FROM pr_gate_decisions WHERE forge = ? AND number = ?",
                (forge, pr.number),
            )
        assert [r["decision"] for r in gate] == ["error"]
        bot.sim.faults.clear()  # the forge answers again

        sweeper = sweeper_of(bot)
        report = await sweeper.sweep()
        assert report.queued == [f"sweep:{forge}:{REPO}#{pr.number}@{pr.head_sha}~1"]
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]
        assert (await sweeper.sweep()).queued == []  # answered now: nothing left to do


@FORGES
async def test_a_new_head_supersedes_the_waiting_decision(tmp_path: Path, forge: str) -> None:
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        old = pr.head_sha
        bot.sim.set_status(forge, REPO, old, "ci/test", "pending")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        new = bot.sim.push(forge, REPO, pr.number)
        bot.sim.set_status(forge, REPO, new, "ci/test", "success")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="synchronize")
        await bot.settle()
        history = [(d.head_sha, d.decision) for d in reversed(bot.store.decisions(forge, REPO, 1))]
        assert history == [
            (old, "waiting"),
            (old, "superseded"),
            (new, "approve"),
            (new, "posted"),
        ]
        # a late status for the old head changes nothing
        late = bot.sim.set_status(forge, REPO, old, "ci/test", "success")
        await bot.sim.deliver_status(forge, REPO, late.id)
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], new)]


async def test_the_echo_of_the_bots_own_review_changes_nothing(tmp_path: Path) -> None:
    forge = "github"
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        (review,) = bot.bot_reviews(forge, pr.number)
        bot.sim.clear_requests()
        await bot.sim.deliver_pull_request_review(forge, REPO, pr.number, review.id)
        await bot.settle()
        with bot.store.db.read() as tx:
            gated = tx.one(
                "SELECT decision FROM pr_gate_decisions WHERE event = 'pull_request_review'"
            )
        assert gated is not None and gated["decision"] == "eligible"
        writes = [
            r
            for r in bot.sim.requests
            if r.forge == forge and r.method != "GET" and r.operation_id != "graphql"
        ]
        assert writes == []
        assert len(bot.bot_reviews(forge, pr.number)) == 1
        assert bot.decisions(forge, pr.number) == ["approve", "posted"]


@FORGES
async def test_checks_required_later_are_judged_at_the_next_status_event(
    tmp_path: Path, forge: str
) -> None:
    # The try-it path: a head first evaluated with nothing required must not stay unreviewed
    # once the base branch starts requiring checks.
    async with running_bot(tmp_path, required=()) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        assert bot.decisions(forge, pr.number) == ["no_required_checks"]

        bot.sim.require_checks(forge, REPO, "main", ["ci/test"])
        status = bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        await bot.sim.deliver_status(forge, REPO, status.id)
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]
        assert bot.decisions(forge, pr.number)[-2:] == ["approve", "posted"]


async def test_a_sweep_judges_a_head_left_without_required_checks(tmp_path: Path) -> None:
    # Required checks configured while no event arrives (or while the bot was down): the
    # periodic sweep takes the head up again.
    forge = "gitea"
    async with running_bot(tmp_path, required=()) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        assert bot.decisions(forge, pr.number) == ["no_required_checks"]

        bot.sim.require_checks(forge, REPO, "main", ["ci/test"])
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        sweeper = sweeper_of(bot)
        report = await sweeper.sweep()
        assert report.reevaluated == [f"{forge}:{REPO}#{pr.number}"]
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]
