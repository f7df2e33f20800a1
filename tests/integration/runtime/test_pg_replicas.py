"""Three real ``serve`` replicas on one PostgreSQL database, behind a round-robin, across both
forges: a burst of deliveries (PRs opened, new heads pushed, CI reported at each head), one
replica killed with SIGKILL while it holds claims and restarted on the same data directory
before the burst ends. Afterwards every acknowledged delivery was gated exactly once, each
(PR, head) has exactly one review on the forge, no PR was merged twice, lease epochs only
ever increased per target, and what the killed replica held was finished by a live one.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from reviewbot.sim.records import Delivery
from reviewbot.sim.server import SimServer
from reviewbot.sim.simulator import Simulator
from reviewbot.store.database import Database
from reviewbot.workflowdb.bootstrap import open_store
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.process_support import ServeProcess, serve_process

pytestmark = pytest.mark.slow

SECRET = "replica-secret"
BOT = "reviewbot"
# (forge, repository, automerge): both forges, and one repository whose PRs get merged.
REPOS = (("github", "acme/api", False), ("gitea", "acme/api", False), ("github", "acme/web", True))
PRS_PER_REPO = 12
HEADS = 3  # heads per PR: opened, then two pushes
# Each head gets two deliveries (the PR event and the CI status): 216 in all.
REPLICAS = 3
LIMIT_S = 90.0  # a bound for waits that normally end within seconds, never a speed check
FINISHED = ("done", "failed", "dead")


def replica_env(
    tmp: Path, sim_server: SimServer, tokens: dict[str, str], url: str
) -> dict[str, str]:
    config = tmp / "reviewbot.toml"
    config.write_text(
        "".join(
            f'[repos."{forge}:{repo}"]\nrequired_checks = ["ci/test"]\n'
            + ("automerge = true\n" if merge else "")
            for forge, repo, merge in REPOS
        )
    )
    return {
        "REVIEWBOT_CONFIG": str(config),
        "REVIEWBOT_DATABASE_URL": url,
        "REVIEWBOT_GITHUB__API_URL": sim_server.github_api_url,
        "REVIEWBOT_GITHUB__TOKEN": tokens["github"],
        "REVIEWBOT_GITHUB__WEBHOOK_SECRET": SECRET,
        "REVIEWBOT_GITHUB__BOT_LOGIN": BOT,
        "REVIEWBOT_GITEA__URL": sim_server.gitea_url,
        "REVIEWBOT_GITEA__TOKEN": tokens["gitea"],
        "REVIEWBOT_GITEA__WEBHOOK_SECRET": SECRET,
        "REVIEWBOT_GITEA__BOT_LOGIN": BOT,
        "REVIEWBOT_WORKERS": "2",
        "REVIEWBOT_DELIVERY_RETRY_BASE_S": "0.05",
        # Short claim terms, so what the killed replica held is taken up within seconds.
        "REVIEWBOT_DELIVERY_CLAIM_S": "3",
        "REVIEWBOT_LEASES__LEASE_S": "3",
        "REVIEWBOT_LEASES__RENEW_S": "2",
        "REVIEWBOT_LEASES__RETRY_S": "1",
        # The sweep adopts a merge the killed replica sent but never recorded.
        "REVIEWBOT_RECONCILE_INTERVAL_S": "1",
    }


@dataclass
class Replica:
    data_dir: Path
    serve: ServeProcess | None = None

    @property
    def pid(self) -> int:
        assert self.serve is not None
        return self.serve.proc.pid


@dataclass
class RoundRobin:
    """A load balancer in front of the replicas: each delivery goes to the next replica in
    turn; one that does not answer (killed) is skipped, as a balancer's health check would."""

    sim: Simulator
    replicas: list[Replica]
    acknowledged: list[str] = field(default_factory=list)
    turn: itertools.count[int] = field(default_factory=itertools.count)

    async def send(self, forge: str, deliver: Callable[[], Awaitable[Delivery]]) -> Delivery:
        deadline = time.monotonic() + LIMIT_S
        while True:
            replica = self.replicas[next(self.turn) % len(self.replicas)]
            if replica.serve is not None:
                # The simulator reads its webhook target before its first await: switching
                # it here picks the replica for exactly this delivery.
                self.sim.set_webhook(forge, f"{replica.serve.base}/webhooks/{forge}", SECRET)
                sent = await deliver()
                if sent.status == 202:
                    self.acknowledged.append(sent.id)
                    return sent
                assert sent.status is None, (sent.status, sent.response_body)
            if time.monotonic() > deadline:
                raise AssertionError("no replica acknowledged a delivery")
            await asyncio.sleep(0.01)


