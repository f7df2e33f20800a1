"""What each simulated route requires of the caller, as the real forges document it.

One table per forge, one row per operation of the official description, each row with the
source it was taken from. The simulator answers a caller that lacks a row's permission the
way the forge does, so a bot set up with less than it needs fails here exactly as it would
in production.

GitHub:

- A GitHub App installation (and a fine-grained personal access token) holds a set of
  repository permissions (``contents: write``...). A route names the permissions that let a
  caller through (any one of them); without one GitHub answers 403 ``Resource not
  accessible by integration`` (``... by personal access token`` for a fine-grained token)
  and names what it accepts in ``X-Accepted-GitHub-Permissions``.
- A user token acts with the user's role on the repository. Routes for administrators
  (branch protection) answer a user who is not an admin 404, as if there were nothing there;
  writes that need push access answer 403.
- Sources: "Permissions required for GitHub Apps" and "Permissions required for fine-grained
  personal access tokens" (https://docs.github.com/en/rest/authentication/permissions-required-for-github-apps,
  https://docs.github.com/en/rest/authentication/permissions-required-for-fine-grained-personal-access-tokens),
  and each endpoint's page in the REST reference; the header and the 403 body:
  https://docs.github.com/en/rest/using-the-rest-api/troubleshooting-the-rest-api.

Gitea and Forgejo:

- A user has a role on a repository: read, write or admin (the owner is an admin). Each
  route's middleware in Gitea's API router (``routers/api/v1/api.go``: ``reqRepoReader``,
  ``reqRepoWriter``, ``reqAdmin``, ``reqToken``) decides; a missing role is a 403 with the
  middleware's message. Merging into a protected branch also needs the user on the branch's
  merge whitelist when it has one (``services/pull/check.go``: 405 "User not allowed to
  merge PR").
"""

from __future__ import annotations

from dataclasses import dataclass

GITHUB_APP_DOCS = (
    "https://docs.github.com/en/rest/authentication/permissions-required-for-github-apps"
)
GITHUB_PAT_DOCS = (
    "https://docs.github.com/en/rest/authentication/"
    "permissions-required-for-fine-grained-personal-access-tokens"
)
GITEA_ROUTER = "go-gitea/gitea routers/api/v1/api.go"

# What docs/github-app.md asks for of a bot that reviews and merges (Contents write is for
# merging; Issues is optional): the default of every simulated installation, so the whole
# suite runs at least privilege.
GITHUB_DOCUMENTED: dict[str, str] = {
    "checks": "read",
    "contents": "write",
    "metadata": "read",
    "pull_requests": "write",
    "statuses": "read",
}
LEVELS = {"none": 0, "read": 1, "write": 2, "admin": 3}
ROLES = ("none", "read", "write", "admin")


@dataclass(frozen=True)
class GitHubNeed:
    """What one GitHub operation requires.

    ``accepted``: (permission, level) pairs, any one of which lets an installation or a
    fine-grained token through (empty: none needed, or the route takes an App JWT).
    ``role``: the repository role a user token needs; ``admin_only``: a non-admin user gets
    404 rather than 403.
    """

    accepted: tuple[tuple[str, str], ...]
    source: str
    role: str = "read"
    admin_only: bool = False
    refusal: str = "Must have push access to repository"  # a user token's role too low

    def header(self) -> str:
        """``X-Accepted-GitHub-Permissions``: alternatives separated by ``;``."""
        return "; ".join(f"{name}={level}" for name, level in self.accepted)


def _gh(
    *accepted: tuple[str, str],
    page: str,
    role: str = "read",
    admin: bool = False,
    refusal: str = "Must have push access to repository",
) -> GitHubNeed:
    url = f"https://docs.github.com/en/rest/{page}"
    return GitHubNeed(accepted, url, role=role, admin_only=admin, refusal=refusal)


_METADATA = ("metadata", "read")
_PR_READ = ("pull_requests", "read")
_PR_WRITE = ("pull_requests", "write")

