"""GitHub JSON shapes (REST answers and webhook payload parts), as the official descriptions say."""

from __future__ import annotations

import zlib
from typing import Any

from reviewbot.sim.checks import (
    github_blocking_check,
    github_combined_state,
    latest_check_runs,
    latest_statuses,
    protection_for,
)
from reviewbot.sim.clock import forge_time
from reviewbot.sim.core import SimCore
from reviewbot.sim.permissions import GITHUB_DOCUMENTED
from reviewbot.sim.state import (
    SimApp,
    SimCheckRun,
    SimCheckSuite,
    SimComment,
    SimCommit,
    SimInstallation,
    SimProtection,
    SimPull,
    SimRepo,
    SimReview,
    SimRuleset,
    SimStatus,
    SimUser,
)

Json = dict[str, Any]


# What the simulated GitHub App is granted and subscribed to (the app and its installations).
APP_PERMISSIONS = GITHUB_DOCUMENTED
APP_EVENTS = ("check_run", "check_suite", "pull_request", "pull_request_review", "status")


def node_id(kind: str, ident: int) -> str:
    return f"{kind}_kwDO{ident:08d}"


class GitHubJson:
    """Renders simulator state the way api.github.com does."""

    def __init__(self, sim: SimCore) -> None:
        self.sim = sim

    @property
    def api(self) -> str:
        return self.sim.github_api_url

    @property
    def web(self) -> str:
        return f"{self.sim.base_url}/web"

    # ------------------------------------------------------------------ users
    def user(self, login: str) -> Json:
        u: SimUser = self.sim.user("github", login)
        api = f"{self.api}/users/{login}"
        return {
            "login": login,
            "id": u.id,
            "node_id": node_id("U", u.id),
            "avatar_url": f"{self.web}/avatars/{u.id}",
            "gravatar_id": "",
            "url": api,
            "html_url": f"{self.web}/{login}",
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": "Bot" if u.bot else "User",
            "site_admin": False,
        }

    def private_user(self, login: str) -> Json:
        u = self.sim.user("github", login)
        body = self.user(login)
        body.update(
            {
                "name": u.full_name,
                "company": None,
                "blog": "",
                "location": None,
                "email": None,
                "hireable": None,
                "bio": None,
                "twitter_username": None,
                "public_repos": sum(
                    1 for r in self.sim.repos["github"].values() if r.owner == login
                ),
                "public_gists": 0,
                "followers": 0,
                "following": 0,
                "created_at": forge_time(u.created_at),
                "updated_at": forge_time(u.created_at),
                "private_gists": 0,
                "total_private_repos": 0,
                "owned_private_repos": 0,
                "disk_usage": 0,
                "collaborators": 0,
                "two_factor_authentication": True,
            }
        )
        return body

    # ------------------------------------------------------------------ repositories
    def repository(self, repo: SimRepo, *, full: bool = False) -> Json:
        """The shape of a webhook ``repository`` (also valid for REST ``repository``)."""
        api = f"{self.api}/repos/{repo.full_name}"
        html = f"{self.web}/{repo.full_name}"
        open_pulls = sum(1 for p in repo.pulls.values() if p.open)
        body: Json = {
            "id": repo.id,
            "node_id": node_id("R", repo.id),
            "name": repo.name,
            "full_name": repo.full_name,
            "private": repo.private,
            "owner": self.user(repo.owner),
            "html_url": html,
            "description": None,
            "fork": False,
            "url": api,
            "forks_url": f"{api}/forks",
            "keys_url": f"{api}/keys{{/key_id}}",
            "collaborators_url": f"{api}/collaborators{{/collaborator}}",
            "teams_url": f"{api}/teams",
            "hooks_url": f"{api}/hooks",
            "issue_events_url": f"{api}/issues/events{{/number}}",
            "events_url": f"{api}/events",
            "assignees_url": f"{api}/assignees{{/user}}",
            "branches_url": f"{api}/branches{{/branch}}",
            "tags_url": f"{api}/tags",
            "blobs_url": f"{api}/git/blobs{{/sha}}",
            "git_tags_url": f"{api}/git/tags{{/sha}}",
            "git_refs_url": f"{api}/git/refs{{/sha}}",
            "trees_url": f"{api}/git/trees{{/sha}}",
            "statuses_url": f"{api}/statuses/{{sha}}",
            "languages_url": f"{api}/languages",
            "stargazers_url": f"{api}/stargazers",
            "contributors_url": f"{api}/contributors",
            "subscribers_url": f"{api}/subscribers",
            "subscription_url": f"{api}/subscription",
            "commits_url": f"{api}/commits{{/sha}}",
            "git_commits_url": f"{api}/git/commits{{/sha}}",
            "comments_url": f"{api}/comments{{/number}}",
            "issue_comment_url": f"{api}/issues/comments{{/number}}",
            "contents_url": f"{api}/contents/{{+path}}",
            "compare_url": f"{api}/compare/{{base}}...{{head}}",
            "merges_url": f"{api}/merges",
            "archive_url": f"{api}/{{archive_format}}{{/ref}}",
            "downloads_url": f"{api}/downloads",
            "issues_url": f"{api}/issues{{/number}}",
            "pulls_url": f"{api}/pulls{{/number}}",
            "milestones_url": f"{api}/milestones{{/number}}",
            "notifications_url": f"{api}/notifications{{?since,all,participating}}",
            "labels_url": f"{api}/labels{{/name}}",
            "releases_url": f"{api}/releases{{/id}}",
            "deployments_url": f"{api}/deployments",
            "created_at": forge_time(repo.created_at),
            "updated_at": forge_time(repo.created_at),
            "pushed_at": forge_time(repo.created_at),
            "git_url": f"git://sim.invalid/{repo.full_name}.git",
            "ssh_url": f"git@sim.invalid:{repo.full_name}.git",
            "clone_url": f"{html}.git",
            "svn_url": html,
            "homepage": None,
            "size": 1,
            "stargazers_count": 0,
            "watchers_count": 0,
            "language": "Python",
            "has_issues": True,
            "has_projects": False,
            "has_downloads": True,
            "has_wiki": False,
            "has_pages": False,
            "forks_count": 0,
            "mirror_url": None,
            "archived": False,
            "disabled": False,
            "open_issues_count": open_pulls,
            "license": None,
            "forks": 0,
            "open_issues": open_pulls,
            "watchers": 0,
            "default_branch": repo.default_branch,
            "is_template": False,
            "web_commit_signoff_required": False,
            "topics": [],
            "visibility": "private" if repo.private else "public",
            "custom_properties": {},
            "allow_squash_merge": True,
            "allow_merge_commit": True,
            "allow_rebase_merge": True,
            "allow_auto_merge": False,
            "delete_branch_on_merge": False,
        }
        if full:
            body["subscribers_count"] = 0
            body["network_count"] = 0
        return body

    # ------------------------------------------------------------------ pull requests
    def _label(self, repo: SimRepo, name: str) -> Json:
        ident = zlib.crc32(f"{repo.id}:{name}".encode())
        return {
            "id": ident,
            "node_id": node_id("LA", ident),
            "url": f"{self.api}/repos/{repo.full_name}/labels/{name}",
            "name": name,
            "description": "",
            "color": "ededed",
            "default": False,
        }

    def _branch_ref(self, repo: SimRepo, ref: str, sha: str) -> Json:
        return {
            "label": f"{repo.owner}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": self.user(repo.owner),
            "repo": self.repository(repo),
        }

    def _association(self, repo: SimRepo, login: str) -> str:
        if login == repo.owner:
            return "OWNER"
        return "COLLABORATOR" if login in repo.permissions else "CONTRIBUTOR"

    def mergeable_state(self, repo: SimRepo, pull: SimPull) -> str:
        if pull.merged:
            return "unknown"
        if not self.sim.pull_mergeable(repo, pull):
            return "dirty"
        if pull.draft:
            return "draft"
        protection = protection_for(repo, pull.base)
        if protection is not None and github_blocking_check(repo, protection, pull.head_sha):
            return "blocked"
        return "clean"

    def pull(self, repo: SimRepo, pull: SimPull, *, simple: bool = False) -> Json:
        api = f"{self.api}/repos/{repo.full_name}"
        html = f"{self.web}/{repo.full_name}/pull/{pull.number}"
        body: Json = {
            "url": f"{api}/pulls/{pull.number}",
            "id": pull.id,
            "node_id": node_id("PR", pull.id),
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": f"{api}/issues/{pull.number}",
            "number": pull.number,
            "state": pull.state,
            "locked": False,
            "title": pull.title,
            "user": self.user(pull.author),
            "body": pull.body or None,
            "created_at": forge_time(pull.created_at),
            "updated_at": forge_time(pull.updated_at),
            "closed_at": forge_time(pull.closed_at) if pull.closed_at is not None else None,
            "merged_at": forge_time(pull.merged_at) if pull.merged_at is not None else None,
            "merge_commit_sha": pull.merge_commit_sha,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [],
            "requested_teams": [],
            "labels": [self._label(repo, name) for name in pull.labels],
            "milestone": None,
            "draft": pull.draft,
            "commits_url": f"{api}/pulls/{pull.number}/commits",
            "review_comments_url": f"{api}/pulls/{pull.number}/comments",
            "review_comment_url": f"{api}/pulls/comments{{/number}}",
            "comments_url": f"{api}/issues/{pull.number}/comments",
            "statuses_url": f"{api}/statuses/{pull.head_sha}",
            "head": self._branch_ref(repo, pull.head_ref, pull.head_sha),
            "base": self._branch_ref(repo, pull.base, pull.base_sha),
            "_links": {
                "self": {"href": f"{api}/pulls/{pull.number}"},
                "html": {"href": html},
                "issue": {"href": f"{api}/issues/{pull.number}"},
                "comments": {"href": f"{api}/issues/{pull.number}/comments"},
                "review_comments": {"href": f"{api}/pulls/{pull.number}/comments"},
                "review_comment": {"href": f"{api}/pulls/comments{{/number}}"},
                "commits": {"href": f"{api}/pulls/{pull.number}/commits"},
                "statuses": {"href": f"{api}/statuses/{pull.head_sha}"},
            },
            "author_association": self._association(repo, pull.author),
            "auto_merge": None,
            "active_lock_reason": None,
        }
        if simple:
            return body
        mergeable = self.sim.pull_mergeable(repo, pull)
        body.update(
            {
                "merged": pull.merged,
                "mergeable": None if pull.merged else mergeable,
                "rebaseable": None if pull.merged else mergeable,
                "mergeable_state": self.mergeable_state(repo, pull),
                "merged_by": self.user(pull.merged_by) if pull.merged_by else None,
                "comments": len(pull.comments),
                "review_comments": sum(len(r.comments) for r in pull.reviews),
                "maintainer_can_modify": False,
                "commits": len(pull.commits),
                "additions": len(pull.commits),
                "deletions": 0,
                "changed_files": len(pull.commits),
            }
        )
        return body

    def review(self, repo: SimRepo, pull: SimPull, review: SimReview) -> Json:
        api = f"{self.api}/repos/{repo.full_name}/pulls/{pull.number}"
        html = f"{self.web}/{repo.full_name}/pull/{pull.number}#pullrequestreview-{review.id}"
        body: Json = {
            "id": review.id,
            "node_id": node_id("PRR", review.id),
            "user": self.user(review.user),
            "body": review.body,
            "state": review.state,
            "html_url": html,
            "pull_request_url": api,
            "_links": {"html": {"href": html}, "pull_request": {"href": api}},
            "commit_id": review.commit_id,
            "author_association": self._association(repo, review.user),
        }
        if review.submitted_at is not None:
            body["submitted_at"] = forge_time(review.submitted_at)
        return body

    def review_comment(self, repo: SimRepo, pull: SimPull, review: SimReview, index: int) -> Json:
        c = review.comments[index]
        api = f"{self.api}/repos/{repo.full_name}/pulls"
        html = f"{self.web}/{repo.full_name}/pull/{pull.number}#discussion_r{c.id}"
        position = c.position if c.position is not None else (c.line or 1)
        return {
            "url": f"{api}/comments/{c.id}",
            "pull_request_review_id": review.id,
            "id": c.id,
            "node_id": node_id("PRRC", c.id),
            "diff_hunk": "@@ -1 +1 @@",
            "path": c.path,
            "position": position,
            "original_position": position,
            "commit_id": review.commit_id,
            "original_commit_id": review.commit_id,
            "user": self.user(review.user),
            "body": c.body,
            "created_at": forge_time(review.updated_at),
            "updated_at": forge_time(review.updated_at),
            "html_url": html,
            "pull_request_url": f"{api}/{pull.number}",
            "author_association": self._association(repo, review.user),
            "_links": {
                "self": {"href": f"{api}/comments/{c.id}"},
                "html": {"href": html},
                "pull_request": {"href": f"{api}/{pull.number}"},
            },
            "line": c.line or position,
            "original_line": c.line or position,
            "side": c.side or "RIGHT",
        }

    def issue_comment(self, repo: SimRepo, comment: SimComment) -> Json:
        api = f"{self.api}/repos/{repo.full_name}/issues"
        return {
            "id": comment.id,
            "node_id": node_id("IC", comment.id),
            "url": f"{api}/comments/{comment.id}",
            "html_url": (
                f"{self.web}/{repo.full_name}/pull/{comment.number}#issuecomment-{comment.id}"
            ),
            "body": comment.body,
            "user": self.user(comment.user),
            "created_at": forge_time(comment.created_at),
            "updated_at": forge_time(comment.updated_at),
            "issue_url": f"{api}/{comment.number}",
            "author_association": self._association(repo, comment.user),
            "performed_via_github_app": None,
            "reactions": {
                "url": f"{api}/comments/{comment.id}/reactions",
                "total_count": 0,
                "+1": 0,
                "-1": 0,
                "laugh": 0,
                "hooray": 0,
                "confused": 0,
                "heart": 0,
                "rocket": 0,
                "eyes": 0,
            },
        }

    # ------------------------------------------------------------------ commits and CI
    def commit(self, repo: SimRepo, commit: SimCommit) -> Json:
        api = f"{self.api}/repos/{repo.full_name}"
        person = {
            "name": commit.author,
            "email": f"{commit.author}@example.invalid",
            "date": forge_time(commit.created_at),
        }
        return {
            "url": f"{api}/commits/{commit.sha}",
            "sha": commit.sha,
            "node_id": node_id("C", int(commit.sha[:7], 16)),
            "html_url": f"{self.web}/{repo.full_name}/commit/{commit.sha}",
            "comments_url": f"{api}/commits/{commit.sha}/comments",
            "commit": {
                "url": f"{api}/git/commits/{commit.sha}",
                "author": person,
                "committer": person,
                "message": commit.message,
                "comment_count": 0,
                "tree": {"sha": commit.tree_sha, "url": f"{api}/git/trees/{commit.tree_sha}"},
                "verification": {
                    "verified": False,
                    "reason": "unsigned",
                    "payload": None,
                    "signature": None,
                },
            },
            "author": self.user(commit.author),
            "committer": self.user(commit.author),
            "parents": [
                {
                    "sha": p,
                    "url": f"{api}/commits/{p}",
                    "html_url": f"{self.web}/{repo.full_name}/commit/{p}",
                }
                for p in commit.parents
            ],
        }

    def simple_status(self, repo: SimRepo, status: SimStatus) -> Json:
        return {
            "id": status.id,
            "node_id": node_id("SC", status.id),
            "state": status.state,
            "description": status.description,
            # The description types target_url as a required, non-null string.
            "target_url": status.target_url or "",
            "context": status.context,
            "avatar_url": None,
            "required": None,
            "url": f"{self.api}/repos/{repo.full_name}/statuses/{status.sha}",
            "created_at": forge_time(status.created_at),
            "updated_at": forge_time(status.updated_at),
        }

    def status(self, repo: SimRepo, status: SimStatus) -> Json:
        body = self.simple_status(repo, status)
        del body["required"]
        body["description"] = status.description or ""
        body["creator"] = self.user(status.creator)
        return body

    def combined_status(self, repo: SimRepo, sha: str) -> Json:
        statuses = latest_statuses(repo, sha)
        return {
            "state": github_combined_state(statuses),
            "statuses": [self.simple_status(repo, s) for s in statuses],
            "sha": sha,
            "total_count": len(statuses),
            "repository": self.repository(repo),
            "commit_url": f"{self.api}/repos/{repo.full_name}/commits/{sha}",
            "url": f"{self.api}/repos/{repo.full_name}/commits/{sha}/status",
        }

    def app(self, app: SimApp) -> Json:
        stamp = forge_time(app.created_at)
        return {
            "id": app.id,
            "slug": app.slug,
            "node_id": node_id("A", app.id),
            "owner": self.user(app.owner),
            "name": app.name,
            "description": None,
            "external_url": f"{self.web}/apps/{app.slug}",
            "html_url": f"{self.web}/apps/{app.slug}",
            "created_at": stamp,
            "updated_at": stamp,
            "permissions": dict(APP_PERMISSIONS),
            "events": list(APP_EVENTS),
        }

    def checks_app(self, app_id: int) -> Json:
        app = self.sim.apps.get(app_id)
        if app is not None:
            return self.app(app)
        return {
            "id": app_id,
            "slug": "github-actions",
            "node_id": node_id("A", app_id),
            "owner": self.user("github"),
            "name": "GitHub Actions",
            "description": "Automate your workflow from idea to production",
            "external_url": "https://help.github.com/en/actions",
            "html_url": f"{self.web}/apps/github-actions",
            "created_at": "2018-07-30T09:30:17Z",
            "updated_at": "2019-12-10T19:04:12Z",
            "permissions": {"checks": "write", "metadata": "read"},
            "events": [],
        }

    def _minimal_pulls(self, repo: SimRepo, sha: str) -> list[Json]:
        base_repo = {"id": repo.id, "url": f"{self.api}/repos/{repo.full_name}", "name": repo.name}
        return [
            {
                "id": p.id,
                "number": p.number,
                "url": f"{self.api}/repos/{repo.full_name}/pulls/{p.number}",
                "head": {"ref": p.head_ref, "sha": p.head_sha, "repo": base_repo},
                "base": {"ref": p.base, "sha": p.base_sha, "repo": base_repo},
            }
            for p in repo.pulls.values()
            if p.open and p.head_sha == sha
        ]

    def check_run(self, repo: SimRepo, run: SimCheckRun) -> Json:
        api = f"{self.api}/repos/{repo.full_name}/check-runs/{run.id}"
        return {
            "id": run.id,
            "head_sha": run.sha,
            "node_id": node_id("CR", run.id),
            "external_id": run.external_id or "",
            "url": api,
            "html_url": f"{self.web}/{repo.full_name}/runs/{run.id}",
            "details_url": run.details_url,
            "status": run.status,
            "conclusion": run.conclusion,
            "started_at": forge_time(run.started_at),
            "completed_at": forge_time(run.completed_at) if run.completed_at is not None else None,
            "output": {
                "title": run.title,
                "summary": run.summary,
                "text": None,
                "annotations_count": 0,
                "annotations_url": f"{api}/annotations",
            },
            "name": run.name,
            "check_suite": {"id": run.suite_id},
            "app": self.checks_app(run.app_id),
            "pull_requests": self._minimal_pulls(repo, run.sha),
        }

    def check_runs(self, repo: SimRepo, sha: str, latest: bool = True) -> list[Json]:
        runs = (
            latest_check_runs(repo, sha) if latest else [r for r in repo.check_runs if r.sha == sha]
        )
        return [self.check_run(repo, r) for r in runs]

    def suite_state(self, repo: SimRepo, suite: SimCheckSuite) -> tuple[str, str | None]:
        runs = [r for r in repo.check_runs if r.suite_id == suite.id]
        if any(r.status != "completed" for r in runs):
            return ("in_progress" if runs else "queued"), None
        order = (
            "action_required",
            "cancelled",
            "timed_out",
            "failure",
            "neutral",
            "skipped",
            "success",
        )
        conclusions = [r.conclusion or "neutral" for r in runs]
        worst = min(conclusions, key=order.index) if conclusions else "neutral"
        if worst == "skipped":
            worst = "success"
        return "completed", worst

    def check_suite(self, repo: SimRepo, suite: SimCheckSuite) -> Json:
        status, conclusion = self.suite_state(repo, suite)
        commit = repo.commits.get(suite.sha)
        person = {"name": commit.author if commit else repo.owner, "email": "ci@example.invalid"}
        return {
            "id": suite.id,
            "node_id": node_id("CS", suite.id),
            "head_branch": suite.head_branch,
            "head_sha": suite.sha,
            "status": status,
            "conclusion": conclusion,
            "url": f"{self.api}/repos/{repo.full_name}/check-suites/{suite.id}",
            "before": commit.parents[0] if commit and commit.parents else None,
            "after": suite.sha,
            "pull_requests": self._minimal_pulls(repo, suite.sha),
            "app": self.checks_app(suite.app_id),
            "repository": self.repository(repo),
            "created_at": forge_time(suite.created_at),
            "updated_at": forge_time(suite.updated_at),
            "head_commit": {
                "id": suite.sha,
                "tree_id": commit.tree_sha if commit else suite.sha,
                "message": commit.message if commit else "",
                "timestamp": forge_time(commit.created_at if commit else suite.created_at),
                "author": person,
                "committer": person,
            },
            "latest_check_runs_count": sum(1 for r in repo.check_runs if r.suite_id == suite.id),
            "check_runs_url": (
                f"{self.api}/repos/{repo.full_name}/check-suites/{suite.id}/check-runs"
            ),
            "rerequestable": True,
            "runs_rerequestable": True,
        }

    # ------------------------------------------------------------------ protection
    def status_check_policy(self, repo: SimRepo, protection: SimProtection) -> Json:
        url = f"{self.api}/repos/{repo.full_name}/branches/{protection.branch}/protection"
        return {
            "url": f"{url}/required_status_checks",
            "strict": protection.strict,
            "contexts": list(protection.contexts),
            "contexts_url": f"{url}/required_status_checks/contexts",
            "checks": [{"context": c, "app_id": a} for c, a in protection.checks],
        }

    def branch_protection(self, repo: SimRepo, protection: SimProtection) -> Json:
        url = f"{self.api}/repos/{repo.full_name}/branches/{protection.branch}/protection"
        body: Json = {
            "url": url,
            "required_status_checks": self.status_check_policy(repo, protection),
            "enforce_admins": {"url": f"{url}/enforce_admins", "enabled": False},
            "required_linear_history": {"enabled": False},
            "allow_force_pushes": {"enabled": False},
            "allow_deletions": {"enabled": False},
            "block_creations": {"enabled": False},
            "required_conversation_resolution": {"enabled": False},
            "required_signatures": {"url": f"{url}/required_signatures", "enabled": False},
        }
        if protection.required_approvals:
            body["required_pull_request_reviews"] = {
                "url": f"{url}/required_pull_request_reviews",
                "dismiss_stale_reviews": False,
                "require_code_owner_reviews": False,
                "required_approving_review_count": protection.required_approvals,
            }
        return body

    def branch_rules(self, repo: SimRepo, rulesets: list[SimRuleset]) -> list[Json]:
        """``repository-rule-detailed`` items: each active rule with its ruleset's source."""
        out: list[Json] = []
        for ruleset in rulesets:
            source = {
                "ruleset_source_type": "Repository",
                "ruleset_source": repo.full_name,
                "ruleset_id": ruleset.id,
            }
            if ruleset.required_approvals is not None:
                parameters: Json = {
                    "dismiss_stale_reviews_on_push": False,
                    "require_code_owner_review": ruleset.code_owner_review,
                    "require_last_push_approval": False,
                    "required_approving_review_count": ruleset.required_approvals,
                    "required_review_thread_resolution": False,
                }
                out.append({"type": "pull_request", "parameters": parameters, **source})
            if ruleset.contexts:
                checks = [{"context": c} for c in ruleset.contexts]
                parameters = {
                    "required_status_checks": checks,
                    "strict_required_status_checks_policy": False,
                }
                out.append({"type": "required_status_checks", "parameters": parameters, **source})
        return out

    def branch(self, repo: SimRepo, name: str, protection: SimProtection | None) -> Json:
        api = f"{self.api}/repos/{repo.full_name}/branches/{name}"
        commit = repo.commits[repo.branches[name]]
        body: Json = {
            "name": name,
            "commit": self.commit(repo, commit),
            "_links": {"self": api, "html": f"{self.web}/{repo.full_name}/tree/{name}"},
            "protected": protection is not None,
            "protection_url": f"{api}/protection",
        }
        # What "Get a branch" shows any reader: whether it is protected and the required
        # status checks; the rest of the protection (reviews, restrictions) is for admins.
        checks = protection.checks if protection is not None else []
        body["protection"] = {
            "enabled": protection is not None,
            "required_status_checks": {
                "enforcement_level": "non_admins" if protection is not None else "off",
                "contexts": list(protection.contexts) if protection is not None else [],
                "checks": [{"context": c, "app_id": app} for c, app in checks],
            },
        }
        return body

    # ------------------------------------------------------------------ apps
    def installation(self, installation: SimInstallation) -> Json:
        app = self.sim.apps[installation.app_id]
        account = self.sim.user("github", installation.account)
        stamp = forge_time(installation.created_at)
        return {
            "id": installation.id,
            "account": self.user(installation.account),
            "repository_selection": "selected",
            "access_tokens_url": f"{self.api}/app/installations/{installation.id}/access_tokens",
            "repositories_url": f"{self.api}/installation/repositories",
            "html_url": f"{self.web}/settings/installations/{installation.id}",
            "app_id": app.id,
            "app_slug": app.slug,
            "target_id": account.id,
            "target_type": "User",
            "permissions": dict(installation.permissions),
            "events": list(APP_EVENTS),
            "created_at": stamp,
            "updated_at": stamp,
            "single_file_name": None,
            "suspended_by": None,
            "suspended_at": None,
        }

    def installation_lite(self, installation: SimInstallation) -> Json:
        return {"id": installation.id, "node_id": node_id("MDIz", installation.id)}

    def rate_limit(self, limit: int, remaining: int, reset: int) -> Json:
        core = {"limit": limit, "remaining": remaining, "reset": reset, "used": limit - remaining}
        search = {"limit": 30, "remaining": 30, "reset": reset, "used": 0}
        return {"resources": {"core": core, "search": search}, "rate": core}
