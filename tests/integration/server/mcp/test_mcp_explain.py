"""MCP ``explain`` answers what ``reviewbot explain --json`` prints: for a PR its decisions,
reviews, merge, findings and lease history; for a delivery its decisions and the review and
merge it led to. The bot serves ``/mcp`` on loopback against the forge simulator (a PR is
opened, CI passes, the bot approves and automerges it) and the command runs as a process
on the same store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reviewbot.sim import SimServer, Simulator
from tests.integration.mcp_support import mcp_http, ok
from tests.integration.merge_support import REPO, bot_world, set_check
from tests.integration.process_support import run_reviewbot

FORGE = "gitea"


def cli_explain(data: Path, *args: str) -> dict[str, Any]:
    done = run_reviewbot(
        "explain", *args, "--json", cwd=data.parent, env={"REVIEWBOT_DATA_DIR": str(data)}
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


async def test_mcp_explain_has_every_section_the_command_prints(
    tmp_path: Path, sim: Simulator, sim_server: SimServer
) -> None:
    async with bot_world(tmp_path, sim, sim_server, rules={"automerge": True}) as w:
        pull = w.sim.open_pr(FORGE, REPO, author="alice")
        set_check(w, FORGE, pull.head_sha, "success")
        delivery = await w.sim.deliver_status(FORGE, REPO, None)
        await w.settle()
        assert w.sim.pull(FORGE, REPO, pull.number).merged
        ref = f"{FORGE}:{REPO}#{pull.number}"
        data = w.settings.data_dir
        async with mcp_http(w.base, w.token("read")) as client:
            by_pr = ok(await client.call_tool("explain", {"pr": ref}))
            by_id = ok(await client.call_tool("explain", {"delivery_id": delivery.id}))
        cli = cli_explain(data, ref)

        sections = ("decisions", "reviews", "merge", "findings", "lease_history")
        assert set(sections) <= set(by_pr), sorted(by_pr)
        assert by_pr["merge"] is not None and by_pr["merge"]["head_sha"] == pull.head_sha
        assert by_pr["reviews"] and by_pr["lease_history"]
        for section in ("reviews", "merge", "findings", "lease_history"):
            assert by_pr[section] == cli[section], section
        shown = [{k: v for k, v in d.items() if k != "display_name"} for d in by_pr["decisions"]]
        assert shown == cli["decisions"]

        cli_by_id = cli_explain(data, delivery.id)
        assert by_id == cli_by_id
        (merge,) = by_id["merges"]
        assert (merge["pull"], merge["head_sha"]) == (ref, pull.head_sha)
        assert [r["decision"] for r in by_id["reviews"]] == ["approve"]
