"""The ref operations both forges offer, as the simulator serves them over HTTP: branches at a
commit, fast-forward-only moves (and their refusals), deletion, comparison, permissions."""

from __future__ import annotations

from pathlib import Path

import pytest

from reviewbot.sim import SimServer, Simulator
from tests.integration.sim.git_support import Clone, Hooks, call, clone

REPO = "acme/api"


async def _work(sim: Simulator, server: SimServer, forge: str, tmp_path: Path) -> Clone:
    sim.create_repo(forge, REPO)
    token = sim.add_user(forge, "alice")
    web = server.base_url + ("/web" if forge == "github" else "/gitea")
    return await clone(f"{web}/{REPO}.git", tmp_path / "w", token, "alice")


async def _two_lines(work: Clone) -> tuple[str, str, str]:
    """main's root; ``ahead`` one commit on top of it; ``aside`` a sibling of ``ahead``."""
    root = (await work.run("rev-parse", "HEAD")).out.strip()
    ahead = await work.commit({"src/a.py": "a\n"}, "Ahead")
    await work.push("ahead")
    await work.run("checkout", "-q", "-B", "aside", root)
    aside = await work.commit({"docs/b.md": "b\n"}, "Aside")
    await work.push("aside")
    return root, ahead, aside


async def test_github_refs_create_fast_forward_refuse_force_delete(
    gsim: Simulator, gserver: SimServer, tmp_path: Path, hooks: Hooks
) -> None:
    work = await _work(gsim, gserver, "github", tmp_path)
    root, ahead, aside = await _two_lines(work)
    gsim.set_webhook("github", hooks.url)
    api = f"{gserver.github_api_url}/repos/{REPO}"
    token = work.token

    status, body = await call(
        "POST", f"{api}/git/refs", token, {"ref": "refs/heads/q", "sha": root}
    )
    assert status == 201
    assert body["ref"] == "refs/heads/q" and body["object"] == {
        "type": "commit",
        "sha": root,
        "url": f"{api}/git/commits/{root}",
    }
    status, body = await call(
        "POST", f"{api}/git/refs", token, {"ref": "refs/heads/q", "sha": root}
    )
    assert (status, body["message"]) == (422, "Reference already exists")
    status, body = await call(
        "POST", f"{api}/git/refs", token, {"ref": "refs/heads/z", "sha": "f" * 40}
    )
    assert (status, body["message"]) == (422, "Object does not exist")
    assert "documentation_url" in body

    status, body = await call("PATCH", f"{api}/git/refs/heads/q", token, {"sha": ahead})
    assert status == 200 and body["object"]["sha"] == ahead
    status, body = await call(
        "PATCH", f"{api}/git/refs/heads/q", token, {"sha": aside, "force": False}
    )
    assert (status, body["message"]) == (422, "Update is not a fast forward")
    assert gsim.repo("github", REPO).branches["q"] == ahead
    status, body = await call(
        "PATCH", f"{api}/git/refs/heads/q", token, {"sha": aside, "force": True}
    )
    assert status == 200 and body["object"]["sha"] == aside
    remote = (await work.run("ls-remote", "origin", "refs/heads/q")).out.split()[0]
    assert remote == aside

    status, body = await call("DELETE", f"{api}/git/refs/heads/q", token)
    assert (status, body) == (204, None)
    status, body = await call("DELETE", f"{api}/git/refs/heads/q", token)
    assert (status, body["message"]) == (422, "Reference does not exist")
    assert (await work.run("ls-remote", "origin", "refs/heads/q")).out == ""

    await gsim.settle()
    moves = [(p["ref"], p["before"], p["after"], p["forced"]) for p in hooks.of("push")]
    assert moves == [
        ("refs/heads/q", "0" * 40, root, False),
        ("refs/heads/q", root, ahead, False),
        ("refs/heads/q", ahead, aside, True),
        ("refs/heads/q", aside, "0" * 40, False),
    ]


async def test_github_compare_reports_ahead_behind_identical_diverged(
    gsim: Simulator, gserver: SimServer, tmp_path: Path
) -> None:
    work = await _work(gsim, gserver, "github", tmp_path)
    root, ahead, _aside = await _two_lines(work)
    api = f"{gserver.github_api_url}/repos/{REPO}"
    cases = {
        "main...ahead": ("ahead", 1, 0, ["src/a.py"]),
        f"{ahead}...main": ("behind", 0, 1, []),
        "main...main": ("identical", 0, 0, []),
        "ahead...aside": ("diverged", 1, 1, ["docs/b.md"]),
    }
    for basehead, (state, ahead_by, behind_by, files) in cases.items():
        status, body = await call("GET", f"{api}/compare/{basehead}", work.token)
        assert status == 200, basehead
        assert (body["status"], body["ahead_by"], body["behind_by"]) == (
            state,
            ahead_by,
            behind_by,
        ), basehead
        assert body["merge_base_commit"]["sha"] == root
        assert [f["filename"] for f in body["files"]] == files
        assert body["total_commits"] == ahead_by == len(body["commits"])
    status, _ = await call("GET", f"{api}/compare/main...nope", work.token)
    assert status == 404


