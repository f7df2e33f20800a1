"""External reviewers inside the review pipeline: the real server, the simulator over HTTP,
real SQLite and reviewers as real subprocesses (small Python scripts).

A repository's reviewers run for a head once its required checks no longer wait; their
findings become inline comments of the same native review, an ``error`` finding requests
changes, and a reviewer that fails leaves the head without a review (``reviewer_error``).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from reviewbot.core.models import PullRef
from reviewbot.runtime.explain import pull_facts
from tests.integration.review_support import (
    APPROVED,
    CHANGES,
    REPO,
    Bot,
    running_bot,
)
from tests.integration.tools_support import SOCKET_CLIENT

FORGES = pytest.mark.parametrize("forge", ["github", "gitea"])

# Put before every reviewer below: it appends a line to the file named by its first argument
# when it runs, so a test can tell how many times it ran.
PRELUDE = """\
import json, os, sys, urllib.request
with open(sys.argv[1], "a") as runs:
    runs.write(os.environ["VAR_HEAD_SHA"] + "\\n")
"""

ERROR_FINDING = """\
print(json.dumps([
    {"path": "src/app.py", "line": 12, "message": "print() left in library code",
     "severity": "error"},
]))
"""

WARNINGS_ONLY = """\
print(json.dumps({"findings": [
    {"path": "src/app.py", "line": 3, "message": "long line", "severity": "warning"},
    {"path": "README.md", "line": 1, "message": "typo: teh", "severity": "warning"},
]}))
"""

MALFORMED = """\
print("all good, nothing to report")
"""

# Records its finding through the session tools of its run, prints none.
RECORDS_THROUGH_THE_API = (
    SOCKET_CLIENT
    + """
answer = tool("record_finding", path="lib/db.py", line=7,
              message="query built by string formatting", severity="error")
assert answer["recorded"] is True, answer
print("[]")
"""
)


def writable_by_reviewers(folder: Path) -> None:
    """A bot running as root runs its reviewers as host uid and gid 65534 (``sandbox_uid``):
    a folder they are granted to write must be theirs, as it must on a real host."""
    if os.geteuid() == 0:
        os.chown(folder, 65534, 65534)


def reviewer(tmp_path: Path, name: str, source: str) -> tuple[str, Path]:
    """(the reviewer command, the file it counts its runs in)."""
    folder = tmp_path / "reviewers"
    folder.mkdir(exist_ok=True)
    writable_by_reviewers(folder)
    script = folder / f"{name}.py"
    script.write_text(PRELUDE + source)
    runs = folder / f"{name}.runs"
    return shlex.join([sys.executable, str(script), str(runs)]), runs


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def runs_of(runs: Path) -> list[str]:
    return runs.read_text().split() if runs.exists() else []


def with_reviewers(command: str, *, network: bool = False) -> dict[str, Any]:
    # Each reviewer counts its runs in tmp_path/reviewers: a writable grant of that folder.
    folder = command.split()[-1].rsplit("/", 1)[0]
    entry = {"command": command, "grants": [{"path": folder, "mode": "rw"}], "network": network}
    rules = {"reviewers": [entry]}
    return {"repos": {f"github:{REPO}": rules, f"gitea:{REPO}": rules}}


def reviewer_runs(bot: Bot, outcome: str) -> float:
    """Reviewer commands run with this outcome, as the service's metrics count them."""
    registry = bot.service.telemetry.registry
    return registry.get_sample_value("reviewbot_reviewer_runs_total", {"outcome": outcome}) or 0


def comments_of(review: Any) -> list[tuple[str, int | None, str]]:
    return [(c.path, c.line, c.body) for c in review.comments]


async def open_green_pr(bot: Bot, forge: str) -> Any:
    pr = bot.sim.open_pr(forge, REPO, author="alice")
    bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
    await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
    await bot.settle()
    return pr


