"""``POST /mcp`` of a real ``reviewbot serve`` process, driven by the official ``mcp``
client: a whole merger session against the forge simulator, and a body that never ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import reviewbot
from reviewbot.sim import SimServer, Simulator
from reviewbot.store.database import SQLiteDatabase
from reviewbot.store.tokens import create_token
from tests.integration.mcp_support import mcp_http, ok, refused
from tests.integration.merge_support import BOT, REPO, prepare_sim, set_check
from tests.integration.process_support import serve_process

pytestmark = pytest.mark.slow
FORGE = "gitea"


def serve_env(tmp_path: Path, sim_server: SimServer, token: str) -> dict[str, str]:
    config = tmp_path / "reviewbot.toml"
    config.write_text(f'[repos."gitea:{REPO}"]\nrequired_checks = ["ci/test"]\n')
    return {
        "PYTHONPATH": str(Path(reviewbot.__file__).resolve().parent.parent),
        "REVIEWBOT_CONFIG": str(config),
        "REVIEWBOT_DATA_DIR": str(tmp_path / "data"),
        "REVIEWBOT_GITEA__URL": sim_server.gitea_url,
        "REVIEWBOT_GITEA__TOKEN": token,
        "REVIEWBOT_GITEA__WEBHOOK_SECRET": "s3cret",
        "REVIEWBOT_GITEA__BOT_LOGIN": BOT,
        "REVIEWBOT_LEASES__LEASE_S": "600",
        "REVIEWBOT_BODY_READ_TIMEOUT_S": "1",
    }


def new_token(tmp_path: Path, scopes: str, name: str) -> str:
    db = SQLiteDatabase(tmp_path / "data" / "db" / "db.sqlite")
    try:
        plain, _ = create_token(db, name=name, scopes=scopes, repo=None, now=1767225600.0)
    finally:
        db.close()
    return plain


async def test_a_merger_session_against_a_serve_process(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    tokens = prepare_sim(sim, ("ci/test",))
    pr = sim.open_pr(FORGE, REPO, author="alice")
    set_check(sim, FORGE, pr.head_sha, "success")
    sim.submit_review(FORGE, REPO, pr.number, reviewer="bob", state="APPROVED")
    env = serve_env(tmp_path, sim_server, tokens[FORGE])
    async with serve_process(cwd=tmp_path, env=env) as served:
        token = new_token(tmp_path, "lease,merge,read", "agent")
        target = {"forge": FORGE, "repo": REPO, "number": pr.number, "role": "merger"}
        async with mcp_http(served.base, token) as client:
            identity = ok(
                await client.call_tool(
                    "register_worker",
                    {"name": "agent", "client": "t", "session_id": "s", "role": "merger"},
                )
            )["worker_identity"]
            lease = ok(
                await client.call_tool(
                    "acquire_lease",
                    {**target, "worker_identity": identity, "head_sha": pr.head_sha},
                )
            )
            claim = {**target, "worker_identity": identity, "epoch": lease["epoch"]}
            ok(await client.call_tool("heartbeat_lease", claim))
            merge = {
                "forge": FORGE, "repo": REPO, "number": pr.number, "head_sha": pr.head_sha,
                "worker_identity": identity, "epoch": lease["epoch"],
            }  # fmt: skip
            assert ok(await client.call_tool("merge_pr", merge))["merged"] is True
            again = await client.call_tool("release_lease", claim)
            assert not again.is_error or refused(again)[0] == "lease_not_held"
        assert sim.pull(FORGE, REPO, pr.number).merged

        # A body that never ends is cut off at the read deadline, with nothing processed.
        host, port = served.base.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\n"
            b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\n'
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readline(), 20)
        writer.close()
        assert b" 408 " in head, head
