"""External reviewers as real subprocesses: findings, failures, limits, run folders."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from reviewbot.config import Settings
from reviewbot.core.findings import Severity, merge_findings
from reviewbot.core.models import (
    CheckResult,
    CheckState,
    InlineComment,
    PullRequestSnapshot,
    RequiredChecks,
)
from reviewbot.core.policy import VerdictKind, evaluate
from reviewbot.core.reasons import ReasonCode
from reviewbot.runtime.reviewers.runner import (
    ReviewerErrorKind,
    ReviewerLimits,
    ReviewersOutcome,
    review_pull,
    run_external_reviewers,
)
from reviewbot.runtime.reviewers.runs import (
    RunFolderError,
    grant_folder,
    grant_folders,
    run_id_for,
    start_run,
)
from reviewbot.runtime.reviewers.sessions import SessionManager
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.paths import WorkflowPaths

DELIVERY = {
    "delivery_id": "d-42",
    "variables": {"forge": "gitea", "owner": "acme", "repo": "api", "number": 12},
}


def py(script: Path, *args: str) -> str:
    """A reviewer command running ``script`` with this interpreter."""
    return shlex.join([sys.executable, str(script), *args])


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / "reviewers" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(body)
    return path


async def review(
    tmp_path: Path,
    commands: list[str],
    limits: ReviewerLimits | None = None,
) -> ReviewersOutcome:
    paths = WorkflowPaths(tmp_path / "data").ensure()
    run = start_run(paths, "run-1", DELIVERY)
    sessions = SessionManager()
    with sessions.run("run-1", db_access=DBAccess.READ_WRITE) as session:
        return await run_external_reviewers(
            commands,
            run=run,
            sessions=sessions,
            run_session_id=session.id,
            limits=limits or ReviewerLimits(timeout_s=60),
        )


FINDINGS_SCRIPT = """
import json, os, pathlib
delivery = json.loads(pathlib.Path(os.environ["REVIEWBOT_TRIGGER_FILE"]).read_text())
assert pathlib.Path.cwd() == pathlib.Path(os.environ["REVIEWBOT_RUN_FOLDER"])
number = delivery["variables"]["number"]
print(json.dumps([
    {"path": "src/app.py", "line": 3, "message": f"unused import in PR {number}",
     "severity": "error", "rule": "F401"},
    {"path": "./README.md", "line": 1, "message": "typo", "severity": "info"},
]))
"""


async def test_findings_become_inline_comments_and_request_changes(tmp_path: Path) -> None:
    reviewer = script(tmp_path, "lint.py", FINDINGS_SCRIPT)
    outcome = await review(tmp_path, [py(reviewer)])

    assert outcome.errors == ()
    assert [(f.path, f.line, f.severity) for f in outcome.findings] == [
        ("src/app.py", 3, Severity.ERROR),
        ("README.md", 1, Severity.INFO),
    ]
    assert outcome.comments == (
        InlineComment("src/app.py", 3, "**error**: unused import in PR 12"),
        InlineComment("README.md", 1, "**info**: typo"),
    )
    green = evaluate(RequiredChecks(("ci",)), [], [CheckResult("ci", CheckState.SUCCESS)])
    assert green.kind is VerdictKind.APPROVE
    merged = outcome.apply(green)
    assert merged.kind is VerdictKind.REQUEST_CHANGES
    assert merged.reason is ReasonCode.REVIEWER_FINDINGS
    assert merged.passed == green.passed  # the checks are still reported as they were


async def test_warnings_in_an_envelope_comment_but_keep_the_approval(tmp_path: Path) -> None:
    reviewer = script(
        tmp_path,
        "warn.py",
        "import json; print(json.dumps({'findings': [{'path': 'a.py', 'line': 9, "
        "'message': 'long line', 'severity': 'warning'}]}))",
    )
    outcome = await review(tmp_path, [py(reviewer)])
    assert outcome.errors == ()
    assert outcome.comments == (InlineComment("a.py", 9, "**warning**: long line"),)
    green = evaluate(RequiredChecks(("ci",)), [], [CheckResult("ci", CheckState.SUCCESS)])
    assert merge_findings(green, outcome.findings) == green


async def test_an_error_finding_overrides_waiting_and_no_required_checks(tmp_path: Path) -> None:
    reviewer = script(tmp_path, "lint.py", FINDINGS_SCRIPT)
    outcome = await review(tmp_path, [py(reviewer)])
    waiting = evaluate(RequiredChecks(("ci",)), [], [CheckResult("ci", CheckState.PENDING)])
    nothing = evaluate(RequiredChecks(), [], [])
    failed = evaluate(RequiredChecks(("ci",)), [], [CheckResult("ci", CheckState.FAILURE)])
    assert outcome.apply(waiting).kind is VerdictKind.REQUEST_CHANGES
    assert outcome.apply(nothing).kind is VerdictKind.REQUEST_CHANGES
    assert outcome.apply(failed) == failed  # already requesting changes, for its own reason


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ("not json at all", "output is not JSON"),
        ("", "output is empty"),
        ('"a string"', "not a JSON str"),
        ('{"results": []}', "findings: Field required"),
        (
            '[{"path": "a.py", "line": 1, "message": "m", "severity": "fatal"}]',
            "findings[0].severity",
        ),
        ('[{"path": "a.py", "line": "3", "message": "m", "severity": "info"}]', "[0].line"),
        ('[{"path": "/etc/passwd", "line": 1, "message": "m", "severity": "info"}]', "relative"),
        ('[{"path": "../x", "line": 1, "message": "m", "severity": "info"}]', "relative"),
    ],
)
async def test_malformed_output_is_a_recorded_error(
    tmp_path: Path, stdout: str, expected: str
) -> None:
    (tmp_path / "out.txt").write_text(stdout)
    reviewer = script(
        tmp_path,
        "bad.py",
        "import sys; sys.stdout.write(open(sys.argv[1]).read())",
    )
    # A file named in the command is part of the reviewer's program: visible, read-only.
    outcome = await review(tmp_path, [py(reviewer, str(tmp_path / "out.txt"))])
    (result,) = outcome.results
    assert result.error is not None
    assert result.error.kind is ReviewerErrorKind.MALFORMED_OUTPUT
    assert expected in result.error.detail
    assert outcome.findings == ()
    assert outcome.errors and "malformed_output" in outcome.errors[0]


async def test_non_zero_exit_is_a_recorded_error_with_the_last_stderr_line(
    tmp_path: Path,
) -> None:
    reviewer = script(
        tmp_path,
        "crash.py",
        "import sys; print('[]'); print('loading', file=sys.stderr); "
        "sys.exit('config file missing')",
    )
    outcome = await review(tmp_path, [py(reviewer)])
    (result,) = outcome.results
    assert result.error is not None
    assert result.error.kind is ReviewerErrorKind.EXIT_STATUS
    assert result.exit_code == 1
    assert result.error.detail == "exited with status 1: config file missing"
    assert "loading" in result.stderr


async def test_a_failing_reviewer_does_not_hide_the_next_one(tmp_path: Path) -> None:
    crash = script(tmp_path, "crash.py", "raise SystemExit(3)")
    lint = script(tmp_path, "lint.py", FINDINGS_SCRIPT)
    outcome = await review(tmp_path, [py(crash), py(lint), "no-such-reviewer-command --x"])
    kinds = [r.error.kind if r.error else None for r in outcome.results]
    assert kinds == [ReviewerErrorKind.EXIT_STATUS, None, ReviewerErrorKind.SPAWN_FAILED]
    assert "no-such-reviewer-command" in outcome.results[2].error.detail  # type: ignore[union-attr]
    assert len(outcome.findings) == 2


@pytest.mark.parametrize("command", ["", "   ", "lint 'unterminated"])
async def test_commands_that_cannot_start(tmp_path: Path, command: str) -> None:
    outcome = await review(tmp_path, [command])
    (result,) = outcome.results
    assert result.error is not None
    assert result.error.kind is ReviewerErrorKind.SPAWN_FAILED


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _host_pids(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline and _alive(int(entry.name)):
                found.append(int(entry.name))
    return found


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker = "time.sleep(120.25)"  # the grandchild's command line, as the host sees it
    reviewer = script(
        tmp_path,
        "hang.py",
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; {marker}'])\n"
        "time.sleep(120)\n",
    )
    outcome = await review(tmp_path, [py(reviewer)], ReviewerLimits(timeout_s=3))
    (result,) = outcome.results
    assert result.error is not None
    assert result.error.kind is ReviewerErrorKind.TIMEOUT
    assert "3 s" in result.error.detail
    for _ in range(200):  # the kill is sent; the kernel may take a moment to reap
        if not _host_pids(marker):
            break
        await __import__("asyncio").sleep(0.05)
    assert _host_pids(marker) == []


@pytest.mark.parametrize("endless", [False, True])
async def test_oversized_output_is_a_recorded_error(tmp_path: Path, endless: bool) -> None:
    body = (
        "import sys\nwhile True: sys.stdout.write('x' * 65536)\n"
        if endless
        else "import sys; sys.stdout.write('[' + ' ' * 300000 + ']')"
    )
    reviewer = script(tmp_path, "loud.py", body)
    limits = ReviewerLimits(timeout_s=120, max_stdout_bytes=100_000)
    outcome = await review(tmp_path, [py(reviewer)], limits)
    (result,) = outcome.results
    assert result.error is not None
    assert result.error.kind is ReviewerErrorKind.OUTPUT_TOO_LARGE
    assert "100000 bytes" in result.error.detail


async def test_stderr_is_kept_up_to_its_limit_and_is_not_an_error(tmp_path: Path) -> None:
    reviewer = script(
        tmp_path,
        "chatty.py",
        "import sys; sys.stderr.write('e' * 500000); print('[]')",
    )
    limits = ReviewerLimits(timeout_s=60, max_stderr_bytes=1000)
    outcome = await review(tmp_path, [py(reviewer)], limits)
    (result,) = outcome.results
    assert result.ok
    assert result.stderr == "e" * 1000


async def test_findings_beyond_the_limit_are_dropped_and_counted(tmp_path: Path) -> None:
    reviewer = script(
        tmp_path,
        "many.py",
        "import json; print(json.dumps([{'path': 'a.py', 'line': i, 'message': 'm', "
        "'severity': 'info'} for i in range(1, 31)]))",
    )
    outcome = await review(tmp_path, [py(reviewer)], ReviewerLimits(max_findings=10))
    (result,) = outcome.results
    assert result.ok
    assert len(result.findings) == 10
    assert result.dropped_findings == 20


async def test_an_error_past_the_limit_is_kept_so_the_cut_never_approves(tmp_path: Path) -> None:
    reviewer = script(
        tmp_path,
        "late_error.py",
        "import json; print(json.dumps([{'path': 'a.py', 'line': i, 'message': 'm', "
        "'severity': 'info'} for i in range(1, 31)] + [{'path': 'b.py', 'line': 9, "
        "'message': 'broken', 'severity': 'error'}]))",
    )
    outcome = await review(tmp_path, [py(reviewer)], ReviewerLimits(max_findings=10))
    (result,) = outcome.results
    assert len(result.findings) == 10 and result.dropped_findings == 21
    assert [f.path for f in result.findings if f.severity is Severity.ERROR] == ["b.py"]
    green = evaluate(RequiredChecks(("ci",)), [], [CheckResult("ci", CheckState.SUCCESS)])
    assert outcome.apply(green).kind is VerdictKind.REQUEST_CHANGES


async def test_a_run_keeps_at_most_its_bound_of_findings_whoever_reported_them(
    tmp_path: Path,
) -> None:
    reviewer = script(
        tmp_path,
        "many.py",
        "import json; print(json.dumps([{'path': 'a.py', 'line': i, 'message': 'm' * 100, "
        "'severity': 'warning'} for i in range(1, 101)]))",
    )
    limits = ReviewerLimits(max_run_findings=150, max_run_findings_bytes=10**6)
    outcome = await review(tmp_path, [py(reviewer), py(reviewer)], limits)
    assert len(outcome.findings) == 150 and outcome.dropped_findings == 50
    limits = ReviewerLimits(max_run_findings=1000, max_run_findings_bytes=104 * 30)
    outcome = await review(tmp_path, [py(reviewer)], limits)
    assert len(outcome.findings) == 30 and outcome.dropped_findings == 70


async def test_the_step_token_is_revoked_when_the_reviewer_finishes(tmp_path: Path) -> None:
    reviewer = script(
        tmp_path,
        "token.py",
        "import json, os; print(json.dumps([{'path': 'token', 'line': 1, 'severity': 'info', "
        "'message': os.environ['REVIEWBOT_SESSION_TOKEN']}]))",
    )
    paths = WorkflowPaths(tmp_path / "data").ensure()
    run = start_run(paths, "run-t", DELIVERY)
    sessions = SessionManager()
    with sessions.run("run-t", db_access=DBAccess.READ_WRITE) as session:
        outcome = await run_external_reviewers(
            [py(reviewer)], run=run, sessions=sessions, run_session_id=session.id
        )
        assert sessions.live_sessions() == ["run-t"]  # the step's session has ended
    (token,) = outcome.findings
    assert token.message.startswith("rbs_")
    assert sessions.live_sessions() == []


# -- run folders -----------------------------------------------------------------------------


def test_run_folder_is_created_idempotently(tmp_path: Path) -> None:
    paths = WorkflowPaths(tmp_path / "data")
    run_id = run_id_for(
        forge="gitea", owner="acme", name="api", number=12, head_sha="a" * 40, delivery_id="d-42"
    )
    first = start_run(paths, run_id, DELIVERY)
    (first.path / "notes.txt").write_text("kept")
    second = start_run(paths, run_id, DELIVERY)

    assert first == second
    assert sorted(os.listdir(paths.runs_dir)) == [run_id]
    assert sorted(os.listdir(first.path)) == ["delivery.json", "notes.txt"]
    assert json.loads(first.delivery_file.read_text()) == DELIVERY
    assert first.read_delivery() == DELIVERY
    assert (first.path / "notes.txt").read_text() == "kept"


def test_run_ids_are_stable_readable_and_safe(tmp_path: Path) -> None:
    kw = {"forge": "github", "owner": "acme", "name": "web.app", "number": 5, "head_sha": "f" * 40}
    a = run_id_for(**kw, delivery_id="x")  # type: ignore[arg-type]
    assert a == run_id_for(**kw, delivery_id="x")  # type: ignore[arg-type]
    assert a != run_id_for(**kw, delivery_id="y")  # type: ignore[arg-type]
    assert a.startswith("github-acme-web.app-5-ffffffffffff-")
    odd = run_id_for(
        forge="gitea", owner="../..", name="a/b", number=1, head_sha="", delivery_id="z"
    )
    assert "/" not in odd and not odd.startswith(".")
    paths = WorkflowPaths(tmp_path / "data")
    for bad in ("..", ".hidden", "a/b", "", "x" * 201):
        with pytest.raises(RunFolderError):
            start_run(paths, bad, {})


def test_folder_grants(tmp_path: Path) -> None:
    missing_rw = tmp_path / "out" / "reports"
    missing_ro = tmp_path / "cache"
    present_ro = tmp_path / "repo"
    present_ro.mkdir()

    grants = grant_folders([(missing_rw, True), (missing_ro, False), (present_ro, False)])

    assert [(g.path, g.writable) for g in grants] == [(missing_rw, True), (present_ro, False)]
    assert missing_rw.is_dir()  # a writable grant creates the folder
    assert not missing_ro.exists()  # a read-only grant never creates anything
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunFolderError, match="not a folder"):
        grant_folder(tmp_path / "file", writable=True)
    assert grant_folder(tmp_path / "file", writable=False) is None


async def test_an_outcome_with_a_failed_reviewer_is_marked_failed(tmp_path: Path) -> None:
    crash = script(tmp_path, "crash.py", "raise SystemExit(3)")
    lint = script(tmp_path, "lint.py", FINDINGS_SCRIPT)
    assert (await review(tmp_path, [py(crash), py(lint)])).failed
    assert not (await review(tmp_path, [py(lint)])).failed


async def test_review_pull_derives_the_run_from_the_pull_request(tmp_path: Path) -> None:
    reviewer = script(
        tmp_path,
        "vars.py",
        "import json, os\n"
        "d = json.load(open(os.environ['REVIEWBOT_TRIGGER_FILE']))\n"
        "v = d['variables']\n"
        "assert (v['forge'], v['owner'], v['repo'], v['number']) == "
        "(os.environ['VAR_FORGE'], os.environ['VAR_OWNER'], os.environ['VAR_REPO'], "
        "int(os.environ['VAR_NUMBER']))\n"
        "assert os.environ['REVIEWBOT_DB_ACCESS'] == 'read'\n"
        "print(json.dumps([{'path': 'f.py', 'line': 1, 'severity': 'info', "
        "'message': d['delivery_id'] + ' ' + v['head_sha'] + ' ' + d['payload']['action']}]))\n",
    )
    # The reviewers' grant is explicit, and bounded by the server's own access.
    settings = Settings(
        data_dir=tmp_path / "data", db_access="read", reviewer_db_access="read-write"
    )
    pull = PullRequestSnapshot(
        forge="github",
        owner="acme",
        name="api",
        number=12,
        state="open",
        merged=False,
        draft=False,
        head_sha="c" * 40,
        base_ref="main",
        head_ref="feature",
        author="alice",
    )
    sessions = SessionManager()
    outcome = await review_pull(
        [py(reviewer)],
        settings=settings,
        sessions=sessions,
        pull=pull,
        delivery_id="gh-1",
        source="github",
        event="pull_request",
        action="opened",
        payload={"action": "opened"},
    )
    assert outcome.errors == ()
    assert [f.message for f in outcome.findings] == [f"gh-1 {'c' * 40} opened"]
    (run_dir,) = (tmp_path / "data" / "runs").iterdir()
    assert run_dir.name.startswith("github-acme-api-12-cccccccccccc-")
    assert sessions.live_sessions() == []
    assert await review_pull(
        [], settings=settings, sessions=sessions, pull=pull, delivery_id="x", source="api"
    ) == ReviewersOutcome((), ())


@pytest.mark.parametrize("granted", [None, " read-write", "read-write ", "READ", "rw"])
async def test_review_pull_without_an_exact_grant_gives_reviewers_no_db_access(
    tmp_path: Path, granted: str | None
) -> None:
    """Not the server's own (read-write here): a grant is explicit and spelled exactly."""
    reviewer = script(
        tmp_path,
        "access.py",
        "import os\nassert os.environ['REVIEWBOT_DB_ACCESS'] == 'none', "
        "os.environ['REVIEWBOT_DB_ACCESS']\nprint('[]')\n",
    )
    settings = Settings(data_dir=tmp_path / "data", reviewer_db_access=granted)
    pull = PullRequestSnapshot(
        forge="gitea",
        owner="acme",
        name="api",
        number=3,
        state="open",
        merged=False,
        draft=False,
        head_sha="d" * 40,
        base_ref="main",
        head_ref="feature",
        author="alice",
    )
    outcome = await review_pull(
        [py(reviewer)],
        settings=settings,
        sessions=SessionManager(),
        pull=pull,
        delivery_id="gt-1",
        source="gitea",
    )
    assert outcome.errors == ()