GITHUB: dict[str, GitHubNeed] = {
    "repos/get": _gh(_METADATA, page="repos/repos#get-a-repository"),
    "repos/get-branch": _gh(("contents", "read"), page="branches/branches#get-a-branch"),
    "repos/get-branch-rules": _gh(_METADATA, page="repos/rules#get-rules-for-a-branch"),
    "repos/get-branch-protection": _gh(
        ("administration", "read"),
        page="branches/branch-protection#get-branch-protection",
        role="admin",
        admin=True,
    ),
    "repos/get-status-checks-protection": _gh(
        ("administration", "read"),
        page="branches/branch-protection#get-status-checks-protection",
        role="admin",
        admin=True,
    ),
    "repos/get-all-status-check-contexts": _gh(
        ("administration", "read"),
        page="branches/branch-protection#get-all-status-check-contexts",
        role="admin",
        admin=True,
    ),
    "repos/get-collaborator-permission-level": _gh(
        _METADATA,
        page="collaborators/collaborators#get-repository-permissions-for-a-user",
        role="write",
        refusal="Must have push access to view collaborator permission.",
    ),
    "repos/list-pull-requests-associated-with-commit": _gh(
        _PR_READ, page="commits/commits#list-pull-requests-associated-with-a-commit"
    ),
    "repos/get-combined-status-for-ref": _gh(
        ("statuses", "read"),
        page="commits/statuses#get-the-combined-status-for-a-specific-reference",
    ),
    "repos/list-commit-statuses-for-ref": _gh(
        ("statuses", "read"), page="commits/statuses#list-commit-statuses-for-a-reference"
    ),
    "checks/list-for-ref": _gh(
        ("checks", "read"), page="checks/runs#list-check-runs-for-a-git-reference"
    ),
    "checks/list-suites-for-ref": _gh(
        ("checks", "read"), page="checks/suites#list-check-suites-for-a-git-reference"
    ),
    "pulls/list": _gh(_PR_READ, page="pulls/pulls#list-pull-requests"),
    "pulls/get": _gh(_PR_READ, ("contents", "read"), page="pulls/pulls#get-a-pull-request"),
    "pulls/list-files": _gh(_PR_READ, page="pulls/pulls#list-pull-requests-files"),
    "pulls/list-commits": _gh(_PR_READ, page="pulls/pulls#list-commits-on-a-pull-request"),
    "pulls/list-review-comments": _gh(
        _PR_READ, page="pulls/comments#list-review-comments-on-a-pull-request"
    ),
    "pulls/merge": _gh(
        ("contents", "write"),
        page="pulls/pulls#merge-a-pull-request",
        role="write",
    ),
    "pulls/list-reviews": _gh(_PR_READ, page="pulls/reviews#list-reviews-for-a-pull-request"),
    "pulls/create-review": _gh(_PR_WRITE, page="pulls/reviews#create-a-review-for-a-pull-request"),
    "pulls/get-review": _gh(_PR_READ, page="pulls/reviews#get-a-review-for-a-pull-request"),
    "pulls/dismiss-review": _gh(
        _PR_WRITE, page="pulls/reviews#dismiss-a-review-for-a-pull-request", role="write"
    ),
    "pulls/submit-review": _gh(_PR_WRITE, page="pulls/reviews#submit-a-review-for-a-pull-request"),
    "issues/list-comments": _gh(
        ("issues", "read"), _PR_READ, page="issues/comments#list-issue-comments"
    ),
    "issues/create-comment": _gh(
        ("issues", "write"), _PR_WRITE, page="issues/comments#create-an-issue-comment"
    ),
    "issues/update-comment": _gh(
        ("issues", "write"), _PR_WRITE, page="issues/comments#update-an-issue-comment"
    ),
    # Issues (sim/issues_api.py): reading one, and closing it ("Update an issue": "Issue
    # owners and users with push access or Triage role can edit an issue"; the handler
    # checks the owner-or-push part, as it needs the issue).
    "issues/get": _gh(("issues", "read"), page="issues/issues#get-an-issue"),
    "issues/update": _gh(("issues", "write"), page="issues/issues#update-an-issue"),
    # Ref operations (sim/refs_api.py): Contents write moves refs and merges, read compares.
    "git/create-ref": _gh(("contents", "write"), page="git/refs#create-a-reference", role="write"),
    "git/update-ref": _gh(("contents", "write"), page="git/refs#update-a-reference", role="write"),
    "git/delete-ref": _gh(("contents", "write"), page="git/refs#delete-a-reference", role="write"),
    "repos/merge": _gh(
        ("contents", "write"), page="branches/branches#merge-a-branch", role="write"
    ),
    "repos/compare-commits-with-basehead": _gh(
        ("contents", "read"), page="commits/commits#compare-two-commits"
    ),
}


def github_granted(granted: dict[str, str], need: GitHubNeed) -> bool:
    """Whether a permission set lets a caller through ``need`` (any accepted pair)."""
    if not need.accepted:
        return True
    return any(
        LEVELS.get(granted.get(name, "none"), 0) >= LEVELS[level] for name, level in need.accepted
    )


@dataclass(frozen=True)
class GiteaNeed:
    role: str  # read | write | admin
    message: str  # the middleware's 403 message
    source: str  # the router line it follows


