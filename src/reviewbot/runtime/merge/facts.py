"""The one read of a pull request's live merge facts, for every part that judges a merge."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from reviewbot.core.models import CheckResult, PullRequestSnapshot, RequiredChecks, Review
from reviewbot.forges.base import Forge


@dataclass(frozen=True)
class MergeFacts:
    """What the merge rules need besides the PR itself, read live for one head."""

    reviews: list[Review]
    protection: RequiredChecks
    results: list[CheckResult]
    missing_permission: str | None  # what the bot's credentials lack to merge, if known


async def read_merge_facts(
    forge: Forge, repo: str, pull: PullRequestSnapshot, head: str
) -> MergeFacts:
    """The reviews, the base branch's rules, the head's check results and whether the bot
    may merge at all, read at once (they are independent)."""
    reviews, protection, results, missing = await asyncio.gather(
        forge.list_reviews(repo, pull.number),
        forge.required_checks(repo, pull.base_ref),
        forge.check_results(repo, head),
        forge.merge_permission(repo, pull),
    )
    return MergeFacts(list(reviews), protection, list(results), missing)
