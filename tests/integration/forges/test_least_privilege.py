"""The bot at exactly the documented permissions, and with each one taken away, against the
simulator (which enforces each route's permission as the forges do, sim/permissions.py).

``reviewbot review`` runs in-process over real HTTP to the simulator with a real SQLite
store; ``reviewbot doctor``'s checks run against the same simulator.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from reviewbot.cli import main
from reviewbot.cli.doctor import access_checks
from reviewbot.config import load_settings
from reviewbot.forges.app_auth import GitHubAppAuth
from reviewbot.forges.github import GitHubForge
from reviewbot.service import configured_forges
from reviewbot.sim import SimServer, Simulator
from reviewbot.sim.permissions import GITHUB_DOCUMENTED

REPO = "acme/api"
APP_BOT = "reviewbot-app[bot]"
CI = "https://ci.example/run/1"


async def review(capsys: pytest.CaptureFixture[str], ref: str) -> dict[str, Any]:
    await asyncio.to_thread(main, ["review", ref, "--json"])
    out = capsys.readouterr().out
    body: dict[str, Any] = json.loads(out)
    return body


def configure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rules: str = "", **env: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "reviewbot.toml").write_text(
        f'[repos."github:{REPO}"]\n{rules}\n[repos."gitea:{REPO}"]\n{rules}\n'
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def github_app(sim: Simulator, sim_server: SimServer, tmp_path: Path) -> tuple[dict[str, str], int]:
    """A GitHub App installed with exactly the permissions docs/github-app.md asks for."""
    sim.create_repo("github", REPO)
    sim.add_user("github", "alice")
    app_id, key = sim.create_github_app(bot_login=APP_BOT)
    installation = sim.install_app(app_id, REPO)
    (tmp_path / "app.pem").write_text(key)
    env = {
        "REVIEWBOT_GITHUB__API_URL": sim_server.github_api_url,
        "REVIEWBOT_GITHUB__APP_ID": str(app_id),
        "REVIEWBOT_GITHUB__PRIVATE_KEY_PATH": str(tmp_path / "app.pem"),
    }
    return env, installation


def gitea_bot(sim: Simulator, sim_server: SimServer) -> dict[str, str]:
    """A Gitea bot account with the Write role docs/gitea.md asks for (not an admin)."""
    sim.create_repo("gitea", REPO)
    sim.add_user("gitea", "alice")
    token = sim.add_user("gitea", "reviewbot", bot=True)
    sim.set_permission("gitea", REPO, "reviewbot", "write")
    return {"REVIEWBOT_GITEA__URL": sim_server.gitea_url, "REVIEWBOT_GITEA__TOKEN": token}


def green_pr(sim: Simulator, forge: str, check: str = "ci/test") -> int:
    pr = sim.open_pr(forge, REPO, author="alice")
    sim.set_status(forge, REPO, pr.head_sha, check, "success", target_url=CI)
    return pr.number


def bot_reviews(sim: Simulator, forge: str, number: int) -> list[str]:
    return [r.state for r in sim.pull(forge, REPO, number).reviews]


# -- the documented permissions are enough -----------------------------------------------


async def test_github_app_at_least_privilege_approves_on_protection_it_cannot_read_directly(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    env, _ = github_app(sim, sim_server, tmp_path)
    configure(monkeypatch, tmp_path, **env)
    sim.require_checks("github", REPO, "main", ["ci/test"])
    number = green_pr(sim, "github")
    answer = await review(capsys, f"github:{REPO}#{number}")
    assert answer["decision"]["decision"] == "approve", answer
    assert bot_reviews(sim, "github", number) == ["APPROVED"]
    # The admin-only endpoint was never asked: the branch shows its required checks.
    assert not [r for r in sim.requests if r.operation_id == "repos/get-branch-protection"]


async def test_a_failed_ruleset_check_is_never_approved(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    env, _ = github_app(sim, sim_server, tmp_path)
    configure(monkeypatch, tmp_path, 'required_checks = ["ci/test"]', **env)
    sim.add_ruleset(REPO, ["~DEFAULT_BRANCH"], ["security/scan"])
    number = green_pr(sim, "github")
    pull = sim.pull("github", REPO, number)
    sim.set_status("github", REPO, pull.head_sha, "security/scan", "failure", target_url=CI)
    answer = await review(capsys, f"github:{REPO}#{number}")
    assert answer["decision"]["decision"] == "request_changes"
    assert "security/scan" in answer["decision"]["detail"]
    assert bot_reviews(sim, "github", number) == ["CHANGES_REQUESTED"]


async def test_a_passed_ruleset_check_approves_for_an_account_without_admin_rights(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    sim.create_repo("github", REPO)
    sim.add_user("github", "alice")
    token = sim.add_user("github", "reviewbot", bot=True)
    sim.set_permission("github", REPO, "reviewbot", "write")  # protection is hidden (404)
    env = {"REVIEWBOT_GITHUB__API_URL": sim_server.github_api_url}
    configure(monkeypatch, tmp_path, REVIEWBOT_GITHUB__TOKEN=token, **env)
    sim.add_ruleset(REPO, ["refs/heads/main"], ["security/scan"])
    number = green_pr(sim, "github", "security/scan")
    answer = await review(capsys, f"github:{REPO}#{number}")
    assert answer["decision"]["decision"] == "approve", answer
    assert bot_reviews(sim, "github", number) == ["APPROVED"]


async def test_a_ruleset_check_not_yet_reported_waits(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    env, _ = github_app(sim, sim_server, tmp_path)
    configure(monkeypatch, tmp_path, 'required_checks = ["ci/test"]', **env)
    sim.add_ruleset(REPO, ["~ALL"], ["security/scan"])
    sim.add_ruleset(REPO, ["~ALL"], ["ignored"], enforcement="evaluate")
    number = green_pr(sim, "github")
    answer = await review(capsys, f"github:{REPO}#{number}")
    assert answer["decision"]["decision"] == "waiting"
    assert answer["decision"]["missing"] == ["security/scan"]
    assert bot_reviews(sim, "github", number) == []


async def test_gitea_writer_reads_required_checks_from_the_branch(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    configure(monkeypatch, tmp_path, **gitea_bot(sim, sim_server))
    sim.require_checks("gitea", REPO, "main", ["ci/*"])
    number = green_pr(sim, "gitea")
    pull = sim.pull("gitea", REPO, number)
    sim.set_status("gitea", REPO, pull.head_sha, "ci/lint", "failure", target_url=CI)
    answer = await review(capsys, f"gitea:{REPO}#{number}")
    assert answer["decision"]["decision"] == "request_changes", answer
    assert not [r for r in sim.requests if r.operation_id == "repoListBranchProtection"]


# -- each permission taken away -----------------------------------------------------------


# What each documented permission's absence leads to, with the required checks green:
# rules not read (a gap: judged on the configured checks, or waiting), CI not read (an error
# naming the permission), or the review refused when posted (named, nothing approved).
UNREAD_RULES, CI_UNREAD, NOT_POSTED = "rules", "ci", "post"


@pytest.mark.parametrize(
    ("removed", "named", "effect"),
    [
        ("metadata", "Metadata (read)", UNREAD_RULES),
        ("contents", "Contents (read)", UNREAD_RULES),
        ("checks", "Checks (read)", CI_UNREAD),
        ("statuses", "Commit statuses (read)", CI_UNREAD),
        ("pull_requests", "Pull requests (write)", NOT_POSTED),
    ],
)
@pytest.mark.parametrize("configured", [False, True])
async def test_a_missing_app_permission_is_named_never_a_silent_approval(
    removed: str,
    named: str,
    effect: str,
    configured: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    env, installation = github_app(sim, sim_server, tmp_path)
    rules = 'required_checks = ["ci/test"]' if configured else ""
    configure(monkeypatch, tmp_path, rules, **env)
    sim.require_checks("github", REPO, "main", ["ci/test"])
    granted = {k: v for k, v in GITHUB_DOCUMENTED.items() if k != removed}
    sim.set_installation_permissions(installation, granted)
    number = green_pr(sim, "github")
    answer = await review(capsys, f"github:{REPO}#{number}")
    decision = answer["decision"]
    assert decision["reason_code"] != "forge_error", decision
    posted = sim.pull("github", REPO, number).reviews
    if effect == UNREAD_RULES and configured:
        # Judged on the configured checks; the review says what could not be read.
        assert decision["decision"] == "approve"
        assert [r.state for r in posted] == ["APPROVED"]
        assert "Not read on the forge" in posted[0].body and named in posted[0].body
    elif effect == UNREAD_RULES:
        assert (decision["decision"], decision["reason_code"]) == (
            "waiting",
            "protection_unreadable",
        )
        assert named in decision["detail"] and posted == []
    elif effect == CI_UNREAD:
        assert (decision["decision"], decision["reason_code"]) == ("error", "permission_denied")
        assert named in decision["detail"] and posted == []
    else:
        assert posted == []
        (outbox,) = answer["outbox"]
        assert outbox["status"] != "posted" and named in (outbox["last_error"] or "")


async def test_unreadable_protection_judges_configured_checks_and_says_so(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    env, installation = github_app(sim, sim_server, tmp_path)
    configure(monkeypatch, tmp_path, 'required_checks = ["ci/test"]', **env)
    sim.require_checks("github", REPO, "main", ["ci/test"])
    granted = {k: v for k, v in GITHUB_DOCUMENTED.items() if k != "contents"}
    granted["pull_requests"] = "write"
    sim.set_installation_permissions(installation, granted)
    number = green_pr(sim, "github")
    decision = (await review(capsys, f"github:{REPO}#{number}"))["decision"]
    assert decision["decision"] == "approve"
    (posted,) = sim.pull("github", REPO, number).reviews
    assert "Not read on the forge" in posted.body and "Contents (read)" in posted.body


async def test_unreadable_protection_with_nothing_configured_waits(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    env, installation = github_app(sim, sim_server, tmp_path)
    # Not even approve_without_checks approves past rules it could not read.
    configure(monkeypatch, tmp_path, "approve_without_checks = true", **env)
    sim.require_checks("github", REPO, "main", ["ci/test"])
    granted = {k: v for k, v in GITHUB_DOCUMENTED.items() if k != "contents"}
    sim.set_installation_permissions(installation, granted)
    number = green_pr(sim, "github")
    decision = (await review(capsys, f"github:{REPO}#{number}"))["decision"]
    assert (decision["decision"], decision["reason_code"]) == ("waiting", "protection_unreadable")
    assert "Contents (read)" in decision["detail"]
    assert bot_reviews(sim, "github", number) == []


# -- doctor --------------------------------------------------------------------------------


async def test_doctor_names_each_missing_permission_and_where_to_grant_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    env, installation = github_app(sim, sim_server, tmp_path)
    env.update(gitea_bot(sim, sim_server))
    configure(monkeypatch, tmp_path, "automerge = true", **env)
    sim.version = "1.22.6"
    settings = load_settings()
    forges = configured_forges(settings)
    try:
        checks = {c.name: c for c in await access_checks(settings, forges)}
        assert checks[f"access github:{REPO}"].ok, checks
        assert "missing (optional) Workflows" in checks[f"access github:{REPO}"].detail
        gitea = checks[f"access gitea:{REPO}"]
        assert gitea.ok and "missing (optional) Admin" in gitea.detail
        assert "no commit-status webhook (added in 1.23)" in checks["gitea version"].detail
        assert "reconcile_interval_s = 300 s" in checks["gitea version"].detail

        granted = {k: v for k, v in GITHUB_DOCUMENTED.items() if k != "contents"}
        sim.set_installation_permissions(installation, granted)
        sim.set_permission("gitea", REPO, "reviewbot", "read")
        forges["github"]._app._tokens.clear()  # type: ignore[attr-defined]  # mint anew
        checks = {c.name: c for c in await access_checks(settings, forges)}
        github = checks[f"access github:{REPO}"]
        assert not github.ok
        assert "missing Contents (read and write): merges" in github.detail
        assert "Repository permissions" in github.detail
        gitea = checks[f"access gitea:{REPO}"]
        assert not gitea.ok and "missing Write: merges" in gitea.detail
    finally:
        for forge in forges.values():
            await forge.aclose()


async def test_doctor_requires_what_the_after_merge_rules_write_with(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    """Closing linked issues needs Issues (write) of an App (GitHub answers 403 without it)
    and Write of an account; deleting the head branch needs Contents (write) / Write: with
    the rules on and no automerge, doctor fails on each, naming the rule."""
    env, installation = github_app(sim, sim_server, tmp_path)
    env.update(gitea_bot(sim, sim_server))
    rules = "close_linked_issues_after_merge = true\ndelete_head_branch_after_merge = true"
    configure(monkeypatch, tmp_path, rules, **env)
    sim.set_installation_permissions(installation, {**GITHUB_DOCUMENTED, "contents": "read"})
    sim.set_permission("gitea", REPO, "reviewbot", "read")
    settings = load_settings()
    forges = configured_forges(settings)
    try:
        checks = {c.name: c for c in await access_checks(settings, forges)}
        github = checks[f"access github:{REPO}"]
        assert not github.ok
        assert "missing Issues (read and write): closing linked issues" in github.detail
        assert "missing Contents (read and write): merges" in github.detail
        assert "; deleting the head branch after a merge" in github.detail
        gitea = checks[f"access gitea:{REPO}"]
        assert not gitea.ok and "missing Write" in gitea.detail
        assert "closing linked issues after a merge" in gitea.detail
        assert "deleting the head branch after a merge" in gitea.detail

        sim.set_installation_permissions(
            installation, {**GITHUB_DOCUMENTED, "issues": "write", "contents": "write"}
        )
        sim.set_permission("gitea", REPO, "reviewbot", "write")
        forges["github"]._app._tokens.clear()  # type: ignore[attr-defined]  # mint anew
        checks = {c.name: c for c in await access_checks(settings, forges)}
        assert checks[f"access github:{REPO}"].ok, checks
        assert checks[f"access gitea:{REPO}"].ok, checks
    finally:
        for forge in forges.values():
            await forge.aclose()


def test_doctor_without_a_forge_is_not_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REVIEWBOT_DATA_DIR", str(tmp_path / "data"))
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL forges: no forge is configured" in out and "not ready: forges" in out


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_review_of_a_repository_without_rules_is_silent(
    forge: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    # An organization-wide installation reaches repositories the rules do not name.
    env, _ = github_app(sim, sim_server, tmp_path)
    env.update(gitea_bot(sim, sim_server))
    configure(monkeypatch, tmp_path, **env)
    other = "acme/elsewhere"
    sim.create_repo(forge, other)
    if forge == "github":
        sim.install_app(int(env["REVIEWBOT_GITHUB__APP_ID"]), other)
    sim.require_checks(forge, other, "main", ["ci/test"])
    pr = sim.open_pr(forge, other, author="alice")
    sim.set_status(forge, other, pr.head_sha, "ci/test", "success", target_url=CI)
    sim.clear_requests()
    answer = await review(capsys, f"{forge}:{other}#{pr.number}")
    decision = answer["decision"]
    assert (decision["decision"], decision["reason_code"]) == ("skip", "repo_not_configured")
    live = sim.pull(forge, other, pr.number)
    assert live.reviews == [] and live.comments == []
    assert [r for r in sim.requests if r.method != "GET"] == []


@pytest.mark.parametrize(
    ("removed", "named"),
    [
        ("metadata", "Metadata (read)"),
        ("pull_requests", "Pull requests (read and write)"),
        ("checks", "Checks (read)"),
        ("statuses", "Commit statuses (read)"),
        ("contents", "Contents (read)"),
    ],
)
async def test_doctor_names_every_documented_app_permission_taken_away(
    removed: str,
    named: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    env, installation = github_app(sim, sim_server, tmp_path)
    configure(monkeypatch, tmp_path, **env)
    granted = {k: v for k, v in GITHUB_DOCUMENTED.items() if k != removed}
    sim.set_installation_permissions(installation, granted)
    settings = load_settings()
    forges = configured_forges(settings)
    try:
        (check,) = [c for c in await access_checks(settings, forges) if "github" in c.name]
    finally:
        for forge in forges.values():
            await forge.aclose()
    assert not check.ok and f"missing {named}" in check.detail, check


async def test_rules_past_one_page_are_all_read(sim: Simulator, sim_server: SimServer) -> None:
    sim.create_repo("github", REPO)
    token = sim.add_user("github", "reviewbot", bot=True)
    for i in range(130):  # one required_status_checks rule per ruleset: two pages
        sim.add_ruleset(REPO, ["~ALL"], [f"check-{i:03d}"])
    forge = GitHubForge(api_url=sim_server.github_api_url, token=token)
    try:
        checks = await forge.required_checks(REPO, "main")
    finally:
        await forge.aclose()
    assert len(checks.names) == 130 and checks.names[-1] == "check-129"
    pages = [r for r in sim.requests if r.operation_id == "repos/get-branch-rules"]
    assert len(pages) == 2


async def test_a_permission_granted_meanwhile_is_seen_without_a_restart(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    env, installation = github_app(sim, sim_server, tmp_path)
    sim.set_installation_permissions(installation, {**GITHUB_DOCUMENTED, "contents": "read"})
    pull = sim.open_pr("github", REPO, author="alice")
    forge = GitHubForge(
        api_url=sim_server.github_api_url,
        app_auth=GitHubAppAuth(env["REVIEWBOT_GITHUB__APP_ID"], (tmp_path / "app.pem").read_text()),
    )
    try:
        live = await forge.get_pull(REPO, pull.number)
        missing = await forge.merge_permission(REPO, live)
        assert missing is not None and "Contents (write)" in missing
        sim.set_installation_permissions(installation, dict(GITHUB_DOCUMENTED))
        assert await forge.merge_permission(REPO, live) is None
    finally:
        await forge.aclose()


async def test_gitea_status_checks_without_patterns_need_every_status(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim: Simulator,
    sim_server: SimServer,
) -> None:
    configure(monkeypatch, tmp_path, "approve_without_checks = true", **gitea_bot(sim, sim_server))
    sim.require_checks("gitea", REPO, "main", [])  # Enable Status Check, no patterns
    pr = sim.open_pr("gitea", REPO, author="alice")
    answer = await review(capsys, f"gitea:{REPO}#{pr.number}")
    assert answer["decision"]["decision"] == "waiting"  # no status at all: pending
    sim.set_status("gitea", REPO, pr.head_sha, "anything", "failure", target_url=CI)
    answer = await review(capsys, f"gitea:{REPO}#{pr.number}")
    assert answer["decision"]["decision"] == "request_changes"
    assert bot_reviews(sim, "gitea", pr.number) == ["REQUEST_CHANGES"]
