"""``reviewbot demo`` as a newcomer runs it: a real process, a real exit code, and the printed
``reviewbot explain`` command working on the store the demo kept."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reviewbot.cli import main

pytestmark = pytest.mark.slow

STEPS = 7
LIMIT_S = 120  # a bound against a hang, never a speed check
EXPLAIN = re.compile(r"^  (REVIEWBOT_DATA_DIR=\S+ .+ explain \S+)$", re.MULTILINE)


def run_demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWBOT_")}
    return subprocess.run(
        [sys.executable, "-m", "reviewbot", "demo", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )


def summary_rows(out: str) -> list[list[str]]:
    table = out.split("\nSummary\n", 1)[1]
    return [line.split() for line in table.splitlines() if line.startswith(("github:", "gitea:"))]


def test_demo_plays_every_step_and_the_printed_explain_command_works(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo-data"
    done = run_demo("--data-dir", str(data_dir), cwd=tmp_path)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    for n in range(1, STEPS + 1):
        step = out.split(f"\nStep {n}/{STEPS}  ", 1)[1].split("\nStep ", 1)[0]
        assert "  done: did what it said" in step, step
    assert "FAILED" not in out
    assert f"All {STEPS} steps did what they said" in out

    # What each step said it did, in plain words.
    assert "the bot waits: WAITING at" in out and "pending: ci/test" in out
    assert "missing: ci/lint" in out
    assert "the bot approves: APPROVE at" in out
    assert "no longer counts" in out
    assert "REQUEST_CHANGES at" in out and "failed: ci/lint" in out
    assert "acquires the merger lease pinned to" in out
    assert "the bot answers 401 signature_invalid" in out
    assert "the bot answers 200 duplicate" in out

    rows = summary_rows(out)
    assert [(r[0], r[2]) for r in rows] == [
        ("github:acme/api#1", "superseded"),
        ("github:acme/api#1", "request_changes"),
        ("gitea:acme/web#1", "approve"),
    ]
    assert rows[0][3] == "APPROVED"  # the approval stays on the old head
    assert rows[1][3:] == ["CHANGES_REQUESTED", "-"]
    assert rows[2][3:5] == ["APPROVED", "merged"]

    commands = [m.group(1) for m in EXPLAIN.finditer(out)]
    assert len(commands) == 2
    assert all(str(data_dir) in c for c in commands)
    # The printed command runs as printed, from any directory.
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWBOT_")}
    explained = subprocess.run(
        ["sh", "-c", commands[0]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )
    assert explained.returncode == 0, explained.stderr
    assert "github:acme/api#1" in explained.stdout
    assert "No decision recorded" not in explained.stdout
    # Both layers of the story are explained: the review verdicts and the gate decisions.
    assert "REQUEST_CHANGES" in explained.stdout and "[checks_failed]" in explained.stdout
    assert "ELIGIBLE" in explained.stdout
    merged = subprocess.run(
        ["sh", "-c", commands[1]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )
    assert merged.returncode == 0, merged.stderr
    assert "gitea:acme/web#1 was merged at" in merged.stdout

    # The bot's own log: each step's decision, review and merge is one findable JSON line.
    log_file = data_dir / "reviewbot.log"
    assert (
        f"The bot's log (one JSON line per delivery, decision, review and merge): {log_file}" in out
    )
    events = [json.loads(line) for line in log_file.read_text().splitlines()]

    def find(msg: str, **keys: object) -> list[dict[str, object]]:
        return [
            e for e in events if e.get("msg") == msg and all(e.get(k) == v for k, v in keys.items())
        ]

    assert find("delivery refused", reason_codes=["signature_invalid"])
    assert find("gated", forge="github", repo="acme/api", pr=1, decision="eligible")
    assert find("reviewed", forge="github", repo="acme/api", pr=1, decision="request_changes")
    assert find("reviewed", forge="gitea", repo="acme/web", pr=1, decision="approve")
    [merge_line] = find("merged", forge="gitea", repo="acme/web", pr=1, decision="merged")
    assert merge_line["head"] == rows[2][1] or str(merge_line["head"]).startswith(rows[2][1])
    assert "rbt_" not in log_file.read_text()  # no bearer token in the log


def test_a_step_that_does_not_do_what_it_said_fails_the_demo(tmp_path: Path) -> None:
    done = run_demo(
        "--data-dir",
        str(tmp_path / "d"),
        "--json",
        "--inject-fault",
        "review-refused",
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    # The steps still show, on stderr; stdout is one JSON report.
    assert "FAILED: expected one APPROVE review" in done.stderr
    assert "happened:" in done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert [s["ok"] for s in report["steps"]] == [True, False]
    failed = report["steps"][1]
    assert failed["title"] == "The checks turn green"
    assert "APPROVE" in failed["expected"]
    assert "reviews by reviewbot: none" in failed["happened"]
    assert report["explain"] and report["data_dir"] == str(tmp_path / "d")


def test_a_data_dir_in_use_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "db").mkdir()
    assert main(["demo", "--data-dir", str(used)]) == 1
    assert "is not an empty directory" in capsys.readouterr().err
    assert main(["demo", "--inject-fault", "nonsense"]) == 1
    assert "unknown fault 'nonsense'" in capsys.readouterr().err