@FORGES
async def test_an_error_finding_requests_changes_with_its_inline_comment(
    tmp_path: Path, forge: str
) -> None:
    command, runs = reviewer(tmp_path, "no_print", ERROR_FINDING)
    async with running_bot(tmp_path, **with_reviewers(command)) as bot:
        pr = await open_green_pr(bot, forge)
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(CHANGES[forge], pr.head_sha)]
        assert comments_of(reviews[0]) == [
            ("src/app.py", 12, "**error**: print() left in library code")
        ]
        assert "Changes requested: an external reviewer reported errors." in reviews[0].body
        assert "required check" not in reviews[0].body.splitlines()[0]
        assert "External reviewers reported 1 error" in reviews[0].body
        latest = bot.store.latest_verdict(forge, REPO, pr.number)
        assert latest is not None
        assert (latest.decision, latest.reason_code) == ("request_changes", "reviewer_findings")
        assert "reviewer error at src/app.py:12" in latest.blockers

        # A later event at the same head evaluates it again, but the reviewers ran already:
        # their findings are reused, and no second review is posted.
        status = bot.sim.set_status(forge, REPO, pr.head_sha, "ci/other", "success")
        await bot.sim.deliver_status(forge, REPO, status.id)
        await bot.settle()
        assert len(bot.bot_reviews(forge, pr.number)) == 1
        assert runs_of(runs) == [pr.head_sha]


@FORGES
async def test_warnings_only_approve_with_the_inline_comments_once_checks_finish(
    tmp_path: Path, forge: str
) -> None:
    command, runs = reviewer(tmp_path, "style", WARNINGS_ONLY)
    async with running_bot(tmp_path, **with_reviewers(command)) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "pending")
        await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        # The checks still wait: no reviewer runs for a pending head.
        assert runs_of(runs) == []
        assert bot.decisions(forge, pr.number) == ["waiting"]

        status = bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        await bot.sim.deliver_status(forge, REPO, status.id)
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED[forge], pr.head_sha)]
        assert comments_of(reviews[0]) == [
            ("src/app.py", 3, "**warning**: long line"),
            ("README.md", 1, "**warning**: typo: teh"),
        ]
        assert "Approved: the one required check passed." in reviews[0].body
        assert "External reviewers reported 2 warnings" in reviews[0].body
        assert runs_of(runs) == [pr.head_sha]
        assert reviewer_runs(bot, "ok") == 1 and reviewer_runs(bot, "malformed_output") == 0


async def test_malformed_output_is_a_recorded_error_and_no_review(tmp_path: Path) -> None:
    forge = "gitea"
    command, runs = reviewer(tmp_path, "chatty", MALFORMED)
    async with running_bot(tmp_path, **with_reviewers(command)) as bot:
        pr = await open_green_pr(bot, forge)
        assert bot.bot_reviews(forge, pr.number) == []
        latest = bot.store.latest_verdict(forge, REPO, pr.number)
        assert latest is not None
        assert (latest.decision, latest.reason_code) == ("error", "reviewer_error")
        assert "malformed_output: output is not JSON" in latest.detail
        assert latest.head_sha == pr.head_sha
        # The state comment names the failure as the blocker.
        (state,) = bot.bot_comments(forge, pr.number)
        assert "malformed_output" in state.body
        assert runs_of(runs) == [pr.head_sha]
        assert reviewer_runs(bot, "malformed_output") == 1 and reviewer_runs(bot, "ok") == 0


@FORGES
async def test_a_finding_recorded_through_the_api_with_the_session_token_is_in_the_review(
    tmp_path: Path, forge: str
) -> None:
    command, runs = reviewer(tmp_path, "recorder", RECORDS_THROUGH_THE_API)
    # The network stays off: the run's tools socket is in the reviewer's sandbox.
    async with running_bot(tmp_path, **with_reviewers(command)) as bot:
        pr = await open_green_pr(bot, forge)
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(CHANGES[forge], pr.head_sha)]
        assert comments_of(reviews[0]) == [
            ("lib/db.py", 7, "**error**: query built by string formatting")
        ]
        assert runs_of(runs) == [pr.head_sha]
        # The call was made by the reviewer's own session, a step of the run.
        with bot.store.db.read() as tx:
            calls = tx.all("SELECT session_id, run_id, tool, outcome FROM session_tool_calls")
        assert [(c["tool"], c["outcome"]) for c in calls] == [("record_finding", "ok")]
        assert calls[0]["session_id"] == f"{calls[0]['run_id']}/reviewer-1"


# Keeps a copy of the delivery file it was given, beside its run counter.
COPIES_ITS_DELIVERY_FILE = """\
import shutil
shutil.copyfile(os.environ["REVIEWBOT_TRIGGER_FILE"], sys.argv[1] + ".delivery.json")
print("[]")
"""


