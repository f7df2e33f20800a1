"""Gitea JSON shapes: API answers, also used in webhook payloads (Gitea sends the same structs)."""

from __future__ import annotations

from typing import Any

from reviewbot.sim.checks import gitea_combined_state, latest_statuses
from reviewbot.sim.clock import forge_time
from reviewbot.sim.core import SimCore
from reviewbot.sim.state import (
    SimComment,
    SimCommit,
    SimProtection,
    SimPull,
    SimRepo,
    SimReview,
    SimStatus,
)

Json = dict[str, Any]


class GiteaJson:
    def __init__(self, sim: SimCore) -> None:
        self.sim = sim

    @property
    def web(self) -> str:
        return self.sim.gitea_url

    @property
    def api(self) -> str:
        return f"{self.sim.gitea_url}/api/v1"

    def user(self, login: str) -> Json:
        u = self.sim.user("gitea", login)
        return {
            "id": u.id,
            "login": login,
            "login_name": "",
            "source_id": 0,
            "full_name": u.full_name,
            "email": u.email,
            "avatar_url": f"{self.web}/avatars/{u.id}",
            "html_url": f"{self.web}/{login}",
            "language": "",
            "is_admin": False,
            "last_login": forge_time(u.created_at),
            "created": forge_time(u.created_at),
            "restricted": False,
            "active": True,
            "prohibit_login": False,
            "location": "",
            "website": "",
            "description": "",
            "visibility": "public",
            "followers_count": 0,
            "following_count": 0,
            "starred_repos_count": 0,
            "username": login,  # Gitea adds it to every user for Gogs compatibility
            "pronouns": "",  # Forgejo
        }

    def repository(self, repo: SimRepo, viewer: str | None = None) -> Json:
        html = f"{self.web}/{repo.full_name}"
        permission = self.sim.permission(repo, viewer) if viewer else "read"
        stamp = forge_time(repo.created_at)
        return {
            "id": repo.id,
            "owner": self.user(repo.owner),
            "name": repo.name,
            "full_name": repo.full_name,
            "description": "",
            "empty": False,
            "private": repo.private,
            "fork": False,
            "template": False,
            "mirror": False,
            "size": 1,
            "language": "",
            "languages_url": f"{self.api}/repos/{repo.full_name}/languages",
            "html_url": html,
            "url": f"{self.api}/repos/{repo.full_name}",
            "link": "",
            "ssh_url": f"ssh://git@sim.invalid/{repo.full_name}.git",
            "clone_url": f"{html}.git",
            "original_url": "",
            "website": "",
            "stars_count": 0,
            "forks_count": 0,
            "watchers_count": 1,
            "open_issues_count": 0,
            "open_pr_counter": sum(1 for p in repo.pulls.values() if p.open),
            "release_counter": 0,
            "default_branch": repo.default_branch,
            "archived": False,
            "created_at": stamp,
            "updated_at": stamp,
            "archived_at": "1970-01-01T00:00:00Z",
            "permissions": {
                "admin": permission == "admin",
                "push": permission in ("admin", "write"),
                "pull": permission != "none",
            },
            "has_code": True,
            "has_issues": True,
            "internal_tracker": {
                "enable_time_tracker": False,
                "allow_only_contributors_to_track_time": True,
                "enable_issue_dependencies": True,
            },
            "has_wiki": False,
            "has_pull_requests": True,
            "has_projects": False,
            "projects_mode": "all",
            "has_releases": True,
            "has_packages": False,
            "has_actions": True,
            "ignore_whitespace_conflicts": False,
            "allow_merge_commits": True,
            "allow_rebase": True,
            "allow_rebase_explicit": True,
            "allow_squash_merge": True,
            "allow_fast_forward_only_merge": True,
            "allow_rebase_update": True,
            "allow_manual_merge": repo.allow_manual_merge,
            "autodetect_manual_merge": False,
            "default_delete_branch_after_merge": False,
            "default_merge_style": "merge",
            "default_allow_maintainer_edit": False,
            "avatar_url": "",
            "internal": False,
            "mirror_interval": "",
            "object_format_name": "sha1",
            "mirror_updated": "0001-01-01T00:00:00Z",
            "repo_transfer": None,
            "parent": None,
            # Fields Forgejo adds (seen in real deliveries); harmless to Gitea clients.
            "wiki_branch": repo.default_branch,
            "globally_editable_wiki": False,
            "default_update_style": "merge",
            "topics": [],
            "licenses": [],
        }

    def _branch_info(self, repo: SimRepo, ref: str, sha: str) -> Json:
        return {
            "label": ref,
            "ref": ref,
            "sha": sha,
            "repo_id": repo.id,
            "repo": self.repository(repo),
        }

    def _label(self, repo: SimRepo, name: str, index: int) -> Json:
        return {
            "id": repo.id * 100 + index,
            "name": name,
            "exclusive": False,
            "is_archived": False,
            "color": "ededed",
            "description": "",
            "url": f"{self.api}/repos/{repo.full_name}/labels/{repo.id * 100 + index}",
        }

    def pull(self, repo: SimRepo, pull: SimPull) -> Json:
        html = f"{self.web}/{repo.full_name}/pulls/{pull.number}"
        return {
            "id": pull.id,
            "url": html,
            "number": pull.number,
            "user": self.user(pull.author),
            "title": pull.title,
            "body": pull.body,
            "labels": [self._label(repo, n, i) for i, n in enumerate(pull.labels, start=1)],
            "milestone": None,
            "assignee": None,
            "assignees": None,
            "requested_reviewers": None,
            "requested_reviewers_teams": None,
            "state": pull.state,
            "draft": pull.draft,
            "is_locked": False,
            "comments": len(pull.comments),
            "review_comments": sum(len(r.comments) for r in pull.reviews),
            "additions": len(pull.commits),
            "deletions": 0,
            "changed_files": len(pull.commits),
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "mergeable": self.sim.pull_mergeable(repo, pull) and not pull.merged,
            "merged": pull.merged,
            "merged_at": forge_time(pull.merged_at) if pull.merged_at is not None else None,
            "merge_commit_sha": pull.merge_commit_sha,
            "merged_by": self.user(pull.merged_by) if pull.merged_by else None,
            "allow_maintainer_edit": False,
            "base": self._branch_info(repo, pull.base, pull.base_sha),
            "head": self._branch_info(repo, pull.head_ref, pull.head_sha),
            "merge_base": pull.base_sha,
            "due_date": None,
            "created_at": forge_time(pull.created_at),
            "updated_at": forge_time(pull.updated_at),
            "closed_at": forge_time(pull.closed_at) if pull.closed_at is not None else None,
            "pin_order": 0,
            "flow": 0,  # Forgejo: 0 = a PR from a branch
        }

    def review(self, repo: SimRepo, pull: SimPull, review: SimReview) -> Json:
        html = f"{self.web}/{repo.full_name}/pulls/{pull.number}#issuecomment-{review.id}"
        return {
            "id": review.id,
            "user": self.user(review.user),
            "team": None,
            "state": review.state,
            "body": review.body,
            "commit_id": review.commit_id,
            "stale": review.commit_id != pull.head_sha,
            "official": review.state in ("APPROVED", "REQUEST_CHANGES"),
            "dismissed": review.dismissed,
            "comments_count": len(review.comments),
            "submitted_at": forge_time(review.submitted_at or review.updated_at),
            "updated_at": forge_time(review.updated_at),
            "html_url": html,
            "pull_request_url": f"{self.web}/{repo.full_name}/pulls/{pull.number}",
        }

    def comment(self, repo: SimRepo, comment: SimComment) -> Json:
        html = f"{self.web}/{repo.full_name}/pulls/{comment.number}"
        return {
            "id": comment.id,
            "html_url": f"{html}#issuecomment-{comment.id}",
            "pull_request_url": html,
            "issue_url": "",
            "user": self.user(comment.user),
            "original_author": "",
            "original_author_id": 0,
            "body": comment.body,
            "assets": [],
            "created_at": forge_time(comment.created_at),
            "updated_at": forge_time(comment.updated_at),
        }

    def status(self, repo: SimRepo, status: SimStatus) -> Json:
        return {
            "id": status.id,
            "status": status.state,
            "target_url": status.target_url or "",
            "description": status.description or "",
            "url": f"{self.api}/repos/{repo.full_name}/statuses/{status.sha}",
            "context": status.context,
            "creator": self.user(status.creator),
            "created_at": forge_time(status.created_at),
            "updated_at": forge_time(status.updated_at),
        }

    def combined_status(self, repo: SimRepo, sha: str) -> Json:
        statuses = latest_statuses(repo, sha)
        return {
            "state": gitea_combined_state(statuses),
            "sha": sha,
            "total_count": len(statuses),
            "statuses": [self.status(repo, s) for s in statuses],
            "repository": self.repository(repo),
            "commit_url": f"{self.api}/repos/{repo.full_name}/commits/{sha}",
            "url": f"{self.api}/repos/{repo.full_name}/commits/{sha}/status",
        }

    def protection(self, protection: SimProtection) -> Json:
        return {
            "branch_name": protection.branch,
            "rule_name": protection.branch,
            "priority": 0,
            "enable_push": False,
            "enable_push_whitelist": False,
            "push_whitelist_usernames": [],
            "push_whitelist_teams": [],
            "push_whitelist_deploy_keys": False,
            "enable_force_push": False,
            "enable_force_push_allowlist": False,
            "force_push_allowlist_usernames": [],
            "force_push_allowlist_teams": [],
            "force_push_allowlist_deploy_keys": False,
            "enable_merge_whitelist": False,
            "merge_whitelist_usernames": [],
            "merge_whitelist_teams": [],
            "enable_status_check": protection.enable_status_check,
            "status_check_contexts": list(protection.contexts),
            "required_approvals": protection.required_approvals,
            "enable_approvals_whitelist": False,
            "approvals_whitelist_username": [],
            "approvals_whitelist_teams": [],
            "block_on_rejected_reviews": False,
            "block_on_official_review_requests": False,
            "block_on_outdated_branch": False,
            "dismiss_stale_approvals": False,
            "ignore_stale_approvals": False,
            "require_signed_commits": False,
            "protected_file_patterns": "",
            "unprotected_file_patterns": "",
            "block_admin_merge_override": False,
            "created_at": forge_time(protection.created_at),
            "updated_at": forge_time(protection.updated_at),
        }

    def payload_commit(self, repo: SimRepo, commit: SimCommit) -> Json:
        person = {
            "name": commit.author,
            "email": f"{commit.author}@example.invalid",
            "username": commit.author,
        }
        return {
            "id": commit.sha,
            "message": commit.message,
            "url": f"{self.web}/{repo.full_name}/commit/{commit.sha}",
            "author": person,
            "committer": person,
            "verification": None,
            "timestamp": forge_time(commit.created_at),
            "added": [],
            "removed": [],
            "modified": [],
        }

    def branch(
        self, repo: SimRepo, name: str, protection: SimProtection | None, viewer: str
    ) -> Json:
        commit = repo.commits[repo.branches[name]]
        can_write = self.sim.permission(repo, viewer) in ("admin", "write")
        may_merge = self.sim.may_merge_gitea(repo, name, viewer)
        return {
            "name": name,
            "commit": self.payload_commit(repo, commit),
            "protected": protection is not None,
            "required_approvals": protection.required_approvals if protection else 0,
            "enable_status_check": bool(protection and protection.enable_status_check),
            "status_check_contexts": list(protection.contexts) if protection else [],
            "user_can_push": can_write and protection is None,
            "user_can_merge": may_merge,
            # Filled for repository admins only (services/convert/convert.go ToBranch).
            "effective_branch_protection_name": (
                protection.branch
                if protection and self.sim.permission(repo, viewer) == "admin"
                else ""
            ),
        }

    def commit(self, repo: SimRepo, commit: SimCommit, files: list[Json] | None = None) -> Json:
        api = f"{self.api}/repos/{repo.full_name}"
        person = {
            "name": commit.author,
            "email": f"{commit.author}@example.invalid",
            "date": forge_time(commit.created_at),
        }
        return {
            "url": f"{api}/git/commits/{commit.sha}",
            "sha": commit.sha,
            "created": forge_time(commit.created_at),
            "html_url": f"{self.web}/{repo.full_name}/commit/{commit.sha}",
            "commit": {
                "url": f"{api}/git/commits/{commit.sha}",
                "author": person,
                "committer": person,
                "message": commit.message,
                "tree": {
                    "url": f"{api}/git/trees/{commit.tree_sha}",
                    "sha": commit.tree_sha,
                    "created": forge_time(commit.created_at),
                },
                "verification": {
                    "verified": False,
                    "reason": "gpg.error.not_signed_commit",
                    "signature": "",
                    "signer": None,
                    "payload": "",
                },
            },
            "author": self.user(commit.author),
            "committer": self.user(commit.author),
            "parents": [
                {
                    "url": f"{api}/git/commits/{p}",
                    "sha": p,
                    "created": forge_time(commit.created_at),
                }
                for p in commit.parents
            ],
            "files": files or [],
            "stats": {"total": 1, "additions": 1, "deletions": 0},
        }
