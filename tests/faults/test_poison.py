"""A poison delivery among innocent ones, against a real ``serve``: the innocent ones are all
gated once (each charged one attempt), the poison one ends ``dead`` with ``delivery_failed``
that ``explain`` shows, and ``replay`` tries it again."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from reviewbot.ingress.signatures import sign_github
from tests.faults.support import (
    REPO,
    SECRET,
    all_finished,
    assert_every_acked_delivery_finished,
    assert_one_review_per_head,
    review_jobs_settled,
    wait_for,
    world,
)

pytestmark = pytest.mark.slow

POISON_NUMBER = 2**63  # past SQLite's 64-bit integers: the row cannot be stored


async def signed_poison(w: Any, bot: Any) -> str:
    """A signed GitHub pull_request webhook for a PR number past 64 bits."""
    body = json.dumps(
        {
            "action": "opened",
            "number": POISON_NUMBER,
            "pull_request": {
                "number": POISON_NUMBER,
                "state": "open",
                "head": {"sha": "a" * 40, "ref": "topic"},
                "base": {"ref": "main"},
                "user": {"login": "alice"},
            },
            "repository": {"full_name": REPO, "id": 424242, "owner": {"login": "acme"}},
            "sender": {"login": "alice"},
        }
    ).encode()
    delivery_id = str(uuid.uuid4())
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": delivery_id,
        "X-Hub-Signature-256": sign_github(SECRET.encode(), body),
    }
    async with w.http.post(bot.base + "/webhooks/github", data=body, headers=headers) as resp:
        assert resp.status == 202, await resp.text()
    return delivery_id


async def test_a_poison_delivery_dies_alone_and_replay_tries_it_again(tmp_path: Path) -> None:
    settings = {"REVIEWBOT_WORKERS": "1", "REVIEWBOT_DELIVERY_MAX_ATTEMPTS": "2"}
    async with world(tmp_path, settings=settings) as w:
        pulls = []
        for i in range(6):
            forge = ("github", "gitea")[i % 2]
            pr = w.sim.open_pr(forge, REPO, author="alice")
            w.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
            pulls.append((forge, pr))
        # Acknowledged by a server without workers, so that one worker later claims the
        # poison delivery in the same batch as the innocent ones.
        async with w.serving("--no-workers") as bot:
            innocent = []
            poison = []
            for n, (forge, pr) in enumerate(pulls):
                innocent.append((await w.sim.deliver_pull_request(forge, REPO, pr.number)).id)
                if n == 2:
                    # The API refuses such a number (400); a signed webhook is the forge's
                    # word and is acknowledged before it is gated.
                    poison.append(await signed_poison(w, bot))
            assert len(w.rows("SELECT * FROM deliveries")) == 7

        async with w.serving():
            await wait_for(lambda: all_finished(w, innocent + poison), "the batch")
            await wait_for(lambda: review_jobs_settled(w), "the reviews")
        assert_every_acked_delivery_finished(w, innocent + poison)
        rows = w.rows("SELECT delivery_id, status, attempts FROM deliveries")
        by_id = {r["delivery_id"]: r for r in rows}
        # Only the delivery that failed is charged: the innocent ones were gated on their
        # first attempt, however often the poison one made the batch fail.
        assert {(by_id[i]["status"], by_id[i]["attempts"]) for i in innocent} == {("done", 1)}
        assert (by_id[poison[0]]["status"], by_id[poison[0]]["attempts"]) == ("dead", 2)
        assert_one_review_per_head(w, pulls)

        code, out = w.run_cli("explain", poison[0], "--json")
        assert code == 0, out
        explained = json.loads(out)
        assert [d["reason_code"] for d in explained["decisions"]] == ["delivery_failed"]
        assert "after 2 attempts" in explained["decisions"][0]["detail"]

        # replay gates it again: it still cannot be stored, and says so without a traceback.
        code, out = w.run_cli("replay", poison[0])
        assert "Traceback" not in out, out
        assert "delivery_failed" in out or "cannot" in out, out