@FORGES
async def test_the_delivery_file_carries_the_webhook_that_was_received(
    tmp_path: Path, forge: str
) -> None:
    command, runs = reviewer(tmp_path, "reader", COPIES_ITS_DELIVERY_FILE)
    async with running_bot(tmp_path, **with_reviewers(command)) as bot:
        pr = bot.sim.open_pr(forge, REPO, author="alice")
        bot.sim.set_status(forge, REPO, pr.head_sha, "ci/test", "success")
        sent = await bot.sim.deliver_pull_request(forge, REPO, pr.number, action="opened")
        await bot.settle()
        assert runs_of(runs) == [pr.head_sha]
        got = read_json(Path(f"{runs}.delivery.json"))

    # The forge's event exactly as it was sent, and the headers the journal keeps.
    assert got["payload"] == json.loads(sent.body)
    assert got["payload"]["pull_request"]["head"]["sha"] == pr.head_sha
    assert got["delivery_id"] == sent.id and got["source"] == forge
    sent_headers = {k.lower(): v for k, v in sent.headers.items()}
    assert got["headers"]
    for name, value in got["headers"].items():
        assert sent_headers[name.lower()] == value
    event_header = "x-github-event" if forge == "github" else "x-gitea-event-type"
    assert event_header in {k.lower() for k in got["headers"]}
    # Never a signature: it is derived from the webhook secret.
    assert not any("signature" in k.lower() for k in got["headers"])
    assert got["variables"] == {
        "forge": forge,
        "owner": "acme",
        "repo": "api",
        "number": pr.number,
        "head_sha": pr.head_sha,
    }


# Prints 100 findings of about 9 KB each (under the 1 MiB stdout limit): 99 warnings, then
# one error.
FLOOD = """\
import json
print(json.dumps([
    {"path": f"src/f{i}.py", "line": i + 1, "message": f"finding {i} " + "x" * 9000,
     "severity": "error" if i == 99 else "warning"}
    for i in range(100)
]))
"""


@FORGES
async def test_a_flood_of_large_findings_still_ends_in_one_review_within_the_forge_limits(
    tmp_path: Path, forge: str
) -> None:
    """Eight reviewers, 800 findings, 7 MB of messages: the review posts (the forge refuses
    more than 65536 characters of body and 5 MiB of request), bounded and pointing to the
    whole list, and the error still requests changes."""
    folder = tmp_path / "reviewers"
    folder.mkdir()
    (folder / "flood.py").write_text(FLOOD)
    command = shlex.join([sys.executable, str(folder / "flood.py")])
    rules = {"reviewers": [command] * 8}
    repos = {f"github:{REPO}": rules, f"gitea:{REPO}": rules}
    async with running_bot(tmp_path, repos=repos) as bot:
        pr = await open_green_pr(bot, forge)
        await bot.settle()
        reviews = bot.bot_reviews(forge, pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(CHANGES[forge], pr.head_sha)]
        (review,) = reviews
        assert len(review.body) <= 65536
        assert 0 < len(review.comments) <= 50
        assert sum(len(c.body) for c in review.comments) <= 60_000
        # Errors are chosen first (the eight reviewers' identical one is one comment).
        assert [c.path for c in review.comments if c.body.startswith("**error**")] == ["src/f99.py"]
        assert f"`reviewbot explain {forge}:{REPO}#{pr.number}` lists them all" in review.body
        latest = bot.store.latest_verdict(forge, REPO, pr.number)
        assert latest is not None and latest.reason_code == "reviewer_findings"
        kept = bot.store.reviewer_findings(forge, REPO, pr.number, pr.head_sha)
        assert kept is not None and 8 <= len(kept) < 800  # the run's bound: 1 MiB
        assert sum(len(f.message) for f in kept) <= 1024 * 1024
        # The pointer holds: explain lists every kept finding.
        pull = PullRef.parse(f"{forge}:{REPO}#{pr.number}")
        facts = pull_facts(bot.store.db, time.time, pull, 20)
        assert facts.findings == kept
        assert f"External reviewers' findings at {pr.head_sha[:12]} ({len(kept)}):" in facts.text()
        assert "  - error src/f99.py:100: finding 99 x" in facts.text()
