"""Ref operations of both forges: branches at a commit, fast-forward moves, merges of two
refs, comparisons. They work on git-backed repositories (and, from the model's parents, on
virtual commits).

GitHub (REST reference, "Git references", "Branches: merge a branch", "Commits: compare two
commits"): ``POST /git/refs`` 201, ``PATCH /git/refs/heads/B`` 200 (422 "Update is not a fast
forward" unless ``force``), ``DELETE /git/refs/heads/B`` 204 (422 for the default branch or a
protected one), ``POST /merges`` 201 with the merge commit (204 nothing to merge, 409 "Merge
conflict", 404 "Base does not exist" / "Head does not exist"), ``GET /compare/BASE...HEAD``
200.

Gitea (``routers/api/v1/repo/branch.go``, ``repo/compare.go``; the update added by
go-gitea/gitea#35951): ``POST /branches`` 201 (409 the branch exists, 404 no such ref),
``DELETE /branches/B`` 204, ``PUT /branches/B`` 204 (409 "The update is not a fast-forward."),
``GET /compare/BASE...HEAD`` 200.

These routes are kept apart from the ones of the reduced API descriptions (``routes()``),
which the spec tests hold to the descriptions exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reviewbot.sim.errors import ApiError
from reviewbot.sim.http import Call, Reply, Route
from reviewbot.sim.state import SimCommit, SimRepo

if TYPE_CHECKING:
    from reviewbot.sim.gitea_api import GiteaApi
    from reviewbot.sim.github_api import GitHubApi

REPO = "/repos/{owner}/{repo}"


def _body(call: Call) -> dict[str, Any]:
    return call.body if isinstance(call.body, dict) else {}


def _split_basehead(basehead: str) -> tuple[str, str]:
    base, sep, head = basehead.partition("...")
    if not sep:
        base, sep, head = basehead.partition("..")
    if not sep or not base or not head:
        raise ApiError(404, "Not Found")
    return base, head


class GitHubRefs:
    def __init__(self, api: GitHubApi) -> None:
        self.api = api
        self.sim = api.sim

    def routes(self) -> list[Route]:
        r = Route
        return [
            r("POST", f"{REPO}/git/refs", "git/create-ref", self.create_ref),
            r("PATCH", f"{REPO}/git/refs/{{ref:.+}}", "git/update-ref", self.update_ref),
            r("DELETE", f"{REPO}/git/refs/{{ref:.+}}", "git/delete-ref", self.delete_ref),
            r("POST", f"{REPO}/merges", "repos/merge", self.merge),
            r(
                "GET",
                f"{REPO}/compare/{{basehead:.+}}",
                "repos/compare-commits-with-basehead",
                self.compare,
            ),
        ]

    def _ref_json(self, repo: SimRepo, ref: str, sha: str) -> dict[str, Any]:
        api = f"{self.api.json.api}/repos/{repo.full_name}"
        return {
            "ref": ref,
            "node_id": f"REF_{repo.id}_{ref}",
            "url": f"{api}/git/{ref}",
            "object": {"type": "commit", "sha": sha, "url": f"{api}/git/commits/{sha}"},
        }

    @staticmethod
    def _branch_of(ref: str) -> str:
        if not ref.startswith("heads/") or ref == "heads/":
            raise ApiError(422, "Reference does not exist")
        return ref.removeprefix("heads/")

    def _commit(self, repo: SimRepo, sha: Any) -> str:
        if not isinstance(sha, str) or not sha:
            raise ApiError(422, "Invalid request.", errors=['"sha" wasn\'t supplied.'])
        found = self.sim.resolve(repo, sha) if len(sha) == 40 else None
        if found is None:
            raise ApiError(422, "Object does not exist")
        return found

    async def create_ref(self, call: Call) -> Reply:
        repo = self.api._repo(call)
        body = _body(call)
        ref = body.get("ref")
        if not isinstance(ref, str) or not ref.startswith("refs/") or ref.count("/") < 2:
            raise ApiError(422, "Reference name must start with 'refs/' and have two slashes")
        sha = self._commit(repo, body.get("sha"))
        if not ref.startswith("refs/heads/"):
            raise ApiError(422, "Only branches (refs/heads/...) are simulated")
        branch = ref.removeprefix("refs/heads/")
        if branch in repo.branches:
            raise ApiError(422, "Reference already exists")
        self.sim.set_branch(repo, branch, sha, call.login)
        return Reply(201, self._ref_json(repo, ref, sha), {"Location": self._url(repo, ref)})

    def _url(self, repo: SimRepo, ref: str) -> str:
        return f"{self.api.json.api}/repos/{repo.full_name}/git/{ref}"

    async def update_ref(self, call: Call) -> Reply:
        repo = self.api._repo(call)
        branch = self._branch_of(call.params["ref"])
        body = _body(call)
        sha = self._commit(repo, body.get("sha"))
        force = body.get("force", False)
        if not isinstance(force, bool):
            raise ApiError(422, "Invalid request.", errors=['"force" must be a boolean'])
        current = repo.branches.get(branch)
        if current is None:
            raise ApiError(422, "Reference does not exist")
        if not force and not self.sim.is_ancestor(repo, current, sha):
            raise ApiError(422, "Update is not a fast forward")
        self.sim.set_branch(repo, branch, sha, call.login, forced=force and current != sha)
        return Reply(200, self._ref_json(repo, f"refs/heads/{branch}", sha))

    async def delete_ref(self, call: Call) -> Reply:
        repo = self.api._repo(call)
        branch = self._branch_of(call.params["ref"])
        if branch not in repo.branches:
            raise ApiError(422, "Reference does not exist")
        if branch == repo.default_branch:
            # "Delete a reference": 422 "Validation failed, an attempt was made to delete the
            # default branch" (https://docs.github.com/en/rest/git/refs#delete-a-reference; the
            # description gives no body, so the message is validation_failed's).
            raise ApiError(422, "Validation Failed")
        if branch in repo.protections:
            # "About protected branches": a protected branch cannot be deleted unless its
            # rule allows deletions (the simulated rules never do).
            raise ApiError(422, "Cannot delete this protected branch")
        self.sim.set_branch(repo, branch, None, call.login)
        return Reply(204)

    async def merge(self, call: Call) -> Reply:
        """Merge ``head`` into the branch ``base`` (GitHub's "Merge a branch")."""
        repo = self.api._repo(call)
        body = _body(call)
        base, head = body.get("base"), body.get("head")
        if not isinstance(base, str) or not isinstance(head, str):
            raise ApiError(422, "Invalid request.", errors=['"base" and "head" are required'])
        if base not in repo.branches:
            raise ApiError(404, "Base does not exist")
        head_sha = self.sim.resolve(repo, head)
        if head_sha is None:
            raise ApiError(404, "Head does not exist")
        base_sha = repo.branches[base]
        if self.sim.is_ancestor(repo, head_sha, base_sha):
            return Reply(204)  # nothing to merge
        message = body.get("commit_message")
        if not isinstance(message, str) or not message:
            message = f"Merge {head} into {base}"
        git = self.sim.git_of(repo)
        tree: str | None = None
        if (
            git is not None
            and self.sim.is_real(repo, base_sha)
            and self.sim.is_real(repo, head_sha)
        ):
            tree = git.merge_tree(base_sha, head_sha)
            if tree is None:
                raise ApiError(409, "Merge conflict")
        commit = self.sim._commit(repo, call.login, message, [base_sha, head_sha], tree=tree)
        self.sim.set_branch(repo, base, commit.sha, call.login)
        return Reply(201, self.api.json.commit(repo, commit))

    async def compare(self, call: Call) -> Reply:
        repo = self.api._repo(call)
        base_ref, head_ref = _split_basehead(call.params["basehead"])
        base = self.sim.resolve(repo, base_ref)
        head = self.sim.resolve(repo, head_ref)
        if base is None or head is None:
            raise ApiError(404, "Not Found")
        merge_base = self.sim.merge_base(repo, base, head)
        if merge_base is None:
            raise ApiError(404, f"No common ancestor between {base_ref} and {head_ref}.")
        ahead = self.sim.commits_between(repo, base, head)
        behind = self.sim.commits_between(repo, head, base)
        if not ahead and not behind:
            status = "identical"
        elif not behind:
            status = "ahead"
        elif not ahead:
            status = "behind"
        else:
            status = "diverged"
        json = self.api.json
        web = f"{json.web}/{repo.full_name}"
        files = [
            {
                "sha": change.blob,
                "filename": change.path,
                "status": {"A": "added", "D": "removed"}.get(change.status, "modified"),
                "additions": change.additions,
                "deletions": change.deletions,
                "changes": change.additions + change.deletions,
                "blob_url": f"{web}/blob/{head}/{change.path}",
                "raw_url": f"{web}/raw/{head}/{change.path}",
                "contents_url": (
                    f"{json.api}/repos/{repo.full_name}/contents/{change.path}?ref={head}"
                ),
            }
            for change in self.sim.file_changes(repo, merge_base, head)
        ]
        base_url = f"{json.api}/repos/{repo.full_name}/compare/{call.params['basehead']}"
        return Reply(
            200,
            {
                "url": base_url,
                "html_url": f"{web}/compare/{call.params['basehead']}",
                "permalink_url": f"{web}/compare/{base}...{head}",
                "diff_url": f"{web}/compare/{call.params['basehead']}.diff",
                "patch_url": f"{web}/compare/{call.params['basehead']}.patch",
                "base_commit": json.commit(repo, repo.commits[base]),
                "merge_base_commit": json.commit(repo, repo.commits[merge_base]),
                "status": status,
                "ahead_by": len(ahead),
                "behind_by": len(behind),
                "total_commits": len(ahead),
                "commits": [json.commit(repo, repo.commits[c]) for c in ahead],
                "files": files,
            },
        )


class GiteaRefs:
    def __init__(self, api: GiteaApi) -> None:
        self.api = api
        self.sim = api.sim

    def routes(self) -> list[Route]:
        r = Route
        branch = f"{REPO}/branches/{{branch:.+}}"
        return [
            r("POST", f"{REPO}/branches", "repoCreateBranch", self.create_branch),
            r("DELETE", branch, "repoDeleteBranch", self.delete_branch),
            r("PUT", branch, "repoUpdateBranch", self.update_branch),
            r("GET", f"{REPO}/compare/{{basehead:.+}}", "repoCompareDiff", self.compare),
        ]

    async def create_branch(self, call: Call) -> Reply:
        repo = self.api._repo(call)
        body = _body(call)
        name = body.get("new_branch_name")
        if not isinstance(name, str) or not name:
            raise ApiError(422, "[NewBranchName]: Required")
        source = body.get("old_ref_name") or body.get("old_branch_name") or repo.default_branch
        if not isinstance(source, str):
            raise ApiError(422, "[OldRefName]: must be a string")
        sha = self.sim.resolve(repo, source.removeprefix("refs/heads/").removeprefix("refs/tags/"))
        if sha is None:
            raise ApiError(404, f"The old branch or ref '{source}' does not exist.")
        if name in repo.branches:
            raise ApiError(409, f"The branch with the same name {name} already exists.")
        self.sim.set_branch(repo, name, sha, call.login)
        return Reply(201, self.api.json.branch(repo, name, None, call.login))

    async def delete_branch(self, call: Call) -> Reply:
        repo = self.api._repo(call)
        name = call.params["branch"]
        if name not in repo.branches:
            raise ApiError(404, "Branch doesn't exist.")
        if name == repo.default_branch:
            raise ApiError(403, "can not delete default branch")
        if name in repo.protections:
            raise ApiError(403, "branch protected")
        self.sim.set_branch(repo, name, None, call.login)
        return Reply(204)

    async def update_branch(self, call: Call) -> Reply:
        """Move a branch: a fast-forward unless ``force``; ``old_commit_id`` must be the
        current tip when given (go-gitea/gitea#35951, ``UpdateBranchRepoOption``)."""
        if not _has_branch_update(self.sim.version):
            # Older servers route GET, DELETE and PATCH on a branch, not PUT: the router
            # answers the method it does not know with 405 (go-gitea/gitea#35951 added it).
            raise ApiError(405, "Method Not Allowed")
        repo = self.api._repo(call)
        name = call.params["branch"]
        body = _body(call)
        new = body.get("new_commit_id")
        if not isinstance(new, str) or not new:
            raise ApiError(422, "[NewCommitID]: Required")
        current = repo.branches.get(name)
        if current is None:
            raise ApiError(404, "Branch doesn't exist.")
        sha = self.sim.resolve(repo, new)
        if sha is None:
            raise ApiError(422, f"object does not exist [id: {new}]")
        old = body.get("old_commit_id")
        force = body.get("force") is True
        if isinstance(old, str) and old and old != current:
            raise ApiError(409, "The update is not a fast-forward.")
        if not force and not self.sim.is_ancestor(repo, current, sha):
            raise ApiError(409, "The update is not a fast-forward.")
        self.sim.set_branch(repo, name, sha, call.login, forced=force and current != sha)
        return Reply(204)

    async def compare(self, call: Call) -> Reply:
        repo = self.api._repo(call)
        base_ref, head_ref = _split_basehead(call.params["basehead"])
        base = self.sim.resolve(repo, base_ref)
        head = self.sim.resolve(repo, head_ref)
        if base is None or head is None:
            raise ApiError(404, "GetRefCommitID")
        shas = self.sim.commits_between(repo, base, head)
        # Each commit lists the files it changed against its first parent, as Gitea's
        # compare does unless asked not to (services/convert/git_commit.go, ToCommit).
        commits = [
            self.api.json.commit(repo, repo.commits[c], self._files(repo, repo.commits[c]))
            for c in reversed(shas)
        ]
        return Reply(200, {"total_commits": len(commits), "commits": commits})

    def _files(self, repo: SimRepo, commit: SimCommit) -> list[dict[str, str]]:
        if not commit.parents:
            return []
        status = {"A": "added", "D": "removed"}
        return [
            {"filename": change.path, "status": status.get(change.status, "modified")}
            for change in self.sim.file_changes(repo, commit.parents[0], commit.sha)
        ]


def _has_branch_update(version: str) -> bool:
    """Whether the Gitea this simulator plays (its ``/version``) routes
    ``PUT /repos/{o}/{r}/branches/{branch}``: releases from 1.26 on."""
    major, _, rest = version.partition(".")
    minor = rest.split(".", 1)[0]
    return major.isdigit() and minor.isdigit() and (int(major), int(minor)) >= (1, 26)