def bot_reviews(sim: Simulator, forge: str, repo: str, number: int) -> list[Any]:
    return [r for r in sim.pull(forge, repo, number).reviews if r.user == BOT]


def reviewed_at(sim: Simulator, forge: str, repo: str, number: int, head: str) -> bool:
    return head in {r.commit_id for r in bot_reviews(sim, forge, repo, number)}


async def wait_for(
    check: Callable[[], bool], what: str, explain: Callable[[], object] = lambda: ""
) -> None:
    deadline = time.monotonic() + LIMIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{explain()}")
        await asyncio.sleep(0.05)


def pull_records(db: Database, forge: str, repo: str, number: int) -> str:
    """What the store holds about one PR: where a head that never got its review stopped."""
    lines = []
    for table, columns in (
        ("pr_gate_decisions", "delivery_id, head_sha, event, action, decision, reason_code"),
        ("review_jobs", "delivery_id, head_sha, status, attempts, claimed_by, last_error"),
        ("review_decisions", "head_sha, decision, reason_code, detail, delivery_id, worker"),
        ("review_outbox", "head_sha, verdict, status, attempts, last_error, worker, epoch"),
        ("lease_history", "role, event, holder, epoch, head_sha, reason"),
    ):
        found = rows(
            db,
            f"SELECT {columns} FROM {table} WHERE forge = ? AND repo = ? AND number = ?"
            " ORDER BY id",
            (forge, repo, number),
        )
        lines += [f"{table}:"] + [f"  {r}" for r in found]
    return "\n".join(lines)


