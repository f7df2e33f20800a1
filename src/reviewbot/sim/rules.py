"""What each forge does with API writes: reviews (with Gitea's PENDING trap) and merges."""

from __future__ import annotations

from typing import Any

from reviewbot.sim.checks import (
    gitea_checks_pass,
    github_blocking_check,
    github_rules,
    protection_for,
)
from reviewbot.sim.core import SimCore
from reviewbot.sim.errors import ApiError
from reviewbot.sim.state import SimInlineComment, SimProtection, SimPull, SimRepo, SimReview

GITHUB_REVIEW_STATES = {
    "APPROVE": "APPROVED",
    "APPROVED": "APPROVED",
    "REQUEST_CHANGES": "CHANGES_REQUESTED",
    "CHANGES_REQUESTED": "CHANGES_REQUESTED",
    "COMMENT": "COMMENTED",
    "COMMENTED": "COMMENTED",
}
GITEA_REVIEW_STATES = {
    "APPROVE": "APPROVED",
    "APPROVED": "APPROVED",
    "REQUEST_CHANGES": "REQUEST_CHANGES",
    "CHANGES_REQUESTED": "REQUEST_CHANGES",
    "COMMENT": "COMMENT",
    "COMMENTED": "COMMENT",
}
GITEA_KNOWN_EVENTS = ("APPROVED", "REQUEST_CHANGES", "COMMENT", "PENDING")
# GitHub refuses a longer review body; the simulator holds both forges to it.
MAX_REVIEW_BODY = 65536


