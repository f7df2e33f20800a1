"""What a review costs on GitHub with the GraphQL read, and that it decides the same when
GraphQL cannot serve: the whole bot against the simulator over real HTTP."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.integration.review_support import APPROVED, BOT, CHANGES, REPO, Bot, running_bot
from tests.support.clock import FakeClock

FORGE = "github"
STATE_MARKER = "<!-- reviewbot:pr-state -->"


def operations(bot: Bot) -> Counter[str]:
    """The bot's requests to GitHub by operation (its login, read once at start, aside)."""
    return Counter(
        r.operation_id
        for r in bot.sim.requests
        if r.forge == FORGE and r.operation_id != "users/get-authenticated"
    )


async def review_one(bot: Bot, *, failing: bool = False) -> int:
    pr = bot.sim.open_pr(FORGE, REPO, author="alice")
    bot.sim.set_status(FORGE, REPO, pr.head_sha, "ci/test", "success")
    if failing:
        bot.sim.set_status(FORGE, REPO, pr.head_sha, "ci/lint", "failure")
    bot.sim.clear_requests()
    await bot.sim.deliver_pull_request(FORGE, REPO, pr.number, action="opened")
    await bot.settle()
    return pr.number


async def test_a_reviewed_pull_costs_one_graphql_read_and_two_writes(tmp_path: Path) -> None:
    # The bot's clock stands still: the read is never older than the window before posting,
    # however slowly the machine runs.
    async with running_bot(tmp_path, clock=FakeClock()) as bot:
        number = await review_one(bot)
        (review,) = bot.bot_reviews(FORGE, number)
        assert review.state == APPROVED[FORGE]
        assert len(bot.bot_comments(FORGE, number)) == 1
        # the gate's read serves the evaluation, the check before posting (it is a moment
        # old) and the state comment's lookup
        assert operations(bot) == {
            "graphql": 1,
            "pulls/create-review": 1,
            "issues/create-comment": 1,
        }


async def test_a_state_comment_graphql_found_is_edited_not_repeated(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as bot:
        pr = bot.sim.open_pr(FORGE, REPO, author="alice")
        # left by an earlier install whose records are gone
        bot.sim.add_comment(FORGE, REPO, pr.number, BOT, f"old\n{STATE_MARKER}")
        bot.sim.set_status(FORGE, REPO, pr.head_sha, "ci/test", "success")
        bot.sim.clear_requests()
        await bot.sim.deliver_pull_request(FORGE, REPO, pr.number, action="opened")
        await bot.settle()
        (comment,) = bot.bot_comments(FORGE, pr.number)
        assert "approved at" in comment.body
        ops = operations(bot)
        assert ops["issues/update-comment"] == 1 and ops["issues/list-comments"] == 0


@pytest.mark.parametrize("status", [502, 403, 404])
async def test_graphql_refused_or_failing_reviews_the_same_over_rest(
    tmp_path: Path, status: int
) -> None:
    async with running_bot(tmp_path, required=("ci/test", "ci/lint")) as bot:
        bot.sim.faults.add(forge=FORGE, method="POST", path="/graphql", status=status, times=None)
        number = await review_one(bot, failing=True)
        reviews = bot.bot_reviews(FORGE, number)
        assert [r.state for r in reviews] == [CHANGES[FORGE]]
        assert "ci/lint" in reviews[0].body
        assert bot.decisions(FORGE, number) == ["request_changes", "posted"]
        ops = operations(bot)
        # read over REST: the pull, its statuses and check runs, the branch's rules
        assert ops["pulls/get"] >= 1 and ops["repos/get-combined-status-for-ref"] >= 1
        assert ops["checks/list-for-ref"] >= 1 and ops["repos/get-branch-rules"] >= 1
