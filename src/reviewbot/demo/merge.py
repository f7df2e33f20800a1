"""The demo's merge: a merger session over the bot's HTTP lease API.

A token scoped ``lease,merge,read`` and bound to the one repository; the session registers
a worker identity, acquires the merger lease pinned to the approved head and asks the bot to
merge at that head. The bot checks everything again at merge time (approval at exactly
that head, required checks, the lease), merges pinned to the head and releases the lease
with the merge; a refused merge leaves the lease with the session, which gives it back.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from reviewbot.demo.steps import Narrator, StepFailed, expect, short
from reviewbot.demo.world import GITEA_REPO
from reviewbot.store.tokens import create_token

MERGER_NAME = "demo.merger"


async def _call(story: Narrator, token: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    world = story.world
    headers = {"Authorization": f"Bearer {token}"}
    async with world.http.post(world.base_url + path, json=body, headers=headers) as response:
        try:
            answer: Any = await response.json(content_type=None)
        except ValueError:
            answer = {}
        if response.status not in (200, 201) or not isinstance(answer, dict):
            detail = answer.get("detail", "") if isinstance(answer, dict) else ""
            code = answer.get("error", "") if isinstance(answer, dict) else ""
            raise StepFailed(
                f"POST {path} to succeed",
                f"it answered {response.status} {code}: {detail}".rstrip(": "),
            )
        return answer


async def _get(story: Narrator, token: str, path: str, query: dict[str, Any]) -> dict[str, Any]:
    world = story.world
    headers = {"Authorization": f"Bearer {token}"}
    params = {k: str(v) for k, v in query.items()}
    async with world.http.get(world.base_url + path, params=params, headers=headers) as response:
        answer: Any = await response.json(content_type=None)
        if response.status != 200 or not isinstance(answer, dict):
            raise StepFailed(f"GET {path} to succeed", f"it answered {response.status}: {answer}")
        return answer


async def merge_through_lease(story: Narrator, number: int, head: str) -> None:
    world = story.world
    target = {"forge": "gitea", "repo": GITEA_REPO, "number": number}
    token, _ = create_token(
        world.db,
        name=f"demo-merger-{uuid.uuid4().hex[:8]}",
        scopes="lease,merge,read",
        repo=f"gitea:{GITEA_REPO}",
        now=time.time(),
    )
    story.note(f"a merger session gets a token scoped lease,merge,read for gitea:{GITEA_REPO}")
    worker = await _call(
        story,
        token,
        "/api/v1/workers",
        {
            "name": MERGER_NAME,
            "client": "reviewbot-demo",
            "session_id": f"demo-{uuid.uuid4().hex[:12]}",
            "role": "merger",
        },
    )
    identity = str(worker["worker_identity"])
    story.note(f"it registers as worker {identity}")
    lease = await _call(
        story,
        token,
        "/api/v1/leases/acquire",
        {**target, "role": "merger", "worker_identity": identity, "head_sha": head},
    )
    epoch = int(lease["epoch"])
    story.note(
        f"it acquires the merger lease pinned to {short(lease['head_sha'])} (epoch {epoch}, "
        f"expires in {float(lease['expires_in_s']):.0f} s unless renewed)"
    )
    try:
        merged = await _call(
            story,
            token,
            "/api/v1/merges",
            {**target, "head_sha": head, "worker_identity": identity, "epoch": epoch},
        )
    except BaseException:
        # A refused merge leaves the lease with the session: give it back.
        await _call(
            story,
            token,
            "/api/v1/leases/release",
            {**target, "role": "merger", "worker_identity": identity, "epoch": epoch},
        )
        raise
    pull = world.pull("gitea", GITEA_REPO, number)
    expect(
        bool(merged.get("merged")) and pull.merged and pull.head_sha == head,
        f"gitea:{GITEA_REPO}#{number} merged at {short(head)}",
        f"the bot answered {merged}; the forge shows merged={pull.merged} at "
        f"{short(pull.head_sha)}",
    )
    expect(
        merged.get("recorded") is True,
        "the merge recorded in the bot's store",
        f"the bot answered {merged}",
    )
    expect(
        merged.get("merge_commit_sha") == pull.merge_commit_sha,
        f"the recorded merge commit to be the forge's ({short(pull.merge_commit_sha)})",
        f"the bot recorded {merged.get('merge_commit_sha')}",
    )
    sent = [
        r.body
        for r in world.sim.requests
        if r.forge == "gitea"
        and r.method == "POST"
        and r.path == f"/repos/{GITEA_REPO}/pulls/{number}/merge"
    ]
    pins = [b.get("head_commit_id") if isinstance(b, dict) else None for b in sent]
    expect(
        pins == [head],
        f"one merge request to the forge pinned to head_commit_id {short(head)}",
        f"merge requests pinned to {pins}",
    )
    approvers = ", ".join(merged.get("approvers") or []) or "nobody"
    story.note(
        f"the bot merges pinned to head_commit_id {short(head)} (approved there by "
        f"{approvers}): merge commit {short(pull.merge_commit_sha)}"
    )
    leases = await _get(story, token, "/api/v1/leases", {**target, "role": "merger"})
    phases = [str(item.get("phase")) for item in leases.get("leases", [])]
    expect(
        phases == ["released"],
        "the merger lease released with the merge",
        f"the merger lease is {', '.join(phases) or 'gone'}",
    )
    story.note("the bot released the merger lease with the merge (phase released)")
    story.merge_commit = pull.merge_commit_sha or ""