def rows(db: Database, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    with db.read() as tx:
        return [dict(r) for r in tx.all(sql, params)]


@asynccontextmanager
async def world(tmp: Path) -> AsyncIterator[tuple[Simulator, SimServer, dict[str, str]]]:
    sim = Simulator()
    async with SimServer(sim, host="127.0.0.1", port=0) as sim_server:
        tokens = {}
        for forge in ("github", "gitea"):
            tokens[forge] = sim.add_user(forge, BOT, bot=True)
            sim.add_user(forge, "alice")
        for forge, repo, _ in REPOS:
            sim.create_repo(forge, repo, default_branch="main")
            sim.set_permission(forge, repo, "alice", "write")
        yield sim, sim_server, tokens


async def test_three_replicas_a_burst_and_a_kill_one_review_per_head_one_merge(
    tmp_path: Path, postgres_store_url: str
) -> None:
    async with world(tmp_path) as (sim, sim_server, tokens), AsyncExitStack() as stack:
        env = replica_env(tmp_path, sim_server, tokens, postgres_store_url)
        replicas = [Replica(tmp_path / f"replica-{i}") for i in range(REPLICAS)]

        async def start(replica: Replica) -> None:
            replica.serve = await stack.enter_async_context(
                serve_process(
                    cwd=tmp_path,
                    env=env | {"REVIEWBOT_DATA_DIR": str(replica.data_dir)},
                    start_s=LIMIT_S,  # three start at once on a busy machine
                )
            )

        await asyncio.gather(*(start(r) for r in replicas))
        db = open_store(WorkflowPaths(tmp_path / "reader", None, postgres_store_url))
        stack.callback(db.close)
        robin = RoundRobin(sim, replicas)

        pulls: list[tuple[str, str, int, bool]] = []
        heads: dict[tuple[str, str, int], list[str]] = defaultdict(list)
        for forge, repo, merge in REPOS:
            for i in range(PRS_PER_REPO):
                pr = sim.open_pr(forge, repo, author="alice", head_ref=f"b{i}")
                pulls.append((forge, repo, pr.number, merge))

        async def one_pull(forge: str, repo: str, number: int, merge: bool) -> None:
            """Each head in turn: CI reports, the PR event and the status are delivered, and
            the next head is pushed once this one has its review."""
            for k in range(HEADS):
                if k == HEADS - 1:  # the last heads go to all three, the restarted one too
                    await restarted.wait()
                head = sim.pull(forge, repo, number).head_sha if k == 0 else None
                head = head or sim.push(forge, repo, number)
                heads[(forge, repo, number)].append(head)
                # On the merging repository only the last head is green, so only it merges.
                green = not merge or k == HEADS - 1
                status = sim.set_status(
                    forge, repo, head, "ci/test", "success" if green else "failure"
                )
                action = "opened" if k == 0 else "synchronize"
                await robin.send(
                    forge, partial(sim.deliver_pull_request, forge, repo, number, action=action)
                )
                await robin.send(forge, partial(sim.deliver_status, forge, repo, status.id))
                await wait_for(
                    partial(reviewed_at, sim, forge, repo, number, head),
                    f"a review of {forge}:{repo}#{number} at {head[:8]}",
                    partial(pull_records, db, forge, repo, number),
                )

        victim = replicas[-1]
        restarted = asyncio.Event()
        killed: dict[str, Any] = {}

        async def kill_and_restart() -> None:
            """Mid-burst, at a moment the victim holds claims: SIGKILL, then start it again on
            the same data directory."""
            total = len(pulls) * HEADS * 2
            await wait_for(lambda: len(robin.acknowledged) >= total // 3, "a third of the burst")
            holder = f"/pid-{victim.pid}/"
            held: list[str] = []

            def holding() -> bool:
                held[:] = [
                    r["delivery_id"]
                    for r in rows(
                        db,
                        "SELECT delivery_id FROM deliveries"
                        " WHERE status = 'processing' AND claimed_by LIKE ?",
                        (f"%{holder}%",),
                    )
                ]
                return bool(held)

            await wait_for(holding, "the victim to hold a claim")
            assert victim.serve is not None
            serve, victim.serve = victim.serve, None
            serve.proc.send_signal(signal.SIGKILL)
            await serve.proc.wait()
            # Read again once it is dead: what it still held then (its terms have not lapsed).
            assert holding(), "the victim finished all it held before the signal landed"
            killed.update(holder=holder, held=list(held), at=len(robin.acknowledged))
            await start(victim)
            restarted.set()

        await asyncio.gather(kill_and_restart(), *(one_pull(*p) for p in pulls))
        total = len(robin.acknowledged)
        # The replica was killed and back before the burst ended.
        assert killed and killed["at"] < total, (killed, total)

        # Every acknowledged delivery finished, and each has exactly one decision (decisions
        # commit with the delivery's finish: one gated twice would have two).
        acked = robin.acknowledged
        assert len(set(acked)) == len(acked) == len(pulls) * HEADS * 2

        def all_finished() -> bool:
            found = rows(
                db,
                "SELECT status FROM deliveries WHERE delivery_id = ANY(?)",
                (acked,),
            )
            return len(found) == len(acked) and all(r["status"] in FINISHED for r in found)

        await wait_for(all_finished, "every acknowledged delivery")
        decided = rows(
            db,
            "SELECT d.delivery_id, d.status, d.claimed_by, (SELECT count(*) FROM pr_gate_decisions"
            " c WHERE c.delivery_id = d.delivery_id) AS n FROM deliveries d"
            " WHERE d.delivery_id = ANY(?)",
            (acked,),
        )
        by_id = {r["delivery_id"]: r for r in decided}
        assert sorted(by_id) == sorted(acked)
        twice = [d for d, r in by_id.items() if r["n"] != 1]
        assert not twice, "\n".join(
            str(r)
            for r in rows(
                db,
                "SELECT delivery_id, forge, repo, number, head_sha, event, decision, reason_code,"
                " detail FROM pr_gate_decisions WHERE delivery_id = ANY(?)"
                " ORDER BY delivery_id, id",
                (twice[:3],),
            )
        )
        # The two survivors and the restarted replica each gated part of the burst.
        gated_by = {r["claimed_by"].split("/pid-")[1].split("/")[0] for r in decided}
        assert {str(r.pid) for r in replicas} <= gated_by, gated_by
        # What the killed replica held is finished, by someone alive.
        for delivery_id in killed["held"]:
            row = (
                by_id.get(delivery_id)
                or rows(db, "SELECT * FROM deliveries WHERE delivery_id = ?", (delivery_id,))[0]
            )
            assert row["status"] in FINISHED, row
            assert killed["holder"] not in (row["claimed_by"] or ""), row

        def settled() -> bool:
            jobs = rows(db, "SELECT status FROM review_jobs")
            outbox = rows(db, "SELECT status FROM review_outbox")
            merged = all(
                sim.pull(forge, repo, number).merged
                for forge, repo, number, merge in pulls
                if merge
            )
            recorded = len(rows(db, "SELECT number FROM merged_pulls")) == sum(
                1 for *_, merge in pulls if merge
            )
            return (
                merged
                and recorded
                and all(j["status"] == "done" for j in jobs)
                and all(o["status"] != "pending" for o in outbox)
            )

        await wait_for(settled, "the reviews and merges to settle")

        # Exactly one review per (PR, head) on the forge: none missing, none twice.
        for forge, repo, number, _ in pulls:
            posted = Counter(r.commit_id for r in bot_reviews(sim, forge, repo, number))
            assert posted == Counter(heads[(forge, repo, number)]), (forge, repo, number, posted)

        # Each PR of the merging repository merged once, at its last head; no other PR merged.
        for forge, repo, number, merge in pulls:
            pull = sim.pull(forge, repo, number)
            merges = [
                r
                for r in sim.requests
                if r.forge == forge
                and r.method in ("PUT", "POST")
                and r.path == f"/repos/{repo}/pulls/{number}/merge"
                and r.status < 300
            ]
            assert pull.merged == merge, (forge, repo, number)
            assert len(merges) == (1 if merge else 0), (forge, repo, number, merges)
        merged_rows = rows(db, "SELECT forge, repo, number, head_sha FROM merged_pulls")
        assert sorted((r["forge"], r["repo"], r["number"], r["head_sha"]) for r in merged_rows) == (
            sorted(
                (forge, repo, number, heads[(forge, repo, number)][-1])
                for forge, repo, number, merge in pulls
                if merge
            )
        )

        # Lease epochs strictly increase per target, whichever replica granted them, and the
        # high-water mark is the last one granted.
        granted = rows(
            db,
            "SELECT forge, repo, number, role, holder, epoch FROM lease_history"
            " WHERE event IN ('granted', 'takeover') ORDER BY id",
        )
        per_target: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for r in granted:
            per_target[(r["forge"], r["repo"], r["number"], r["role"])].append(r["epoch"])
        assert per_target
        for target, epochs in per_target.items():
            assert all(a < b for a, b in itertools.pairwise(epochs)), (target, epochs)
        marks = {
            (r["forge"], r["repo"], r["number"], r["role"]): r["epoch"]
            for r in rows(db, "SELECT forge, repo, number, role, epoch FROM lease_epochs")
        }
        assert {t: e[-1] for t, e in per_target.items()} == {t: marks[t] for t in per_target}
        assert len({r["holder"] for r in granted}) > 1  # granted by more than one replica
