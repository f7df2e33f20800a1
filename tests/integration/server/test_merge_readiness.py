"""One merge-readiness authority over real HTTP: the bot approved a PR at its head, then the
forge's facts changed (a reviewer requested changes, the PR became unmergeable, a required
check went red). The state comment on the forge, ``GET /api/v1/capability``, the status page
and ``POST /api/v1/merges`` must all say the same: not ready, for the same reason. (The
comment used to keep saying ``MERGE_READY: yes`` from the bot's own records.)"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

import pytest

from reviewbot.core.prstate import STATE_MARKER, PRStateView, parse_pr_state
from tests.integration.merge_support import CHANGES, REPO, Merger, World, set_check
from tests.integration.server.test_status_page import Browser

FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])


def state_comment(w: World, forge: str, number: int) -> PRStateView:
    (body,) = [c.body for c in w.sim.pull(forge, REPO, number).comments if STATE_MARKER in c.body]
    return parse_pr_state(body)


async def approved_by_the_bot(w: World, forge: str) -> Any:
    pr = w.sim.open_pr(forge, REPO, author="alice", body="Fixes #3 and closes acme/other#4")
    set_check(w, forge, pr.head_sha, "success")
    await w.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
    await w.settle()
    assert [r.state for r in w.bot_reviews(forge, pr.number)] == ["APPROVED"]
    return pr


async def capability(w: World, forge: str, number: int, token: str, worker: str) -> Any:
    query = urllib.parse.urlencode(
        {"pr": f"{forge}:{REPO}#{number}", "role": "merge", "worker": worker}
    )
    status, answer = await w.call("GET", f"/api/v1/capability?{query}", token)
    assert status == 200, answer
    return answer


async def status_page(w: World, forge: str, number: int) -> str:
    browser = Browser(w.base, w.http, w.db)
    signed = await browser.sign_in(w.token("read"))
    assert signed.status == 303, signed.text
    page = await browser.get(f"/pr/{forge}/{REPO}/{number}")
    assert page.status == 200, page.text
    found = re.search(r'<section id="merge-readiness">.*?</section>', page.text, re.S)
    assert found, page.text
    return found.group(0)


async def test_ready_everywhere_then_not_ready_everywhere(world: World) -> None:
    w, forge = world, "gitea"
    pr = await approved_by_the_bot(w, forge)
    view = state_comment(w, forge, pr.number)
    assert view.merge_ready is True
    assert (view.issue, view.validation) == ("#3", "ci/test=success")
    (bot_review,) = w.bot_reviews(forge, pr.number)
    assert view.native_review_proof.startswith(f"id={bot_review.id} state=approved url=http")
    m = Merger(w)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    answer = await capability(w, forge, pr.number, m.token, m.identity)
    assert (answer["allowed"], answer["codes"]) == (True, [])
    assert 'class="badge merge_ready"' in await status_page(w, forge, pr.number)
    status, merged = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert status == 200 and merged["merged"] is True, merged


@FORGES
@pytest.mark.parametrize("change", ["changes_requested", "not_mergeable", "checks_not_green"])
async def test_a_change_after_the_approval_is_seen_by_every_surface(
    world: World, forge: str, change: str
) -> None:
    w = world
    pr = await approved_by_the_bot(w, forge)
    assert state_comment(w, forge, pr.number).merge_ready is True
    if change == "changes_requested":
        review = w.sim.submit_review(forge, REPO, pr.number, reviewer="carol", state=CHANGES[forge])
        await w.sim.deliver_pull_request_review(forge, REPO, pr.number, review.id)
    else:
        if change == "not_mergeable":
            w.sim.set_mergeable(forge, REPO, pr.number, False)
            status_id = set_check(w, forge, pr.head_sha, "success").id
        else:
            status_id = set_check(w, forge, pr.head_sha, "failure").id
        await w.sim.deliver_status(forge, REPO, status_id)
    await w.settle()

    view = state_comment(w, forge, pr.number)  # what an agent reads off the forge
    assert view.merge_ready is False, view
    assert change in view.next_prompt
    assert view.state == "needs_attention"
    m = Merger(w)
    await m.register()
    epoch = await m.acquire(forge, pr.number, pr.head_sha)
    answer = await capability(w, forge, pr.number, m.token, m.identity)
    assert answer["allowed"] is False and change in answer["codes"]
    page = await status_page(w, forge, pr.number)
    assert 'class="badge merge_ready"' not in page and f"<code>{change}</code>" in page
    status, refused = await m.merge(forge, pr.number, pr.head_sha, epoch)
    assert refused["merged"] is False and change in refused["codes"], (status, refused)
    assert w.merge_requests(forge, pr.number) == []


async def test_the_page_says_why_when_the_forge_cannot_be_read(world: World) -> None:
    """A pull request the forge does not know: the records still show, and the readiness
    section says it was not read (no error page, no guess)."""
    page = await status_page(world, "gitea", 4242)
    assert "Not read:" in page and "merge_ready" not in page
