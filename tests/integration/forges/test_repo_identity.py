"""Repository names are identities: a caller spelling ``acme/api`` as ``Acme/API`` reaches
the same rules, leases and records, over real HTTP against a real ``serve`` and the forge
simulator (which, like GitHub and Gitea, finds a repository in any casing).

Each test replays one way around the rules that a low-scope API token had when names were
compared as exact strings, and shows it refused with nothing changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reviewbot.runtime.review.reconcile import Reconciler
from reviewbot.sim import SimServer, Simulator
from tests.integration.merge_support import REPO, Merger, World, bot_world, set_check

FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])
MISCASED = "Acme/API"  # REPO ("acme/api") as an attacker spells it
assert MISCASED.lower() == REPO and MISCASED != REPO

# The repository requires ci/test in the bot's configuration only (no branch protection on
# the forge), and [defaults] applies to every other repository without required checks.
STRICT = {"required_checks": ["ci/test"], "automerge": True}
LENIENT = {"automerge": True, "approve_without_checks": True}


async def test_a_miscased_lease_request_does_not_get_past_the_live_lease(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    forge = "github"
    async with bot_world(tmp_path, sim, sim_server, required=(), rules=STRICT) as w:
        pr = w.sim.open_pr(forge, REPO, author="alice")
        set_check(w, forge, pr.head_sha, "failure")
        w.sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
        owner = Merger(w, "owner")
        await owner.register()
        epoch = await owner.acquire(forge, pr.number, pr.head_sha)

        attacker = Merger(w, "attacker")
        await attacker.register()
        status, body = await _acquire(w, attacker, forge, MISCASED, pr.number, pr.head_sha)
        # the live lease on acme/api holds against Acme/API: same target, same holder
        assert status == 409 and body["error"] == "lease_held", body
        assert body["holder"] == owner.identity
        status, body = await attacker.merge(forge, pr.number, pr.head_sha, 1, repo=MISCASED)
        assert status == 409 and body["error"] in ("lease_not_held", "superseded"), body
        lease = await owner.lease(forge, pr.number)
        assert (lease["holder"], lease["epoch"], lease["phase"]) == (
            owner.identity,
            epoch,
            "claimed",
        )
        assert lease["target"]["repo"] == REPO
        assert w.merge_requests(forge, pr.number) == []
        with w.db.read() as tx:
            assert [r["repo"] for r in tx.all("SELECT repo FROM leases")] == [REPO]


@FORGES
async def test_a_miscased_merge_call_does_not_skip_the_required_checks(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, forge: str
) -> None:
    async with bot_world(tmp_path, sim, sim_server, required=(), rules=STRICT) as w:
        pr = w.sim.open_pr(forge, REPO, author="alice")
        set_check(w, forge, pr.head_sha, "failure")
        w.sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
        m = Merger(w)
        await m.register()
        status, body = await _acquire(w, m, forge, MISCASED, pr.number, pr.head_sha)
        assert status == 200, body
        status, body = await m.merge(forge, pr.number, pr.head_sha, body["epoch"], repo=MISCASED)
        # the failing required check of [repos."FORGE:acme/api"] blocks, whatever the casing
        assert status == 409, body
        assert body["codes"] == ["checks_not_green"], body
        assert "ci/test failure" in body["detail"]
        assert w.merge_requests(forge, pr.number) == []
        assert not w.sim.pull(forge, REPO, pr.number).merged
        # every record is under the canonical key, never under the caller's spelling
        with w.db.read() as tx:
            repos = {r["repo"] for r in tx.all("SELECT repo FROM merge_attempts")}
            repos |= {r["repo"] for r in tx.all("SELECT repo FROM leases")}
        assert repos == {REPO}


@FORGES
async def test_a_miscased_review_request_gets_no_approval_at_a_blocked_head(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, forge: str
) -> None:
    async with bot_world(
        tmp_path, sim, sim_server, required=(), rules=STRICT, defaults=LENIENT
    ) as w:
        pr = w.sim.open_pr(forge, REPO, author="alice")
        # lint passed, the required ci/test never reported: the bot holds the head back
        set_check(w, forge, pr.head_sha, "success", context="lint")
        await w.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await w.settle()
        before = [(r.state, r.commit_id) for r in w.bot_reviews(forge, pr.number)]
        assert ("APPROVED", pr.head_sha) not in before

        status, body = await w.call(
            "POST",
            "/api/v1/reviews",
            w.token("review"),
            {"forge": forge, "repo": MISCASED, "number": pr.number},
        )
        assert status == 202, body
        await w.settle()
        after = [(r.state, r.commit_id) for r in w.bot_reviews(forge, pr.number)]
        assert after == before  # no second review, and never an approval
        assert not w.sim.pull(forge, REPO, pr.number).merged
        assert w.merge_requests(forge, pr.number) == []
        # the request was gated under the repository's own rules and key
        status, answer = await w.call(
            "GET", f"/api/v1/decisions?forge={forge}&repo={MISCASED}", w.token("read")
        )
        assert status == 200
        assert {d["repo"] for d in answer["decisions"]} == {REPO}


async def test_the_sweep_visits_each_repository_once_and_api_callers_cannot_add_one(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    forge = "github"
    async with bot_world(
        tmp_path, sim, sim_server, required=(), rules=STRICT, defaults=LENIENT
    ) as w:
        w.sim.create_repo(forge, "acme/other", default_branch="main")
        other = w.sim.open_pr(forge, "acme/other", author="alice")
        pr = w.sim.open_pr(forge, REPO, author="alice")
        set_check(w, forge, pr.head_sha, "failure")
        token = w.token("review")
        for repo, number in ((MISCASED, pr.number), ("acme/other", other.number)):
            status, body = await w.call(
                "POST", "/api/v1/reviews", token, {"forge": forge, "repo": repo, "number": number}
            )
            assert status == 202, body
        await w.settle()

        reconciler = _reconciler(w)
        first = await reconciler.sweep()
        assert first.repos == [f"gitea:{REPO}", f"github:{REPO}"]
        assert first.errors == []
        await w.settle()
        second = await reconciler.sweep()
        assert second.repos == first.repos
        assert second.queued == []
        # a head still waiting for its check is looked at again, under its one name only
        assert set(second.reevaluated) <= {f"github:{REPO}#{pr.number}"}

        # a signed webhook from the other repository puts it in the sweep, once
        await w.sim.deliver_pull_request(forge, "acme/other", other.number, action="opened")
        await w.settle()
        third = await reconciler.sweep()
        assert third.repos == [f"gitea:{REPO}", f"github:{REPO}", "github:acme/other"]


async def _acquire(
    w: World, m: Merger, forge: str, repo: str, number: int, head: str
) -> tuple[int, dict[str, Any]]:
    return await w.call(
        "POST",
        "/api/v1/leases/acquire",
        m.token,
        {
            "forge": forge,
            "repo": repo,
            "number": number,
            "role": "merger",
            "worker_identity": m.identity,
            "head_sha": head,
        },
    )


def _reconciler(w: World) -> Reconciler:
    st = w.service
    assert st.review is not None and st.journal is not None
    return Reconciler(w.settings, st.review.store, st.forges, st.review.pipeline, st.journal.append)


@FORGES
async def test_answers_show_the_forges_spelling_and_a_rename_keeps_the_records(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, forge: str
) -> None:
    defaults = {"approve_without_checks": True}
    async with bot_world(tmp_path, sim, sim_server, required=(), defaults=defaults) as w:
        w.sim.create_repo(forge, "Acme/Widgets", default_branch="main")
        pr = w.sim.open_pr(forge, "acme/widgets", author="alice")
        await w.sim.deliver_pull_request(forge, "Acme/Widgets", pr.number, action="opened")
        await w.settle()
        read = w.token("read")
        status, answer = await w.call(
            "GET", f"/api/v1/decisions?forge={forge}&repo=ACME/WIDGETS", read
        )
        assert status == 200
        (decision,) = answer["decisions"]
        assert (decision["repo"], decision["display_name"]) == ("acme/widgets", "Acme/Widgets")
        assert f"reviewbot state for {forge}:Acme/Widgets#{pr.number}" in _state_comment(
            w, forge, "acme/widgets", pr.number
        )

        # renamed on the forge (same numeric id): the next signed webhook moves the records
        w.sim.rename_repo(forge, "acme/widgets", "Acme/Gadgets")
        old_head = pr.head_sha
        new_head = w.sim.push(forge, "Acme/Gadgets", pr.number)
        await w.sim.deliver_pull_request(forge, "Acme/Gadgets", pr.number, action="synchronize")
        await w.settle()
        status, answer = await w.call(
            "GET", f"/api/v1/decisions?forge={forge}&repo=acme/gadgets&number={pr.number}", read
        )
        assert status == 200
        assert [d["display_name"] for d in answer["decisions"]] == ["Acme/Gadgets"] * 2
        assert {d["repo"] for d in answer["decisions"]} == {"acme/gadgets"}
        heads = {r["head_sha"] for r in answer["reviews"]}
        assert heads == {old_head, new_head}
        # a caller still using the old name reaches the same repository
        status, body = await w.call(
            "POST",
            "/api/v1/reviews",
            w.token("review"),
            {"forge": forge, "repo": "acme/widgets", "number": pr.number},
        )
        assert status == 202, body
        await w.settle()
        status, answer = await w.call(
            "GET", f"/api/v1/decisions?forge={forge}&repo=acme/widgets", read
        )
        assert answer["decisions"] == []
        reviews = [r for r in w.sim.pull(forge, "acme/gadgets", pr.number).reviews]
        bot = [(r.state, r.commit_id) for r in reviews if r.user == "reviewbot"]
        assert sorted(bot) == sorted([("APPROVED", old_head), ("APPROVED", new_head)]), bot
        # and a lease on the new name holds against the old one
        holder, other = Merger(w, "holder"), Merger(w, "other")
        await holder.register()
        await other.register()
        status, body = await _acquire(w, holder, forge, "Acme/Gadgets", pr.number, new_head)
        assert status == 200, body
        status, body = await _acquire(w, other, forge, "acme/widgets", pr.number, new_head)
        assert status == 409 and body["error"] == "lease_held", body
        assert body["holder"] == holder.identity


def _state_comment(w: World, forge: str, repo: str, number: int) -> str:
    (body,) = [
        c.body
        for c in w.sim.pull(forge, repo, number).comments
        if "<!-- reviewbot:pr-state -->" in c.body
    ]
    return body
