"""``reviewbot mcp --stdio`` driven by the official ``mcp`` client as its subprocess, against
the forge simulator over HTTP and the real SQLite store: the same tools, scopes and
bindings as ``/mcp``, with the token checked before anything is served."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import reviewbot
from reviewbot.config import load_settings
from reviewbot.sim import SimServer, Simulator
from reviewbot.store import decisions, journal
from reviewbot.store.journal import NewDelivery
from reviewbot.store.tokens import create_token, revoke_token
from reviewbot.workflowdb.bootstrap import open_store
from tests.integration.mcp_support import mcp_stdio, ok, refused
from tests.integration.merge_support import BOT, REPO, prepare_sim, set_check
from tests.integration.process_support import serve_process
from tests.integration.server_support import WAIT_S

pytestmark = pytest.mark.slow
FORGE = "gitea"
NOW = 1767225600.0  # 2026-01-01T00:00:00Z


class Local:
    """A data folder and configuration for local stdio processes."""

    def __init__(self, tmp_path: Path, sim_server: SimServer, tokens: dict[str, str]) -> None:
        config = tmp_path / "reviewbot.toml"
        config.write_text(f'[repos."gitea:{REPO}"]\nrequired_checks = ["ci/test"]\n')
        package_root = Path(reviewbot.__file__).resolve().parent.parent
        self.env = {
            "PYTHONPATH": str(package_root),
            "REVIEWBOT_CONFIG": str(config),
            "REVIEWBOT_DATA_DIR": str(tmp_path / "data"),
            "REVIEWBOT_GITEA__URL": sim_server.gitea_url,
            "REVIEWBOT_GITEA__TOKEN": tokens[FORGE],
            "REVIEWBOT_GITEA__BOT_LOGIN": BOT,
            # A new Python process per test on a busy machine; no test here is about expiry.
            "REVIEWBOT_LEASES__LEASE_S": "600",
        }
        for key, value in self.env.items():
            os.environ[key] = value  # load_settings reads them (the conftest restores it)
        self.db = open_store(load_settings())

    def token(self, scopes: str, name: str, repo: str | None = None) -> str:
        plain, _ = create_token(self.db, name=name, scopes=scopes, repo=repo, now=NOW)
        return plain

    def env_with(self, token: str | None) -> dict[str, str]:
        return {**self.env, **({"REVIEWBOT_TOKEN": token} if token else {})}


@pytest.fixture
def local(
    tmp_path: Path, sim: Simulator, sim_server: SimServer, monkeypatch: pytest.MonkeyPatch
) -> Local:
    for key in ("REVIEWBOT_CONFIG", "REVIEWBOT_DATA_DIR"):
        monkeypatch.setenv(key, "")
    return Local(tmp_path, sim_server, prepare_sim(sim, ("ci/test",)))


async def call(client: Any, tool: str, /, **arguments: Any) -> Any:
    return await client.call_tool(tool, arguments)


async def test_a_complete_merger_session_over_stdio(local: Local, sim: Simulator) -> None:
    pr = sim.open_pr(FORGE, REPO, author="alice")
    set_check(sim, FORGE, pr.head_sha, "success")
    sim.submit_review(FORGE, REPO, pr.number, reviewer="bob", state="APPROVED")
    token = local.token("lease,merge,read", "local-agent")
    target = {"forge": FORGE, "repo": REPO, "number": pr.number, "role": "merger"}
    async with mcp_stdio(local.env_with(token)) as client:
        identity = ok(
            await call(
                client, "register_worker", name="local", client="t", session_id="s", role="merger"
            )
        )["worker_identity"]
        ok(await call(client, "worker_heartbeat", worker_identity=identity))
        lease = ok(
            await call(
                client, "acquire_lease", **target, worker_identity=identity, head_sha=pr.head_sha
            )
        )
        claim = {**target, "worker_identity": identity, "epoch": lease["epoch"]}
        ok(await call(client, "heartbeat_lease", **claim))

        # refusals on the way: wrong scope, wrong repository, a stale epoch
        code, _ = refused(await call(client, "review_pr", forge=FORGE, repo=REPO, number=1))
        assert code == "missing_scope"
        code, _ = refused(await call(client, "heartbeat_lease", **{**claim, "epoch": 99}))
        assert code == "lease_not_held"

        merged = ok(
            await call(
                client, "merge_pr", forge=FORGE, repo=REPO, number=pr.number,
                head_sha=pr.head_sha, worker_identity=identity, epoch=lease["epoch"],
            )
        )  # fmt: skip
        assert merged["merged"] is True
        assert sim.pull(FORGE, REPO, pr.number).merged
        released = await call(client, "release_lease", **claim)
        assert released.is_error is False or refused(released)[0] == "lease_not_held"


async def test_a_bound_token_and_a_revoked_one_over_stdio(local: Local, sim: Simulator) -> None:
    sim.create_repo(FORGE, "acme/other", default_branch="main")
    other = sim.open_pr(FORGE, "acme/other", author="alice")
    token = local.token("lease,read", "bound", repo=f"{FORGE}:acme/api")
    async with mcp_stdio(local.env_with(token)) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed == {"explain", "pr_state", "list_leases", "register_worker",
                          "worker_heartbeat", "acquire_lease", "heartbeat_lease",
                          "release_lease", "resolve_capability", "lease_history",
                          "runtime", "whoami", "watch_pr", "leave_lease_line",
                          "queue_status", "queue_predict"}  # fmt: skip
        identity = ok(
            await call(client, "register_worker", name="b", client="t", session_id="s", role="m")
        )["worker_identity"]
        for repo in ("acme/other", "ACME/OTHER"):
            result = await call(
                client, "acquire_lease", forge=FORGE, repo=repo, number=other.number,
                role="merger", worker_identity=identity, head_sha=other.head_sha,
            )  # fmt: skip
            assert refused(result)[0] == "repo_not_allowed"
        revoke_token(local.db, "bound", now=NOW)
        code, detail = refused(await call(client, "list_leases"))
        assert code == "unauthorized" and "revoked" in detail


@pytest.mark.parametrize(
    ("token", "expected"),
    [(None, "give a token"), ("rbt_unknown", "unknown token"), ("rbs_x", "session token")],
)
async def test_no_or_a_bad_token_exits_with_one_line(
    local: Local, token: str | None, expected: str
) -> None:
    env = {**os.environ, **local.env_with(token)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "reviewbot", "mcp", "--stdio", env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(b""), 60)
    assert proc.returncode != 0 and out == b""
    lines = [line for line in err.decode().splitlines() if line.startswith("reviewbot:")]
    assert len(lines) == 1 and expected in lines[0], err.decode()


async def wait_for_status(db: Any, delivery_id: str, wanted: set[str]) -> Any:
    async with asyncio.timeout(WAIT_S):
        while True:
            found = journal.get_delivery(db, delivery_id)
            if found is not None and found.status in wanted:
                return found
            await asyncio.sleep(0.05)


async def test_stdio_workers_leave_a_serves_delivery_in_processing_alone(
    local: Local, sim: Simulator, tmp_path: Path
) -> None:
    held = sim.open_pr(FORGE, REPO, author="alice", head_ref="held")
    mine = sim.open_pr(FORGE, REPO, author="alice", head_ref="mine")
    # The forge hangs on the held PR: the serve's worker claims its delivery and stays on it.
    sim.faults.add(
        forge=FORGE, method="GET", path=f"/repos/{REPO}/pulls/{held.number}", delay=120.0,
        times=100,
    )  # fmt: skip
    token = local.token("review,read", "shared-store")
    async with serve_process(cwd=tmp_path, env=local.env) as serve:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                serve.base + "/api/v1/reviews",
                json={"forge": FORGE, "repo": REPO, "number": held.number},
                headers={"Authorization": f"Bearer {token}"},
            ) as resp,
        ):
            assert resp.status == 202, await resp.text()
            held_id = (await resp.json())["delivery_id"]
        before = await wait_for_status(local.db, held_id, {"processing"})
        assert before.attempts == 1

        async with mcp_stdio(local.env_with(token)) as client:
            # The stdio process runs workers of its own: they gate what it journals...
            queued = ok(await call(client, "review_pr", forge=FORGE, repo=REPO, number=mine.number))
            await wait_for_status(local.db, queued["delivery_id"], {"done"})
            assert decisions.count_for_delivery(local.db, queued["delivery_id"]) == 1
            # ...and never took over the serve's delivery: not reset, not claimed again.
            after = journal.get_delivery(local.db, held_id)
            assert after is not None
            assert (after.status, after.attempts) == ("processing", 1)
            assert decisions.count_for_delivery(local.db, held_id) == 0
        assert serve.proc.returncode is None  # the serve still holds it


@pytest.mark.parametrize("resume", [False, True])
async def test_a_delivery_a_crash_left_processing_is_resumed_only_with_resume(
    local: Local, sim: Simulator, resume: bool
) -> None:
    pr = sim.open_pr(FORGE, REPO, author="alice")
    body = json.dumps({"forge": FORGE, "repo": REPO, "number": pr.number}).encode()
    crashed = NewDelivery(
        delivery_id=f"api:crashed-{resume}",
        source="api",
        body=body,
        received_at=NOW,
        forge=FORGE,
        event="review_request",
        headers={"X-Reviewbot-Token": "t"},
    )
    assert journal.insert_delivery(local.db, crashed)
    assert journal.claim(local.db, crashed.delivery_id) is not None  # then the holder died
    token = local.token("review,read", f"resume-{resume}")
    args = ("--resume",) if resume else ()
    async with mcp_stdio(local.env_with(token), *args) as client:
        queued = ok(await call(client, "review_pr", forge=FORGE, repo=REPO, number=pr.number))
        await wait_for_status(local.db, queued["delivery_id"], {"done"})
        if resume:  # the operator said nothing else works on this store
            await wait_for_status(local.db, crashed.delivery_id, {"done"})
        else:
            stored = journal.get_delivery(local.db, crashed.delivery_id)
            assert stored is not None and (stored.status, stored.attempts) == ("processing", 1)
