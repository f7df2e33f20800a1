"""The simulator: its state and scenario API (synchronous, deterministic); webhooks are async.

``Simulator`` is assembled from parts: :mod:`core` (state, users, repositories), :mod:`rules`
(what each forge does with API writes), :mod:`apps` (GitHub Apps) and :mod:`deliveries`
(webhooks); the scenario calls below stage pull requests, CI results and reviews.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reviewbot.sim.apps import GitHubApps
from reviewbot.sim.ci import CiConfig, CiResult, CiRunner
from reviewbot.sim.clock import ManualClock
from reviewbot.sim.deliveries import WebhookScenario
from reviewbot.sim.errors import ScenarioError
from reviewbot.sim.rules import GITEA_REVIEW_STATES, GITHUB_REVIEW_STATES, ForgeRules
from reviewbot.sim.state import (
    SimCheckRun,
    SimCheckSuite,
    SimComment,
    SimIssue,
    SimProtection,
    SimPull,
    SimReview,
    SimRuleset,
    SimStatus,
)

# The app that owns check runs created without naming one (GitHub Actions' real id).
DEFAULT_CHECKS_APP_ID = 15368


class Simulator(ForgeRules, GitHubApps, WebhookScenario):
    """Both forges' state plus the scenario API tests and demos drive."""

    _ci: CiRunner | None = None

    # ------------------------------------------------------------------ CI and time
    @property
    def ci(self) -> CiRunner:
        """The CI service (``sim/ci.py``); it runs once :meth:`configure_ci` set rules."""
        if self._ci is None:
            self._ci = CiRunner(self)
        return self._ci

    def configure_ci(self, forge: str, repo: str, **rules: Any) -> CiConfig:
        """CI on pushes to ``repo``: see :meth:`CiRunner.configure` for the rules."""
        return self.ci.configure(forge, repo, **rules)

    def advance(self, seconds: float) -> list[CiResult]:
        """Move the simulator's time on (a manual clock, or an offset over another one: a
        benchmark compresses hours) and finish the CI builds that are then due."""
        if seconds < 0:
            raise ScenarioError("time only moves forward")
        if isinstance(self.clock, ManualClock):
            self.clock.advance(seconds)
        else:
            self.clock_offset += seconds
        return self.run_due()

    def run_due(self) -> list[CiResult]:
        """Finish the CI builds whose time has come on the simulator's clock."""
        return self._ci.tick() if self._ci is not None else []

    # ------------------------------------------------------------------ pull requests
    def open_pr(
        self,
        forge: str,
        repo: str,
        author: str,
        base: str = "main",
        head_ref: str = "feature",
        title: str = "Change",
        body: str = "",
        draft: bool = False,
        labels: Sequence[str] = (),
        head_sha: str | None = None,
    ) -> SimPull:
        state = self.repo(forge, repo)
        self.user(forge, author)
        if base not in state.branches:
            raise ScenarioError(f"no branch {base!r} in {forge}:{repo}")
        base_sha = state.branches[base]
        git = self.git_of(state)
        number = state.next_number
        existing = state.branches.get(head_ref)
        taken = any(p.head_ref == head_ref and p.open for p in state.pulls.values())
        if git is not None and head_sha is None and existing is not None and not taken:
            # A pushed branch: the pull request is opened on it as it stands.
            sha = existing
            commits = git.commits_between(base_sha, sha) if self.is_real(state, sha) else []
            for c in commits:
                self.record_git_commit(state, c)
            commits = commits or [sha]
        else:
            # A change of its own: one commit touching a file no other pull request touches.
            files = {f"changes/pr-{number}.txt": f"{title}\n"}
            sha = self._add_commit(state, head_sha, author, title, base_sha, files=files)
            commits = [sha]
        now = self.now()
        pull = SimPull(
            number=number,
            id=self.next_id(),
            repo=repo,
            forge=forge,
            title=title,
            body=body,
            author=author,
            base=base,
            head_ref=head_ref,
            head_sha=sha,
            base_sha=base_sha,
            created_at=now,
            updated_at=now,
            draft=draft,
            labels=list(labels),
            commits=commits,
        )
        state.next_number += 1
        state.pulls[pull.number] = pull
        if existing != sha:
            self.set_branch(state, head_ref, sha, author, follow=not taken, announce=False)
        self._move_git_ref(state, f"refs/pull/{number}/head", sha)
        return pull

    def open_issue(self, forge: str, repo: str, author: str, title: str = "A bug") -> SimIssue:
        """An open issue, numbered from the same sequence as the pull requests."""
        state = self.repo(forge, repo)
        self.user(forge, author)
        now = self.now()
        issue = SimIssue(state.next_number, self.next_id(), title, author, now, now)
        state.next_number += 1
        state.issues[issue.number] = issue
        return issue

    def push(
        self,
        forge: str,
        repo: str,
        number: int,
        sha: str | None = None,
        message: str = "Update",
        files: dict[str, str] | None = None,
    ) -> str:
        """A new head commit on the PR's branch; returns its SHA. With git, a commit made
        here writes ``files`` (default: a new line in the PR's own file)."""
        state = self.repo(forge, repo)
        pull = self.pull(forge, repo, number)
        if files is None and sha is None and self.is_real(state, pull.head_sha):
            git = self.git_of(state)
            assert git is not None
            path = f"changes/pr-{number}.txt"
            text = git.read_file(pull.head_sha, path) or ""
            files = {path: f"{text}{message}\n"}
        new = self._add_commit(state, sha, pull.author, message, pull.head_sha, files=files)
        if self.git_of(state) is not None:
            # The scenario pushes to this pull request: another one that happens to share
            # the branch name (each defaults to "feature") keeps its head.
            self.set_branch(state, pull.head_ref, new, pull.author, follow=False, announce=False)
            self.follow_pull(state, pull, new)
            return new
        before = state.branches.get(pull.head_ref)
        pull.head_sha = new
        pull.commits.append(new)
        pull.updated_at = self.now()
        state.branches[pull.head_ref] = new
        self.note_ref_move(
            state, f"refs/heads/{pull.head_ref}", before, new, pull.author, announce=False
        )
        return new

    def update_pr(
        self,
        forge: str,
        repo: str,
        number: int,
        *,
        title: str | None = None,
        body: str | None = None,
        draft: bool | None = None,
        labels: Sequence[str] | None = None,
        state: str | None = None,
        base: str | None = None,
    ) -> SimPull:
        pull = self.pull(forge, repo, number)
        if title is not None:
            pull.title = title
        if body is not None:
            pull.body = body
        if draft is not None:
            pull.draft = draft
        if labels is not None:
            pull.labels = list(labels)
        if base is not None:
            pull.base = base
        if state is not None:
            if state not in ("open", "closed"):
                raise ScenarioError("state must be open or closed")
            pull.state = state
            pull.closed_at = self.now() if state == "closed" else None
        pull.updated_at = self.now()
        return pull

    def set_mergeable(self, forge: str, repo: str, number: int, mergeable: bool) -> None:
        """Override what git computes (a fault: the forge still computing, or wrong)."""
        pull = self.pull(forge, repo, number)
        pull.mergeable = mergeable
        pull.mergeable_set = mergeable

    # ------------------------------------------------------------------ CI results
    def set_status(
        self,
        forge: str,
        repo: str,
        sha: str,
        context: str,
        state: str,
        target_url: str | None = None,
        description: str | None = None,
        creator: str | None = None,
    ) -> SimStatus:
        allowed = (
            ("error", "failure", "pending", "success")
            if forge == "github"
            else ("pending", "success", "error", "failure", "warning", "skipped")
        )
        if state not in allowed:
            raise ScenarioError(f"{forge} status state must be one of {', '.join(allowed)}")
        repository = self.repo(forge, repo)
        who = creator or repository.owner
        self.user(forge, who)
        now = self.now()
        status = SimStatus(
            id=self.next_id(),
            sha=sha,
            context=context,
            state=state,
            target_url=target_url,
            description=description,
            creator=who,
            created_at=now,
            updated_at=now,
        )
        repository.statuses.append(status)
        self._run_scheduled_merges(repository)
        return status

    def set_check_run(
        self,
        repo: str,
        sha: str,
        name: str,
        status: str = "completed",
        conclusion: str | None = "success",
        details_url: str | None = None,
        app_id: int | None = None,
    ) -> SimCheckRun:
        """GitHub only: create the check run, or update the app's run of that name at ``sha``."""
        if status not in ("queued", "in_progress", "completed"):
            raise ScenarioError("status must be queued, in_progress or completed")
        if status == "completed" and conclusion is None:
            raise ScenarioError("a completed check run needs a conclusion")
        if status != "completed":
            conclusion = None
        repository = self.repo("github", repo)
        app = app_id or DEFAULT_CHECKS_APP_ID
        now = self.now()
        suite = next((s for s in repository.check_suites if s.sha == sha and s.app_id == app), None)
        if suite is None:
            branch = next((b for b, head in repository.branches.items() if head == sha), None)
            suite = SimCheckSuite(
                id=self.next_id(),
                sha=sha,
                app_id=app,
                head_branch=branch,
                created_at=now,
                updated_at=now,
            )
            repository.check_suites.append(suite)
        suite.updated_at = now
        for run in repository.check_runs:
            if run.sha == sha and run.name == name and run.app_id == app:
                run.status = status
                run.conclusion = conclusion
                run.details_url = details_url or run.details_url
                run.completed_at = now if status == "completed" else None
                return run
        run = SimCheckRun(
            id=self.next_id(),
            sha=sha,
            name=name,
            status=status,
            conclusion=conclusion,
            details_url=details_url,
            app_id=app,
            suite_id=suite.id,
            started_at=now,
            completed_at=now if status == "completed" else None,
        )
        repository.check_runs.append(run)
        return run

    def require_checks(
        self,
        forge: str,
        repo: str,
        branch: str,
        contexts: Sequence[str],
        *,
        strict: bool = False,
        enable_status_check: bool = True,
        app_id: int | None = None,
        required_approvals: int = 0,
    ) -> SimProtection:
        """Branch protection with required checks (GitHub names; Gitea glob patterns)."""
        repository = self.repo(forge, repo)
        now = self.now()
        protection = SimProtection(
            branch=branch,
            contexts=list(contexts),
            checks=[(c, app_id) for c in contexts],
            strict=strict,
            enable_status_check=enable_status_check,
            required_approvals=required_approvals,
            created_at=now,
            updated_at=now,
        )
        repository.protections[branch] = protection
        return protection

    def add_ruleset(
        self,
        repo: str,
        include: Sequence[str],
        contexts: Sequence[str] = (),
        *,
        name: str = "ruleset",
        required_approvals: int | None = None,
        code_owner_review: bool = False,
        enforcement: str = "active",
    ) -> SimRuleset:
        """A GitHub repository ruleset for branches (``include``: ``~DEFAULT_BRANCH``,
        ``~ALL`` or ``refs/heads/PATTERN``) with required status checks and, when
        ``required_approvals`` is given, a pull-request rule."""
        if enforcement not in ("active", "evaluate", "disabled"):
            raise ScenarioError(f"enforcement {enforcement!r}: active, evaluate or disabled")
        ruleset = SimRuleset(
            id=self.next_id(),
            name=name,
            include=list(include),
            contexts=list(contexts),
            required_approvals=required_approvals,
            code_owner_review=code_owner_review,
            enforcement=enforcement,
        )
        self.repo("github", repo).rulesets.append(ruleset)
        return ruleset

    def remove_protection(self, forge: str, repo: str, branch: str) -> None:
        self.repo(forge, repo).protections.pop(branch, None)

    # ------------------------------------------------------------------ reviews and comments
    def submit_review(
        self,
        forge: str,
        repo: str,
        number: int,
        reviewer: str,
        state: str,
        commit_sha: str | None = None,
        body: str = "",
    ) -> SimReview:
        """A human's submitted review (either forge's spelling of the state is accepted)."""
        table = GITHUB_REVIEW_STATES if forge == "github" else GITEA_REVIEW_STATES
        stored = table.get(state.upper())
        if stored is None:
            raise ScenarioError(f"unknown review state {state!r}")
        pull = self.pull(forge, repo, number)
        self.user(forge, reviewer)
        return self._store_review(pull, reviewer, stored, body, commit_sha or pull.head_sha, [])

    def add_comment(self, forge: str, repo: str, number: int, user: str, body: str) -> SimComment:
        pull = self.pull(forge, repo, number)
        self.user(forge, user)
        now = self.now()
        comment = SimComment(
            id=self.next_id(), number=number, user=user, body=body, created_at=now, updated_at=now
        )
        pull.comments.append(comment)
        return comment
