"""Parity gates mutation, under a real ``reviewbot serve``: once the configuration file on
disk differs from what the process read, or the store's schema is newer than its code, the
process reviews and merges nothing (``restart_required``) until it restarts, and
``GET /api/v1/runtime`` says why. Reads and the lease API keep answering."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp

from reviewbot.runtime.parity import known_schema
from reviewbot.sim import SimServer, Simulator
from reviewbot.workflowdb.paths import WorkflowPaths
from tests.integration.process_support import ServeProcess, run_reviewbot, serve_process

REPO = "acme/api"
WAIT_S = 30.0  # a bound for waits that end in milliseconds, never a speed check


class Agent:
    def __init__(self, http: aiohttp.ClientSession, server: ServeProcess, token: str) -> None:
        self.http, self.base, self.token = http, server.base, token

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.http.request(method, self.base + path, json=body, headers=headers) as r:
            return r.status, await r.json()

    async def decisions(self, number: int) -> list[dict[str, Any]]:
        query = f"/api/v1/decisions?forge=gitea&repo={REPO}&number={number}"
        status, body = await self.call("GET", query)
        assert status == 200, body
        reviews: list[dict[str, Any]] = body["reviews"]
        return reviews

    async def merge_at(self, number: int, head: str) -> Any:
        status, worker = await self.call(
            "POST",
            "/api/v1/workers",
            {"name": "agent", "client": "test", "session_id": "s1", "role": "merger"},
        )
        assert status == 201, worker
        identity = worker["worker_identity"]
        lease_body = {"forge": "gitea", "repo": REPO, "number": number, "role": "merger"}
        status, lease = await self.call(
            "POST",
            "/api/v1/leases/acquire",
            {**lease_body, "worker_identity": identity, "head_sha": head},
        )
        assert status == 200, lease  # leases are not gated: they change nothing on the forge
        claim = {**lease_body, "worker_identity": identity, "epoch": lease["epoch"]}
        merge = {"forge": "gitea", "repo": REPO, "number": number, "head_sha": head}
        status, answer = await self.call(
            "POST",
            "/api/v1/merges",
            {**merge, "worker_identity": identity, "epoch": lease["epoch"]},
        )
        if not answer.get("merged"):  # give the lease back: nothing was done under it
            released, body = await self.call("POST", "/api/v1/leases/release", claim)
            assert released == 200, body
        return status, answer


async def until(probe: Any) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while True:
        got = probe()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        assert loop.time() < deadline, "gave up waiting"
        await asyncio.sleep(0.05)


def setup(tmp_path: Path, sim: Simulator, sim_server: SimServer) -> tuple[Path, dict[str, str]]:
    bot = sim.add_user("gitea", "reviewbot", bot=True)
    sim.add_user("gitea", "alice")
    sim.create_repo("gitea", REPO, default_branch="main")
    config = tmp_path / "reviewbot.toml"
    config.write_text(
        'runtime_check_s = 0\n\n[defaults]\nrequired_checks = ["ci/test"]\n\n'
        f'[gitea]\nurl = "{sim_server.gitea_url}"\nbot_login = "reviewbot"\n'
    )
    env = {
        "REVIEWBOT_GITEA__TOKEN": bot,
        "REVIEWBOT_GITEA__WEBHOOK_SECRET": "s3cret",
        "REVIEWBOT_DATA_DIR": str(tmp_path / "data"),
        "REVIEWBOT_CONFIG": str(config),
    }
    return config, env


def agent_token(tmp_path: Path, env: dict[str, str]) -> str:
    created = run_reviewbot(
        "token", "create", "--name", "agent", "--scopes", "review,lease,merge,read", "--json",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    token: str = json.loads(created.stdout)["token"]
    return token


async def green_pr(sim: Simulator) -> Any:
    pr = sim.open_pr("gitea", REPO, author="alice")
    sim.set_status("gitea", REPO, pr.head_sha, "ci/test", "success")
    assert (await sim.deliver_pull_request("gitea", REPO, pr.number)).status == 202
    return pr


async def test_a_changed_config_file_stops_reviews_and_merges_until_a_restart(
    tmp_path: Path,
) -> None:
    sim = Simulator()
    async with SimServer(sim, host="127.0.0.1", port=0) as sim_server:
        config, env = setup(tmp_path, sim, sim_server)
        token = agent_token(tmp_path, env)
        async with serve_process(cwd=tmp_path, env=env) as server, aiohttp.ClientSession() as h:
            sim.set_webhook("gitea", url=server.base + "/webhooks/gitea", secret="s3cret")
            agent = Agent(h, server, token)
            _, runtime = await agent.call("GET", "/api/v1/runtime")
            assert (runtime["mutations"], runtime["refusal_code"]) == ("allowed", None)
            first = await green_pr(sim)  # parity holds: reviewed and approved
            await until(lambda: any(r.user == "reviewbot" for r in sim.pull(
                "gitea", REPO, first.number).reviews))  # fmt: skip

            changed = "runtime_check_s = 0\nreview_request_dedupe_s = 30\n"
            config.write_text(config.read_text().replace("runtime_check_s = 0\n", changed))
            _, runtime = await agent.call("GET", "/api/v1/runtime")
            assert (runtime["mutations"], runtime["refusal_code"]) == (
                "refused",
                "restart_required",
            )
            assert runtime["reasons"] == ["the configuration on disk differs from the running one"]

            second = await green_pr(sim)
            verdicts = await until(lambda: agent.decisions(second.number))
            assert [(v["decision"], v["reason_code"]) for v in verdicts] == [
                ("error", "restart_required")
            ]
            assert "the configuration on disk differs" in verdicts[0]["detail"]
            assert not sim.pull("gitea", REPO, second.number).reviews  # nothing posted

            status, refused = await agent.merge_at(first.number, first.head_sha)
            assert refused["merged"] is False and refused["codes"] == ["restart_required"]
            assert "restart the process" in refused["detail"], (status, refused)
            assert not sim.pull("gitea", REPO, first.number).merged

        # the restarted process runs what is on disk: it merges again
        async with serve_process(cwd=tmp_path, env=env) as server, aiohttp.ClientSession() as h:
            agent = Agent(h, server, token)
            status, merged = await agent.merge_at(first.number, first.head_sha)
            assert merged["merged"] is True, (status, merged)


async def test_a_newer_schema_in_the_store_stops_reviews_and_merges(tmp_path: Path) -> None:
    sim = Simulator()
    async with SimServer(sim, host="127.0.0.1", port=0) as sim_server:
        _, env = setup(tmp_path, sim, sim_server)
        token = agent_token(tmp_path, env)
        async with serve_process(cwd=tmp_path, env=env) as server, aiohttp.ClientSession() as h:
            sim.set_webhook("gitea", url=server.base + "/webhooks/gitea", secret="s3cret")
            agent = Agent(h, server, token)
            pr = await green_pr(sim)
            await until(lambda: any(r.user == "reviewbot" for r in sim.pull(
                "gitea", REPO, pr.number).reviews))  # fmt: skip

            # what a newer version's migration leaves in the ledger of the shared store
            newer = known_schema() + 1
            db_file = WorkflowPaths(tmp_path / "data").db_file
            with sqlite3.connect(db_file) as db:
                db.execute(
                    "INSERT INTO schema_migration_log (file_name, sha256, destructive,"
                    " applied_by, applied_at) VALUES (?, 'x', 0, 'reviewbot 9.9', "
                    "'2026-12-01T00:00:00Z')",
                    (f"{newer:04d}_from_a_newer_version.sql",),
                )
            _, runtime = await agent.call("GET", "/api/v1/runtime")
            assert runtime["schema_version"] == newer and runtime["schema_known"] == newer - 1
            assert runtime["mutations"] == "refused"
            assert runtime["reasons"][0].startswith(
                f"the store's schema is at migration {newer}, newer than this code knows"
            )
            status, refused = await agent.merge_at(pr.number, pr.head_sha)
            assert refused["codes"] == ["restart_required"], (status, refused)
            assert not sim.pull("gitea", REPO, pr.number).merged


async def test_a_process_on_a_store_a_newer_version_migrated_posts_no_pending_review(
    tmp_path: Path,
) -> None:
    """A verdict recorded (its outbox row pending) by a process that then stopped; a process
    of this code started on a store a newer version has since migrated leaves the row
    pending, saying why, and posts nothing."""
    from tests.integration.review_support import (
        bot_env,
        outbox_rows,
        prepare_sim,
        serve_until_crash,
        stop_bot,
        wait_for,
    )

    sim = Simulator()
    async with SimServer(sim) as sim_server:
        tokens = prepare_sim(sim)
        env = bot_env(tmp_path, sim_server, tokens)
        pr = sim.open_pr("gitea", REPO, author="alice")
        sim.set_status("gitea", REPO, pr.head_sha, "ci/test", "success")
        await serve_until_crash(tmp_path, sim, env, "gitea", pr.number, "after_outbox")
        (row,) = outbox_rows(tmp_path)
        assert row["status"] == "pending"

        newer = known_schema() + 1
        with sqlite3.connect(tmp_path / "data" / "db" / "db.sqlite") as db:
            db.execute(
                "INSERT INTO schema_migration_log (file_name, sha256, destructive,"
                " applied_by, applied_at) VALUES (?, 'x', 0, 'reviewbot 9.9', "
                "'2026-12-01T00:00:00Z')",
                (f"{newer:04d}_from_a_newer_version.sql",),
            )
        async with serve_process(cwd=tmp_path, env=env) as bot:
            await wait_for(
                lambda: "restart_required" in (outbox_rows(tmp_path)[0]["last_error"] or ""),
                "the refused drain",
            )
            await stop_bot(bot)
        (row,) = outbox_rows(tmp_path)
        assert row["status"] == "pending" and row["forge_review_id"] is None
        assert "newer than this code knows" in row["last_error"]
        assert not [r for r in sim.pull("gitea", REPO, pr.number).reviews if r.user == "reviewbot"]
