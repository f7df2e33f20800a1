"""The one interface the rest of the bot uses to talk to a forge."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from reviewbot.core.access import AccessFacts
from reviewbot.core.after_merge import Closing
from reviewbot.core.models import (
    CheckResult,
    Comment,
    InlineComment,
    MergeResult,
    PullRequestSnapshot,
    RequiredChecks,
    Review,
    ReviewEvent,
)
from reviewbot.forges.refs import RefOps


class Forge(Protocol):
    """What the bot needs from a forge; ``repo`` is always ``OWNER/NAME``.

    Errors are the types in :mod:`reviewbot.forges.errors`. GETs are retried on 5xx and
    timeouts inside the adapter; writes are never retried blindly.
    """

    name: str  # "github" or "gitea"
    url: str  # the API base URL, for messages that say where the forge was not reached

    async def bot_login(self) -> str: ...

    async def probe(self) -> str:
        """The bot's login read from the forge now: one request, no retry, no cache, even
        when ``bot_login`` is configured (readiness asks whether the forge answers)."""
        ...

    async def get_pull(
        self, repo: str, number: int, *, read_within_s: float = 0.0
    ) -> PullRequestSnapshot:
        """The pull as the forge has it. ``read_within_s``: a read of this pull that this
        task made at most that long ago (by the forge's clock) may answer instead of a new
        request; 0 always asks the forge."""
        ...

    async def list_open_pulls(self, repo: str) -> list[PullRequestSnapshot]: ...

    async def pulls_for_sha(self, repo: str, sha: str) -> list[PullRequestSnapshot]:
        """Open PRs whose head is ``sha``."""
        ...

    async def required_checks(self, repo: str, branch: str) -> RequiredChecks: ...

    async def check_results(self, repo: str, sha: str) -> list[CheckResult]: ...

    async def list_reviews(self, repo: str, number: int) -> list[Review]: ...

    async def submit_review(
        self,
        repo: str,
        number: int,
        *,
        commit_sha: str,
        event: ReviewEvent,
        body: str,
        comments: Sequence[InlineComment] = (),
    ) -> Review: ...

    async def merge(
        self, repo: str, number: int, *, head_sha: str, method: str = "merge"
    ) -> MergeResult: ...

    async def access(self, repo: str) -> AccessFacts:
        """What the forge shows of the bot's own access to ``repo`` (``reviewbot doctor``)."""
        ...

    async def merge_permission(self, repo: str, pull: PullRequestSnapshot) -> str | None:
        """What the bot's credentials lack to merge ``pull``, named as the forge's settings
        name it; ``None`` when nothing is known to be missing (the forge still decides)."""
        ...

    async def user_permission(self, repo: str, user: str) -> str:
        """``admin``, ``write``, ``read`` or ``none``."""
        ...

    async def find_comment(self, repo: str, number: int, marker: str) -> Comment | None:
        """The bot's own comment whose body contains ``marker``."""
        ...

    async def create_comment(self, repo: str, number: int, body: str) -> Comment: ...

    async def edit_comment(self, repo: str, comment_id: int, body: str) -> Comment: ...

    async def branch_head(self, repo: str, branch: str) -> str | None:
        """The commit ``branch`` points at now; ``None`` when there is no such branch."""
        ...

    async def delete_branch(self, repo: str, branch: str) -> None:
        """Delete ``branch`` (the forge refuses a protected or default branch)."""
        ...

    async def close_issue(self, repo: str, number: int) -> Closing:
        """Close issue ``number`` (read first: a pull request or a closed issue is left
        as it is, and the answer says so)."""
        ...

    def ref_ops(self) -> RefOps:
        """The adapter's ref operations (branches, comparisons, merge commits, fast-forwards),
        an optional capability: raises :class:`~reviewbot.forges.errors.Unsupported` naming
        what is missing when the adapter cannot do them. Ask before relying on them."""
        ...

    async def aclose(self) -> None: ...
