"""The one read of a pull request's live merge facts, for every part that judges a merge.

The merger, automerge, the capability answer, the PR state comment and the status page all
read the pull through :func:`read_pr_facts`; a caller that needs only the pull (a review's
capability) asks for just that with ``merge=False`` rather than calling the forge itself, so
there is one place that decides what a judgement reads, and each read happens once. Each of
them judges merge readiness on what it read with
:func:`reviewbot.core.merge.merge_readiness`.
"""

from __future__ import annotations

import asyncio

from reviewbot.config import Settings
from reviewbot.core.merge import PrFacts
from reviewbot.core.models import PullRequestSnapshot, RepoRef
from reviewbot.forges.base import Forge


def configured_checks(settings: Settings, forge: str, repo: str) -> tuple[str, ...]:
    """The repository's own ``required_checks`` (none without rules): what a merge, and so
    every merge-readiness answer, requires on top of the forge's rules."""
    rules = settings.rules_for(RepoRef.parse(repo, forge=forge))
    return tuple(rules.required_checks) if rules is not None else ()


async def read_readiness_facts(
    forge: Forge, repo: str, number: int, pull: PullRequestSnapshot | None = None
) -> PrFacts:
    """What a merge-readiness answer about the PR now is judged on (the state comment, the
    status page): a ``pull`` just read that is closed or merged needs nothing more; anything
    else is the whole read at the pull's head."""
    if pull is not None and (pull.merged or pull.state != "open"):
        return PrFacts.of_pull(pull)
    return await read_pr_facts(forge, repo, number)


async def read_pr_facts(
    forge: Forge, repo: str, number: int, head: str | None = None, *, merge: bool = True
) -> PrFacts:
    """The pull and, with ``merge``, its reviews, the base branch's rules, the check results
    of ``head`` (the pin; the pull's own head when ``None``) and whether the bot may merge.

    The pull is read first: on GitHub that one GraphQL query also answers the reviews, the
    head's checks and the base's rules, which the reads after it then take from it. What
    remains runs at once (on Gitea: the reviews, the rules, the checks and the permission).
    """
    pull = await forge.get_pull(repo, number)
    if not merge:
        return PrFacts.of_pull(pull)
    at = head if head is not None else pull.head_sha
    reviews, protection, results, missing = await asyncio.gather(
        forge.list_reviews(repo, number),
        forge.required_checks(repo, pull.base_ref),
        forge.check_results(repo, at),
        forge.merge_permission(repo, pull),
    )
    return PrFacts(pull, at, tuple(reviews), protection, tuple(results), missing)
