"""The status page in a real headless Chromium, against ``reviewbot serve`` and the simulator.

A PR is opened, its required check passes, the bot approves and merges it; a second PR
targets a base branch named like a script, so its skip decision carries that name. Then the
browser signs in through the form, finds the merged PR with its verdict, follows the link to
the PR's explain view, and at a phone's width (390 px) neither page scrolls sideways. It
saves a screenshot of each page under ``test-artifacts/status-page/`` (or
``$REVIEWBOT_TEST_ARTIFACTS``).

Chromium is Debian's ``/usr/bin/chromium`` driven by Playwright (only the driver; Playwright
never downloads a browser here). Playwright rather than the DevTools protocol by hand: it
waits for navigations and elements itself, which is most of what a hand-written client
would get wrong.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from reviewbot.sim import SimServer, Simulator
from tests.integration.process_support import ServeProcess, run_reviewbot, serve_process
from tests.integration.server_support import WAIT_S

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SECRET = "browser-webhook-secret"
EVIL_BRANCH = "<script>document.title='pwned'</script>"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("REVIEWBOT_TEST_ARTIFACTS", ROOT / "test-artifacts")) / (
    "status-page"
)
CONFIG = """\
[defaults]
required_checks = ["ci/test"]
base_branches = ["main"]
automerge = true
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium (apt-get install chromium)"
    ),
]