_READER = "user should have specific read permission or be a repo admin or a site admin"
_WRITER = "user should have a permission to write to a repo"
_ADMIN = "user should be an owner or a collaborator with admin write of a repository"


def _gt(role: str, where: str) -> GiteaNeed:
    message = {"read": _READER, "write": _WRITER, "admin": _ADMIN}[role]
    return GiteaNeed(role, message, f"{GITEA_ROUTER}: {where}")


GITEA: dict[str, GiteaNeed] = {
    "repoGet": _gt("read", 'm.Combo("").Get(reqAnyRepoReader(), repo.Get)'),
    "repoListBranchProtection": _gt("admin", "/branch_protections group: reqToken(), reqAdmin()"),
    "repoGetBranchProtection": _gt("admin", "/branch_protections group: reqToken(), reqAdmin()"),
    "repoGetBranch": _gt("read", "/branches group: reqRepoReader(unit.TypeCode)"),
    # The handler lets through a repository admin, or a user asking about themself
    # (routers/api/v1/repo/collaborators.go GetRepoPermissions); see PERMISSION_QUERY.
    "repoGetRepoPermissions": _gt("read", "/collaborators/{collaborator}/permission: reqToken()"),
    "repoGetCombinedStatusByRef": _gt("read", "/commits group: reqRepoReader(unit.TypeCode)"),
    "repoListStatusesByRef": _gt("read", "/commits group: reqRepoReader(unit.TypeCode)"),
    "repoListStatuses": _gt("read", "/statuses group: reqRepoReader(unit.TypeCode)"),
    "repoListPullRequests": _gt("read", "/pulls group: reqRepoReader(unit.TypeCode)"),
    "repoGetPullRequest": _gt("read", "/pulls group: reqRepoReader(unit.TypeCode)"),
    "repoGetPullRequestFiles": _gt("read", "/pulls group: reqRepoReader(unit.TypeCode)"),
    "repoGetPullRequestCommits": _gt("read", "/pulls group: reqRepoReader(unit.TypeCode)"),
    "repoPullRequestIsMerged": _gt("read", "/pulls group: reqRepoReader(unit.TypeCode)"),
    # The merge itself checks the role and the branch's merge whitelist in the handler
    # (pull_service.CheckPullMergeable): 405 "User not allowed to merge PR".
    "repoMergePullRequest": _gt("read", "/pulls/{index}/merge: reqToken(), mustNotBeArchived"),
    "repoListPullReviews": _gt("read", "/pulls group: reqRepoReader(unit.TypeCode)"),
    "repoCreatePullReview": _gt("read", "/pulls/{index}/reviews: reqToken()"),
    "repoGetPullReview": _gt("read", "/pulls group: reqRepoReader(unit.TypeCode)"),
    "repoSubmitPullReview": _gt("read", "/pulls/{index}/reviews/{id}: reqToken()"),
    "repoDismissPullReview": _gt("read", "/pulls/{index}/reviews/{id}/dismissals: reqToken()"),
    "issueGetComments": _gt("read", "/issues/{index}/comments: reqRepoReader on issues or pulls"),
    "issueCreateComment": _gt("read", "/issues/{index}/comments: reqToken(), mustNotBeArchived"),
    "issueEditComment": _gt("read", "/issues/comments/{id}: reqToken(), mustNotBeArchived"),
    # Issues (sim/issues_api.py); EditIssue checks the poster or issue write in its handler.
    "issueGetIssue": _gt("read", "/issues group: reqRepoReader(unit.TypeIssues)"),
    "issueEditIssue": _gt("read", "/issues/{index} PATCH: reqToken(), mustNotBeArchived"),
    # Ref operations (sim/refs_api.py); the branch update is go-gitea/gitea#35951.
    "repoCreateBranch": _gt("write", "/branches POST: reqToken(), reqRepoWriter(unit.TypeCode)"),
    "repoDeleteBranch": _gt(
        "write", "/branches/* DELETE: reqToken(), reqRepoWriter(unit.TypeCode)"
    ),
    "repoUpdateBranch": _gt("write", "/branches/* PUT: reqToken(), reqRepoWriter(unit.TypeCode)"),
    "repoCompareDiff": _gt("read", "/compare/*: reqRepoReader(unit.TypeCode)"),
}


PERMISSION_QUERY = (
    "Only admins can query all permissions, repo admins can query all repo permissions, "
    "collaborators can query only their own"
)


def role_at_least(role: str, needed: str) -> bool:
    return LEVELS.get(role, 0) >= LEVELS[needed]