async def test_gitea_branches_create_update_fast_forward_only_delete_compare(
    gsim: Simulator, gserver: SimServer, tmp_path: Path
) -> None:
    work = await _work(gsim, gserver, "gitea", tmp_path)
    root, ahead, aside = await _two_lines(work)
    api = f"{gserver.gitea_api_url}/repos/{REPO}"
    token = work.token

    status, body = await call(
        "POST", f"{api}/branches", token, {"new_branch_name": "q", "old_ref_name": root}
    )
    assert status == 201 and body["name"] == "q" and body["commit"]["id"] == root
    status, body = await call(
        "POST", f"{api}/branches", token, {"new_branch_name": "q2", "old_branch_name": "ahead"}
    )
    assert status == 201 and body["commit"]["id"] == ahead
    status, body = await call(
        "POST", f"{api}/branches", token, {"new_branch_name": "q", "old_ref_name": "main"}
    )
    assert status == 409 and set(body) == {"message", "url"}
    status, _ = await call(
        "POST", f"{api}/branches", token, {"new_branch_name": "q3", "old_ref_name": "nope"}
    )
    assert status == 404

    status, body = await call("PUT", f"{api}/branches/q", token, {"new_commit_id": ahead})
    assert (status, body) == (204, None)
    status, body = await call("PUT", f"{api}/branches/q", token, {"new_commit_id": aside})
    assert status == 409 and body["message"] == "The update is not a fast-forward."
    assert gsim.repo("gitea", REPO).branches["q"] == ahead
    status, body = await call(
        "PUT", f"{api}/branches/q", token, {"new_commit_id": aside, "old_commit_id": root}
    )
    assert status == 409  # old_commit_id is not the tip
    status, _ = await call(
        "PUT", f"{api}/branches/q", token, {"new_commit_id": aside, "force": True}
    )
    assert status == 204
    assert (await work.run("ls-remote", "origin", "refs/heads/q")).out.split()[0] == aside

    status, body = await call("GET", f"{api}/compare/main...ahead", token)
    assert status == 200 and body["total_commits"] == 1
    assert [c["sha"] for c in body["commits"]] == [ahead]

    status, _ = await call("DELETE", f"{api}/branches/q", token)
    assert status == 204
    status, _ = await call("DELETE", f"{api}/branches/q", token)
    assert status == 404
    status, _ = await call("DELETE", f"{api}/branches/main", token)
    assert status == 403


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_ref_operations_need_write_access(
    gsim: Simulator, gserver: SimServer, tmp_path: Path, forge: str
) -> None:
    work = await _work(gsim, gserver, forge, tmp_path)
    root, ahead, _ = await _two_lines(work)
    reader = gsim.add_user(forge, "reader")
    gsim.set_permission(forge, REPO, "reader", "read")
    if forge == "github":
        api = f"{gserver.github_api_url}/repos/{REPO}"
        writes = [
            ("POST", f"{api}/git/refs", {"ref": "refs/heads/x", "sha": root}),
            ("PATCH", f"{api}/git/refs/heads/main", {"sha": ahead}),
            ("DELETE", f"{api}/git/refs/heads/ahead", None),
            ("POST", f"{api}/merges", {"base": "main", "head": "ahead"}),
        ]
        compare = f"{api}/compare/main...ahead"
    else:
        api = f"{gserver.gitea_api_url}/repos/{REPO}"
        writes = [
            ("POST", f"{api}/branches", {"new_branch_name": "x", "old_ref_name": root}),
            ("PUT", f"{api}/branches/main", {"new_commit_id": ahead}),
            ("DELETE", f"{api}/branches/ahead", None),
        ]
        compare = f"{api}/compare/main...ahead"
    for method, url, body in writes:
        status, answer = await call(method, url, reader, body)
        assert status == 403, (method, url)
        assert "message" in answer
    assert gsim.repo(forge, REPO).branches["main"] == root
    assert "x" not in gsim.repo(forge, REPO).branches
    status, _ = await call("GET", compare, reader)
    assert status == 200
    if forge == "github":
        # An installation needs Contents write (and read to compare).
        app_id, _ = gsim.create_github_app()
        installation = gsim.install_app(app_id, REPO)
        gsim.set_installation_permissions(installation, {"metadata": "read"})
        token, _ = gsim.issue_installation_token(gsim.installations[installation])
        status, answer = await call("GET", compare, token)
        assert status == 403
        assert answer["message"] == "Resource not accessible by integration"