class ForgeRules(SimCore):
    def api_create_review(
        self,
        repo: SimRepo,
        number: int,
        user: str,
        *,
        event: str | None,
        body: str,
        commit_id: str | None,
        comments: list[dict[str, Any]],
    ) -> SimReview:
        """A review created through the API, with each forge's rules for ``event``."""
        pull = self._api_pull(repo, number)
        if len(body) > MAX_REVIEW_BODY:
            raise ApiError(
                422,
                "Unprocessable Entity",
                errors=[f"body is too long (maximum is {MAX_REVIEW_BODY} characters)"],
            )
        commit = commit_id or pull.head_sha
        if commit not in repo.commits:
            raise ApiError(422, "Unprocessable Entity", errors=["Commit not found"])
        inline = [
            SimInlineComment(
                id=self.next_id(),
                path=str(c.get("path", "")),
                body=str(c.get("body", "")),
                line=c.get("line", c.get("new_position")),
                position=c.get("position"),
                side=c.get("side"),
            )
            for c in comments
        ]
        if repo.forge == "github":
            state = "PENDING" if not event else GITHUB_REVIEW_STATES.get(event)
            if state is None or (event and event not in ("APPROVE", "REQUEST_CHANGES", "COMMENT")):
                raise ApiError(422, "Unprocessable Entity", errors=[f"Invalid event {event!r}"])
            if user == pull.author and state in ("APPROVED", "CHANGES_REQUESTED"):
                verb = "approve" if state == "APPROVED" else "request changes on"
                raise ApiError(
                    422, "Unprocessable Entity", errors=[f"Can not {verb} your own pull request"]
                )
            if state in ("CHANGES_REQUESTED", "COMMENTED") and not body and not inline:
                raise ApiError(
                    422,
                    "Unprocessable Entity",
                    errors=[f"Review body is required for {event}"],
                )
            if state == "PENDING":
                self._drop_pending(pull, user)
            return self._store_review(pull, user, state, body, commit, inline)
        # Gitea: any event it does not know, GitHub's APPROVE included, is a PENDING review.
        known = event or "PENDING"
        state = known if known in GITEA_KNOWN_EVENTS else "PENDING"
        needs_body = known in ("REQUEST_CHANGES", "COMMENT") or known not in GITEA_KNOWN_EVENTS
        if needs_body and not body and not inline:
            raise ApiError(422, f"review event {known} requires a body or comments")
        if user == pull.author and state in ("APPROVED", "REQUEST_CHANGES"):
            what = "approve" if state == "APPROVED" else "reject"
            raise ApiError(422, f"{what} your own pull is not allowed")
        return self._store_review(pull, user, state, body, commit, inline)

    def _drop_pending(self, pull: SimPull, user: str) -> None:
        for review in pull.reviews:
            if review.user == user and review.state == "PENDING":
                raise ApiError(
                    422,
                    "Unprocessable Entity",
                    errors=["User can only have one pending review per pull request"],
                )

    def api_submit_pending(
        self, repo: SimRepo, number: int, review_id: int, user: str, event: str, body: str
    ) -> SimReview:
        pull = self._api_pull(repo, number)
        review = self.api_review(pull, review_id)
        if review.state != "PENDING" or review.user != user:
            raise ApiError(422, "Unprocessable Entity", errors=["Review is not pending"])
        table = GITHUB_REVIEW_STATES if repo.forge == "github" else GITEA_REVIEW_STATES
        allowed = (
            ("APPROVE", "REQUEST_CHANGES", "COMMENT")
            if repo.forge == "github"
            else ("APPROVED", "REQUEST_CHANGES", "COMMENT")
        )
        if event not in allowed:
            raise ApiError(422, "Unprocessable Entity", errors=[f"Invalid event {event!r}"])
        review.state = table[event]
        review.body = body or review.body
        review.submitted_at = self.now()
        review.updated_at = self.now()
        if repo.forge == "gitea":
            review.commit_id = pull.head_sha  # Gitea records the current head on submit
        return review

    def api_dismiss(self, repo: SimRepo, number: int, review_id: int) -> SimReview:
        pull = self._api_pull(repo, number)
        review = self.api_review(pull, review_id)
        if repo.forge == "github":
            if review.state not in ("APPROVED", "CHANGES_REQUESTED"):
                raise ApiError(
                    422, "Unprocessable Entity", errors=["Can not dismiss a commented review"]
                )
            review.state = "DISMISSED"
        else:
            if review.state not in ("APPROVED", "REQUEST_CHANGES"):
                raise ApiError(
                    422,
                    "not need to dismiss this review because it's type is not Approve or change request",  # noqa: E501
                )
            review.dismissed = True
        review.updated_at = self.now()
        return review

    def api_review(self, pull: SimPull, review_id: int) -> SimReview:
        for review in pull.reviews:
            if review.id == review_id:
                return review
        raise ApiError(404, "Not Found")

    def _api_pull(self, repo: SimRepo, number: int) -> SimPull:
        pull = repo.pulls.get(number)
        if pull is None:
            raise ApiError(404, "Not Found")
        return pull

    # ------------------------------------------------------------------ merges
    def api_merge_github(
        self, repo: SimRepo, number: int, user: str, *, sha: str | None, method: str
    ) -> SimPull:
        pull = self._api_pull(repo, number)
        if self.permission(repo, user) not in ("admin", "write"):
            raise ApiError(403, "Resource not accessible by integration")
        if not pull.open or pull.merged:
            raise ApiError(405, "Pull Request is not mergeable")
        if sha is not None and sha != pull.head_sha:
            raise ApiError(409, "Head branch was modified. Review and try the merge again.")
        if not self.pull_mergeable(repo, pull) or pull.draft:
            raise ApiError(405, "Pull Request is not mergeable")
        protection = github_rules(repo, pull.base)
        if protection is not None:
            blocking = github_blocking_check(repo, protection, pull.head_sha)
            if blocking is not None:
                raise ApiError(405, blocking)
            self._check_approvals(repo, pull, protection)
        self._do_merge(repo, pull, user, method)
        return pull

    def api_merge_gitea(
        self,
        repo: SimRepo,
        number: int,
        user: str,
        *,
        do: str,
        head_commit_id: str,
        when_checks_succeed: bool,
        merge_commit_id: str = "",
    ) -> int:
        """Returns the success status: 200 merged, 201 scheduled (auto-merge)."""
        pull = self._api_pull(repo, number)
        if pull.merged:
            raise ApiError(405, "The PR is already merged")
        if not pull.open:
            raise ApiError(405, "The PR is closed")
        if not self.may_merge_gitea(repo, pull.base, user):
            raise ApiError(405, "User not allowed to merge PR")
        if do == "manually-merged" and merge_commit_id:
            self._merged_manually(repo, pull, user, merge_commit_id)
            return 200
        # Gitea compares head_commit_id only when it is non-empty.
        if head_commit_id and head_commit_id != pull.head_sha:
            raise ApiError(409, "head out of date")
        protection = protection_for(repo, pull.base)
        checks_ok = protection is None or gitea_checks_pass(repo, protection, pull.head_sha)
        if when_checks_succeed and not checks_ok:
            pull.auto_merge_scheduled = do
            return 201
        if pull.draft:
            raise ApiError(405, "The PR is a work in progress")
        if not self.pull_mergeable(repo, pull):
            raise ApiError(405, "Please try again later")
        if not checks_ok:
            raise ApiError(405, "Not all required status checks successful")
        if protection is not None:
            self._check_approvals(repo, pull, protection)
        self._do_merge(repo, pull, user, do)
        return 200

    def _merged_manually(self, repo: SimRepo, pull: SimPull, user: str, commit_id: str) -> None:
        """Gitea's "mark as manually merged" (``Do: manually-merged`` with ``MergeCommitID``):
        no mergeability, check or approval rule applies (``MergeCheckTypeManually``); the
        repository must allow the style ("Allow manual merge", ``allow_manual_merge``), else
        ``ErrInvalidMergeStyle``, which the API answers 405; the commit must be a full ID of a
        commit on the base branch, else 409 "Wrong commit ID". Nothing moves: the PR records
        that commit as its merge. Source: go-gitea/gitea routers/api/v1/repo/pull.go
        ``MergePullRequest`` and services/pull/merge.go ``MergedManually``
        (``IsMergeStyleAllowed``, ``IsCommitInBranch``); Forgejo's ``MergedManually`` makes the
        same checks."""
        if not repo.allow_manual_merge:
            raise ApiError(
                405, "manually-merged is not allowed an allowed merge style for this repository"
            )
        tip = repo.branches.get(pull.base)
        full = len(commit_id) in (40, 64)
        if not (full and tip is not None and self.resolve(repo, commit_id) == commit_id):
            raise ApiError(409, "Wrong commit ID")
        if not self.is_ancestor(repo, commit_id, tip):
            raise ApiError(409, "Wrong commit ID")
        self.mark_merged(pull, user, commit_id)

    def _check_approvals(self, repo: SimRepo, pull: SimPull, protection: SimProtection) -> None:
        if protection.required_approvals <= 0:
            return
        latest: dict[str, SimReview] = {}
        for review in pull.reviews:
            if review.state != "PENDING":
                latest[review.user] = review
        approvals = sum(
            1
            for r in latest.values()
            if r.state == "APPROVED" and not r.dismissed and r.user != pull.author
        )
        if approvals < protection.required_approvals:
            if repo.forge == "github":
                raise ApiError(
                    405,
                    f"At least {protection.required_approvals} approving review is required "
                    "by reviewers with write access.",
                )
            raise ApiError(405, "Does not have enough approvals")

    def _do_merge(self, repo: SimRepo, pull: SimPull, user: str, method: str) -> None:
        base_head = repo.branches.get(pull.base, pull.base_sha)
        merge_sha = self._git_merge(repo, pull, user, method, base_head)
        by_git = merge_sha is not None
        if merge_sha is None:
            if method == "fast-forward-only":
                merge_sha = pull.head_sha
            else:
                parents = (
                    [base_head, pull.head_sha]
                    if method in ("merge", "rebase-merge")
                    else [base_head]
                )
                message = f"Merge pull request #{pull.number}"
                merge_sha = self._commit(repo, user, message, parents).sha
        if not (by_git and method == "manually-merged"):  # the change is in the base already
            self.set_branch(repo, pull.base, merge_sha, user)
        self.mark_merged(pull, user, merge_sha)

    def _git_merge(
        self, repo: SimRepo, pull: SimPull, user: str, method: str, base: str
    ) -> str | None:
        """The commit a merge lands, made by git as the forge makes it (``None``: the
        repository has no git, or a side is a virtual commit)."""
        git = self.git_of(repo)
        if git is None or not (self.is_real(repo, base) and self.is_real(repo, pull.head_sha)):
            return None
        head = pull.head_sha
        if method == "manually-merged":
            return head
        if method == "fast-forward-only":
            if not git.is_ancestor(base, head):
                raise ApiError(405, "Pull Request is not mergeable")  # Gitea: not a fast-forward
            return head
        tree = git.merge_tree(base, head)
        if tree is None:
            raise ApiError(405, "Pull Request is not mergeable")
        if method == "squash":
            message = f"{pull.title} (#{pull.number})" if repo.forge == "github" else pull.title
            return self._commit(repo, pull.author, message, [base], tree=tree).sha
        if method in ("rebase", "rebase-merge"):
            tip = base
            for commit in git.commits_between(base, head):
                picked = git.pick(commit, tip)
                if picked is None:
                    raise ApiError(405, "Pull Request is not mergeable")
                original = self.record_git_commit(repo, commit)
                tip = self._commit(repo, original.author, original.message, [tip], tree=picked).sha
            if method == "rebase":
                return tip
            head = tip
            tree = git.tree_of(tip)
        if repo.forge == "github":
            message = f"Merge pull request #{pull.number} from {repo.owner}/{pull.head_ref}"
        else:
            message = f"Merge pull request '{pull.title}' (#{pull.number}) from {pull.head_ref}"
        message += f" into {pull.base}" if repo.forge == "gitea" else f"\n\n{pull.title}"
        return self._commit(repo, user, message, [base, head], tree=tree).sha

    def _run_scheduled_merges(self, repo: SimRepo) -> None:
        """Gitea's auto-merge: merges at whatever the head is once checks pass."""
        for pull in repo.pulls.values():
            if pull.auto_merge_scheduled is None or not pull.open:
                continue
            protection = protection_for(repo, pull.base)
            if protection is None or gitea_checks_pass(repo, protection, pull.head_sha):
                self._do_merge(repo, pull, pull.author, pull.auto_merge_scheduled)
