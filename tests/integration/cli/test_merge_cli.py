"""``reviewbot merge`` and ``reviewbot lease`` as real processes against the forge simulator."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

import reviewbot
from reviewbot.cli import main
from reviewbot.sim import SimServer, Simulator
from tests.integration.merge_support import BOT, REPO, prepare_sim, set_check

WAIT_S = 60.0


class Cli:
    def __init__(self, tmp_path: Path, sim_server: SimServer, tokens: dict[str, str]) -> None:
        config = tmp_path / "reviewbot.toml"
        config.write_text(
            f'[repos."github:{REPO}"]\nrequired_checks = []\n\n[repos."gitea:{REPO}"]\n'
        )
        self.data = tmp_path / "data"
        package_root = Path(reviewbot.__file__).resolve().parent.parent
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(package_root),
            "REVIEWBOT_CONFIG": str(config),
            "REVIEWBOT_DATA_DIR": str(self.data),
            "REVIEWBOT_GITHUB__API_URL": sim_server.github_api_url,
            "REVIEWBOT_GITHUB__TOKEN": tokens["github"],
            "REVIEWBOT_GITHUB__BOT_LOGIN": BOT,
            "REVIEWBOT_GITEA__URL": sim_server.gitea_url,
            "REVIEWBOT_GITEA__TOKEN": tokens["gitea"],
            "REVIEWBOT_GITEA__BOT_LOGIN": BOT,
            # Each command is a new Python process; on a busy machine a few of them outlast
            # the default 15 s lease, and no test here is about expiry.
            "REVIEWBOT_LEASES__LEASE_S": "600",
            # Who acts, declared as the documented variables (the flags win over them).
            "REVIEWBOT_CLIENT": "release-script",
            "REVIEWBOT_SESSION_ID": "run-981",
        }

    async def run(self, *args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "reviewbot",
            *args,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), WAIT_S)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async def json(self, *args: str) -> tuple[int, Any]:
        code, out, err = await self.run(*args, "--json")
        return code, json.loads(out) if out.strip() else {"stderr": err}

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.data / "db" / "db.sqlite") as conn:
            return list(conn.execute(sql))


@pytest.fixture
def cli(tmp_path: Path, sim: Simulator, sim_server: SimServer) -> Cli:
    return Cli(tmp_path, sim_server, prepare_sim(sim, ("ci/test",)))


def merge_calls(sim: Simulator, forge: str, number: int) -> list[Any]:
    return [r for r in sim.requests if r.path == f"/repos/{REPO}/pulls/{number}/merge"]


async def test_merge_registers_acquires_merges_and_releases(cli: Cli, sim: Simulator) -> None:
    forge = "github"
    pr = sim.open_pr(forge, REPO, author="alice")
    set_check(sim, forge, pr.head_sha, "success")
    sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
    code, result = await cli.json("merge", f"{forge}:{REPO}#{pr.number}", "--head", pr.head_sha)
    assert code == 0, result
    live = sim.pull(forge, REPO, pr.number)
    assert live.merged
    assert result["merged"] is True and result["merge_commit_sha"] == live.merge_commit_sha
    assert len(merge_calls(sim, forge, pr.number)) == 1
    assert merge_calls(sim, forge, pr.number)[0].body["sha"] == pr.head_sha
    assert cli.rows("SELECT number, head_sha, merge_commit_sha, holder FROM merged_pulls") == [
        (pr.number, pr.head_sha, live.merge_commit_sha, result["worker"])
    ]
    code, listed = await cli.json("lease", "list", f"{forge}:{REPO}#{pr.number}")
    assert code == 0
    assert [(x["holder"], x["phase"]) for x in listed["leases"]] == [(result["worker"], "released")]
    # the audit trail says who held the merger lease and why it ended; explain shows it too
    code, history = await cli.json("lease", "history", f"{forge}:{REPO}#{pr.number}")
    assert code == 0
    trail = [(h["event"], h["holder"], h["reason"]) for h in history["history"]]
    assert trail[0] == ("granted", result["worker"], "")
    assert trail[-1] == ("released", result["worker"], "merged")
    assert len(trail) == 2  # the merger's heartbeats renew the grant's row, adding none
    code, explained, _ = await cli.run("explain", f"{forge}:{REPO}#{pr.number}")
    assert code == 0 and "Lease history" in explained and "reason=merged" in explained
    # a second run sees the merge and sends nothing
    code, again = await cli.json("merge", f"{forge}:{REPO}#{pr.number}", "--head", pr.head_sha)
    assert code == 0 and again["already_merged"] is True
    assert len(merge_calls(sim, forge, pr.number)) == 1


async def test_an_outside_session_with_its_own_lease(cli: Cli, sim: Simulator) -> None:
    forge = "gitea"
    pr = sim.open_pr(forge, REPO, author="alice")
    ref = f"{forge}:{REPO}#{pr.number}"
    set_check(sim, forge, pr.head_sha, "success")
    code, out, _ = await cli.run(
        "lease", "register", "--name", "agent7", "--client", "my-agent", "--session-id", "s-7"
    )
    assert code == 0
    worker = out.strip()
    assert cli.rows(f"SELECT client, session_id FROM workers WHERE identity = '{worker}'") == [
        ("my-agent", "s-7")
    ]
    code, lease = await cli.json(
        "lease", "acquire", ref, "--role", "merger", "--worker", worker, "--head", pr.head_sha
    )
    assert code == 0 and lease["epoch"] == 1 and lease["holder"] == worker

    # nobody approved yet: refused with the code, one line on stderr, nothing sent
    code, out, err = await cli.run(
        "merge", ref, "--head", pr.head_sha, "--worker", worker, "--epoch", "1"
    )
    assert code == 1
    assert err.strip().splitlines() == [err.strip()]
    assert err.startswith("reviewbot: not_approved:")
    assert merge_calls(sim, forge, pr.number) == []

    # another worker cannot take the lease meanwhile; an unregistered one is unproven
    code, out, _ = await cli.run("lease", "register", "--name", "other")
    other = out.strip()
    code, held = await cli.json("lease", "acquire", ref, "--worker", other, "--head", "ab12" * 10)
    assert code == 1 and held["error"] == "lease_held"
    assert held["holder"] == worker and held["expires_at"] == lease["expires_at"]
    assert "epoch" not in held and "epoch" not in held["detail"]  # never the holder's epoch
    ghost = other.replace("other", "ghost")
    code, unproven = await cli.json(
        "lease", "acquire", ref, "--worker", ghost, "--head", "ab12" * 10
    )
    assert code == 1 and unproven["error"] == "worker_unproven"

    sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
    code, beat = await cli.json("lease", "heartbeat", ref, "--worker", worker, "--epoch", "1")
    assert code == 0 and beat["phase"] == "claimed"
    code, result = await cli.json(
        "merge", ref, "--head", pr.head_sha, "--worker", worker, "--epoch", "1", "--method",
        "squash",
    )  # fmt: skip
    assert code == 0, result
    (call,) = merge_calls(sim, forge, pr.number)
    assert call.body == {"Do": "squash", "head_commit_id": pr.head_sha}
    # merged and released: the epoch is spent
    code, out, err = await cli.run("lease", "release", ref, "--worker", worker, "--epoch", "1")
    assert code == 1 and "lease_not_held" in err


async def test_a_head_pushed_before_the_merge_is_reviewed_again(cli: Cli, sim: Simulator) -> None:
    forge = "gitea"
    pr = sim.open_pr(forge, REPO, author="alice")
    old = pr.head_sha
    set_check(sim, forge, old, "success")
    sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
    pushed: list[str] = []

    def push() -> None:
        pushed.append(sim.push(forge, REPO, pr.number))
        set_check(sim, forge, pushed[0], "success")

    sim.faults.add(forge=forge, method="POST", path=f"/repos/{REPO}/pulls/{pr.number}/merge",
                   before=push)  # fmt: skip
    code, result = await cli.json("merge", f"{forge}:{REPO}#{pr.number}", "--head", old)
    assert code == 1
    assert result["error"] == "head_moved" and result["new_head"] == pushed[0]
    assert not sim.pull(forge, REPO, pr.number).merged
    bot = [
        (r.state, r.commit_id) for r in sim.pull(forge, REPO, pr.number).reviews if r.user == BOT
    ]
    assert bot == [("APPROVED", pushed[0])]
    assert cli.rows("SELECT status, head_sha FROM merge_attempts") == [("head_moved", old)]


@pytest.mark.parametrize(
    "argv",
    [
        ["lease", "register", "--name", "agent7"],
        ["lease", "acquire", "gitea:acme/api#1", "--worker", "w", "--head", "ab12" * 10],
        ["lease", "heartbeat", "gitea:acme/api#1", "--worker", "w", "--epoch", "1"],
        ["lease", "release", "gitea:acme/api#1", "--worker", "w", "--epoch", "1"],
        ["merge", "gitea:acme/api#1", "--head", "ab12" * 10],
    ],
)
async def test_a_command_acting_as_a_client_needs_client_and_session_declared(
    cli: Cli, argv: list[str]
) -> None:
    # Nothing is guessed: without --client/--session-id (or REVIEWBOT_CLIENT and
    # REVIEWBOT_SESSION_ID) the command refuses, naming both, and writes nothing.
    for missing in (
        ("REVIEWBOT_CLIENT",),
        ("REVIEWBOT_SESSION_ID",),
        ("REVIEWBOT_CLIENT", "REVIEWBOT_SESSION_ID"),
    ):
        saved = {k: cli.env.pop(k) for k in missing}
        try:
            code, out, err = await cli.run(*argv)
        finally:
            cli.env.update(saved)
        assert code == 2 and out == "", err
        (line,) = err.strip().splitlines()
        assert "--client" in line and "--session-id" in line, line
        assert "REVIEWBOT_CLIENT" in line and "REVIEWBOT_SESSION_ID" in line, line
    if (cli.data / "db" / "db.sqlite").exists():
        assert cli.rows("SELECT identity FROM workers") == []
    # Blank or oversized declarations are refused too.
    code, _, err = await cli.run(*argv, "--client", " ", "--session-id", "s")
    assert code == 2 and "--client" in err
    code, _, err = await cli.run(*argv, "--client", "c", "--session-id", "x" * 500)
    assert code == 2 and "--session-id" in err


async def test_lease_history_names_the_declared_client(cli: Cli, sim: Simulator) -> None:
    pr = sim.open_pr("gitea", REPO, author="alice")
    ref = f"gitea:{REPO}#{pr.number}"
    code, out, _ = await cli.run("lease", "register", "--name", "agent8")
    assert code == 0
    worker = out.strip()
    code, _ = await cli.json("lease", "acquire", ref, "--worker", worker, "--head", pr.head_sha)
    assert code == 0
    code, history = await cli.json("lease", "history", ref)
    assert [h["actor"] for h in history["history"]] == [
        "cli client 'release-script' session 'run-981'"
    ]
    assert cli.rows(f"SELECT client, session_id FROM workers WHERE identity = '{worker}'") == [
        ("release-script", "run-981")
    ]


async def test_bad_arguments_are_one_line_refusals(cli: Cli) -> None:
    code, _, err = await cli.run("merge", "github:acme/api", "--head", "ab12")
    assert code == 1 and "FORGE:OWNER/REPO#NUMBER" in err
    code, _, err = await cli.run("merge", "github:acme/api#1", "--head", "ab12", "--epoch", "2")
    assert code == 1 and "--worker and --epoch" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["merge"],
        *(["lease", sub] for sub in ("register", "acquire", "heartbeat", "release", "list")),
    ],
)
def test_every_help_has_an_example(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    assert "Example" in capsys.readouterr().out


@pytest.mark.parametrize("forge", ["github", "gitea"])
async def test_a_bot_that_may_not_merge_is_refused_by_name_before_any_call(
    cli: Cli, sim: Simulator, forge: str
) -> None:
    pr = sim.open_pr(forge, REPO, author="alice")
    ref = f"{forge}:{REPO}#{pr.number}"
    set_check(sim, forge, pr.head_sha, "success")
    sim.submit_review(forge, REPO, pr.number, reviewer="bob", state="APPROVED")
    if forge == "github":
        sim.set_permission(forge, REPO, BOT, "read")  # the account can read, not push
        named = "write (push) access"
    else:
        # Write access, but the branch's merge whitelist names someone else.
        sim.repo(forge, REPO).protections["main"].merge_whitelist = ["carol"]
        named = "merge whitelist"
    code, _, err = await cli.run("merge", ref, "--head", pr.head_sha)
    assert code == 1 and "permission_denied" in err and named in err
    assert merge_calls(sim, forge, pr.number) == []
    assert not sim.pull(forge, REPO, pr.number).merged
