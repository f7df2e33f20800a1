"""Building a car on the forge and reading its CI: the queue's I/O with the repository.

A car's commit is made with the forge's ref operations (:mod:`reviewbot.forges.refs`): GitHub
merges on the server, Gitea and Forgejo in the bot's own clone, pushed as a plain (never
forced) push. It starts at the commit of the car ahead when that car is built (so the cars of
a train are a chain of fast-forwards), else at the base, and merges the pinned head of each
entry in order. The merges happen on a work branch ``reviewbot/build/<base>/<train>-<car>``
that CI does not watch; the car's queue branch ``reviewbot/queue/<base>/<train>-<car>`` is
then made at the finished commit. So CI sees one push per car, of the commit it is to test:
every step on the queue branch itself (its creation at the start, each merge) was a push,
and a CI run, of its own.

Its CI result is what the forge reports on that commit (statuses and check runs), judged as
a merge judges a head (:func:`reviewbot.core.policy.evaluate`) against the branch protection
and the configured checks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reviewbot.core import policy
from reviewbot.core.models import RequiredChecks
from reviewbot.core.policy import VerdictKind
from reviewbot.forges.base import Forge
from reviewbot.forges.errors import ForgeError, MergeConflict, RefExists
from reviewbot.forges.refs import RefOps

log = logging.getLogger(__name__)

BRANCH_PREFIX = "reviewbot/queue"
WORK_PREFIX = "reviewbot/build"  # where a car's merges are made, out of CI's sight
MERGE_CHECK = "merge"  # the "check" a car fails when its entries do not merge cleanly


def car_branch(base: str, train: str, car: int) -> str:
    return f"{BRANCH_PREFIX}/{base}/{train}-{car}"


def work_branch(branch: str) -> str:
    """The work branch a car's commit is made on before its queue ``branch`` points at it."""
    return WORK_PREFIX + branch.removeprefix(BRANCH_PREFIX)


class BranchMoved(ForgeError):
    """A car's work branch was moved by someone other than the bot while the car was made."""


@dataclass(frozen=True)
class Built:
    """The car's commit (``sha``), or the entry whose merge conflicted (``conflict``)."""

    sha: str | None
    conflict: int | None = None
    detail: str = ""


async def build(
    ops: RefOps,
    repo: str,
    branch: str,
    start: str,
    merges: Sequence[int],
    heads: Mapping[int, str],
) -> Built:
    """Merge the pinned head of each entry of ``merges`` onto ``start`` on the work branch,
    then make ``branch`` at the result. A branch left by an earlier attempt (a replica
    stopped mid-build) is made again."""
    work = work_branch(branch)
    await _fresh_branch(ops, repo, work, start)
    try:
        sha = start
        for number in merges:
            try:
                merged = await ops.merge_into(
                    repo, work, heads[number], f"Merge #{number} into {branch}"
                )
            except MergeConflict as exc:
                return Built(None, conflict=number, detail=str(exc))
            if merged.onto != sha:
                # Someone else pushed to the work branch: their commit would ride into the
                # car, be tested and land with it, reviewed by nobody.
                raise BranchMoved(
                    f"{work} was at {merged.onto} when #{number} was merged, not at {sha}"
                    " where the bot left it: someone else pushed to it; the car is built"
                    " again from the start",
                    operation="merge_into",
                )
            sha = merged.sha
        await _fresh_branch(ops, repo, branch, sha)
    finally:
        try:
            await ops.delete_branch(repo, work)
        except ForgeError as exc:  # made again by the next build; deleted with its car
            log.warning("deleting the work branch %s failed: %s", work, exc)
    return Built(sha)


async def _fresh_branch(ops: RefOps, repo: str, branch: str, sha: str) -> None:
    try:
        await ops.create_branch(repo, branch, sha)
    except RefExists:
        await ops.delete_branch(repo, branch)
        await ops.create_branch(repo, branch, sha)


@dataclass(frozen=True)
class CiAnswer:
    """``passed`` (True / False) or still pending (None); a failure names its check."""

    passed: bool | None
    check: str = ""
    url: str | None = None


async def read_ci(
    forge: Forge, repo: str, sha: str, protection: RequiredChecks, configured: Sequence[str]
) -> CiAnswer:
    results = await forge.check_results(repo, sha)
    verdict = policy.evaluate(protection, configured, results)
    if verdict.failed:
        failed = verdict.failed[0]
        return CiAnswer(False, failed.name, failed.url)
    if verdict.kind in (VerdictKind.APPROVE, VerdictKind.NO_REQUIRED_CHECKS):
        return CiAnswer(True)
    waiting = [c.name for c in verdict.pending] + list(verdict.missing)
    return CiAnswer(None, waiting[0] if waiting else "")