async def until(predicate: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_a_person_signs_in_and_follows_a_merged_pr_to_its_explanation_on_a_phone(
    tmp_path: Path,
) -> None:
    playwright = pytest.importorskip("playwright.async_api", reason="playwright not installed")
    sim = Simulator()
    async with SimServer(sim, host="127.0.0.1", port=0) as sim_server:
        bot = sim.add_user("gitea", "reviewbot", bot=True)
        sim.add_user("gitea", "alice")
        repo = sim.create_repo("gitea", "acme/api", default_branch="main")
        # A branch git allows (no space, no ':'), named like markup.
        repo.branches[EVIL_BRANCH] = repo.branches["main"]
        sim.set_permission("gitea", "acme/api", "alice", "write")
        (tmp_path / "reviewbot.toml").write_text(
            CONFIG + f'\n[gitea]\nurl = "{sim_server.gitea_url}"\nbot_login = "reviewbot"\n'
        )
        env = {"REVIEWBOT_GITEA__TOKEN": bot, "REVIEWBOT_GITEA__WEBHOOK_SECRET": SECRET}
        created = run_reviewbot(
            "token", "create", "--name", "phone", "--scopes", "read", "--json",
            cwd=tmp_path, env=env,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        token = json.loads(created.stdout)["token"]

        async with serve_process(cwd=tmp_path, env=env) as server:
            sim.set_webhook("gitea", url=server.base + "/webhooks/gitea", secret=SECRET)
            pr = sim.open_pr("gitea", "acme/api", author="alice", title=f"Fix {EVIL_BRANCH}")
            assert (await sim.deliver_pull_request("gitea", "acme/api", pr.number)).status == 202
            status = sim.set_status("gitea", "acme/api", pr.head_sha, "ci/test", "success")
            assert (await sim.deliver_status("gitea", "acme/api", status.id)).status == 202
            pull = sim.pull("gitea", "acme/api", pr.number)
            await until(lambda: pull.merged, "the automerge")
            other = sim.open_pr(
                "gitea", "acme/api", author="alice", base=EVIL_BRANCH, head_ref=EVIL_BRANCH
            )
            assert (await sim.deliver_pull_request("gitea", "acme/api", other.number)).status == 202

            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            async with playwright.async_playwright() as p:
                browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
                try:
                    page = await browser.new_page(viewport={"width": 390, "height": 844})
                    problems: list[str] = []
                    page.on("console", lambda m: problems.append(m.text))
                    page.on("pageerror", lambda exc: problems.append(str(exc)))

                    await page.goto(server.base + "/")
                    assert page.url == server.base + "/login"  # no session: the form
                    await page.fill("#token", token)
                    await page.click("button[type=submit]")
                    await page.wait_for_url(server.base + "/")

                    # The skip of the second PR names its base branch: shown, never run.
                    link = page.locator(f'#pulls a[href="/pr/gitea/acme/api/{pr.number}"]')
                    for _ in range(int(WAIT_S * 5)):
                        if (
                            await link.count()
                            and await page.locator(
                                "#decisions", has_text="base_branch_excluded"
                            ).count()
                        ):
                            break
                        await asyncio.sleep(0.2)
                        await page.reload()
                    href = page.locator(f'a[href="/pr/gitea/acme/api/{pr.number}"]')
                    row = page.locator("#pulls tr", has=href)
                    assert await row.locator(".badge.approve").count() == 1
                    assert await row.locator(".badge.merged").count() == 1
                    assert pr.head_sha[:12] in await row.inner_text()
                    decisions = await page.locator("#decisions").inner_text()
                    assert EVIL_BRANCH in decisions and "base_branch_excluded" in decisions
                    assert await page.title() == "reviewbot status"
                    assert await page.locator("script").count() == 0
                    assert await page.evaluate("document.documentElement.scrollWidth") <= 390
                    await page.screenshot(path=str(ARTIFACTS / "status.png"), full_page=True)

                    await link.click()
                    await page.wait_for_url(f"{server.base}/pr/gitea/acme/api/{pr.number}")
                    # What `explain` knows, as sections: the merge, verdicts, decisions, leases.
                    merged = await page.locator("#merges p.state").inner_text()
                    assert f"merged {pr.head_sha[:12]} as" in merged
                    assert "approve" in await page.locator("#reviews").inner_text()
                    assert "eligible" in await page.locator("#gate").inner_text()
                    trail = await page.locator("#lease-history").inner_text()
                    assert "merger lease" in trail and "merged" in trail
                    assert await page.locator("#pulls .badge.merged").count() == 1
                    assert await page.evaluate("document.documentElement.scrollWidth") <= 390
                    await page.screenshot(path=str(ARTIFACTS / "pull.png"), full_page=True)
                    # Nothing the page loads breaks its own Content-Security-Policy.
                    assert not [m for m in problems if "Content Security Policy" in m], problems
                finally:
                    await browser.close()
        assert (ARTIFACTS / "status.png").stat().st_size > 0


@asynccontextmanager
async def bot_on_sim(tmp_path: Path) -> AsyncIterator[tuple[Simulator, ServeProcess, str]]:
    """``reviewbot serve`` against a simulated Gitea with ``acme/api`` (``ci/test`` required,
    automerge), and a token that reads the status page."""
    sim = Simulator()
    async with SimServer(sim, host="127.0.0.1", port=0) as sim_server:
        bot = sim.add_user("gitea", "reviewbot", bot=True)
        sim.add_user("gitea", "alice")
        sim.create_repo("gitea", "acme/api", default_branch="main")
        sim.set_permission("gitea", "acme/api", "alice", "write")
        (tmp_path / "reviewbot.toml").write_text(
            CONFIG + f'\n[gitea]\nurl = "{sim_server.gitea_url}"\nbot_login = "reviewbot"\n'
        )
        env = {"REVIEWBOT_GITEA__TOKEN": bot, "REVIEWBOT_GITEA__WEBHOOK_SECRET": SECRET}
        created = run_reviewbot(
            "token", "create", "--name", "phone", "--scopes", "read", "--json",
            cwd=tmp_path, env=env,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        async with serve_process(cwd=tmp_path, env=env) as server:
            sim.set_webhook("gitea", url=server.base + "/webhooks/gitea", secret=SECRET)
            yield sim, server, json.loads(created.stdout)["token"]


async def sign_in(page: Any, base: str, token: str) -> None:
    await page.goto(base + "/")
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(base + "/")


async def test_a_rejected_pr_shows_its_reason_and_failing_check_at_desk_and_phone_width(
    tmp_path: Path,
) -> None:
    """The front page says why a PR was rejected: the verdict, the reason in words and
    the failing check, read from the DOM Chromium rendered, at 1280 and at 390 px."""
    playwright = pytest.importorskip("playwright.async_api", reason="playwright not installed")
    shots = tmp_path / "shots"
    shots.mkdir()
    async with bot_on_sim(tmp_path) as (sim, server, token):
        pr = sim.open_pr("gitea", "acme/api", author="alice", title="Break the tests")
        assert (await sim.deliver_pull_request("gitea", "acme/api", pr.number)).status == 202
        status = sim.set_status("gitea", "acme/api", pr.head_sha, "ci/test", "failure")
        assert (await sim.deliver_status("gitea", "acme/api", status.id)).status == 202
        pull = sim.pull("gitea", "acme/api", pr.number)
        await until(lambda: bool(pull.reviews), "the review")
        assert pull.reviews[-1].state.upper().startswith("REQUEST")

        async with playwright.async_playwright() as p:
            browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            try:
                for width, height in ((1280, 900), (390, 844)):
                    page = await browser.new_page(viewport={"width": width, "height": height})
                    await sign_in(page, server.base, token)
                    href = f'a[href="/pr/gitea/acme/api/{pr.number}"]'
                    row = page.locator("#pulls tr", has=page.locator(href))
                    text = " ".join((await row.inner_text()).split())
                    assert await row.locator(".badge.request_changes").count() == 1
                    assert "request changes" in text, text
                    assert "a required check failed" in text and "checks_failed" in text
                    assert "failed: ci/test" in text
                    assert "eligible" not in text  # the gate let it through; not its verdict
                    stage = page.locator('td[data-label="stage"]', has_text=re.compile("^review$"))
                    review = page.locator("#decisions tr", has=stage)
                    assert "a required check failed" in await review.first.inner_text()
                    decisions = await page.locator("#decisions").inner_text()
                    assert "eligible\neligible" not in decisions
                    assert await page.evaluate("document.documentElement.scrollWidth") <= width
                    await page.screenshot(path=str(shots / f"rejected-{width}.png"), full_page=True)

                    await page.click(f"#pulls {href}")
                    await page.wait_for_url(f"{server.base}/pr/gitea/acme/api/{pr.number}")
                    reviews = " ".join((await page.locator("#reviews").inner_text()).split())
                    assert "request changes" in reviews and "failed: ci/test" in reviews
                    assert "reviewer lease" in await page.locator("#lease-history").inner_text()
                    assert await page.evaluate("document.documentElement.scrollWidth") <= width
                    await page.screenshot(
                        path=str(shots / f"rejected-pr-{width}.png"), full_page=True
                    )
                    await page.close()
            finally:
                await browser.close()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for shot in sorted(shots.iterdir()):
        assert shot.stat().st_size > 0
        shutil.copy(shot, ARTIFACTS / shot.name)
