"""External reviewers inside the bubblewrap sandbox: real reviewer scripts, run by the real
runner under a real ``bwrap``, trying everything a hostile reviewer would.

Each test proves an attempt fails and the result records what happened: the server's
secrets in ``/proc``, the database files by relative and absolute path, a ``setsid``
descendant that should outlive the run, writes outside the grants, floods, nested JSON.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reviewbot.config import GrantRule, ReviewerRule, ReviewerSettings, SecretSource
from reviewbot.runtime.reviewers.runner import (
    ReviewerErrorKind,
    ReviewerLimits,
    ReviewersOutcome,
    run_external_reviewers,
)
from reviewbot.runtime.reviewers.runs import RunFolder, start_run
from reviewbot.runtime.reviewers.sandbox import Sandbox, probe
from reviewbot.runtime.reviewers.sessions import SessionManager
from reviewbot.workflowdb.access import DBAccess
from reviewbot.workflowdb.paths import WorkflowPaths

STATE = probe("on")
pytestmark = pytest.mark.skipif(
    not STATE.enforced, reason=f"the reviewer sandbox cannot run here: {STATE.reason}"
)

SERVER_SECRET = "server-only-forge-token-7f3a9c"  # in the server's environment


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / "reviewers" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(body)
    return path


def py(path: Path, *args: str) -> str:
    return shlex.join([sys.executable, str(path), *args])


def workflow(tmp_path: Path) -> tuple[WorkflowPaths, RunFolder]:
    """A data directory with a real WAL-mode database (so -wal and -shm exist) and a run."""
    paths = WorkflowPaths(tmp_path / "data").ensure()
    db = sqlite3.connect(paths.db_file)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE api_tokens (token TEXT)")
    db.execute("INSERT INTO api_tokens VALUES ('db-held-token-secret')")
    db.commit()
    db.close()
    (paths.migrations_dir / "0001_init.sql").write_text("CREATE TABLE notes (body TEXT);\n")
    paths.backups_dir.mkdir(exist_ok=True)
    (paths.backups_dir / "20240101.sqlite").write_text("a copy of the database")
    return paths, start_run(paths, "run-1", {"delivery_id": "d-1"})


async def review(
    paths: WorkflowPaths,
    run: RunFolder,
    entries: list[str | ReviewerRule],
    *,
    sandbox: Sandbox | None = None,
    limits: ReviewerLimits | None = None,
) -> ReviewersOutcome:
    sessions = SessionManager()
    with sessions.run(run.run_id, db_access=DBAccess.READ_WRITE) as session:
        return await run_external_reviewers(
            entries,
            run=run,
            sessions=sessions,
            run_session_id=session.id,
            limits=limits or ReviewerLimits(timeout_s=30),
            sandbox=sandbox or Sandbox(STATE),
            paths=paths,
        )


def processes_with(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and str(os.getpid()) != entry.name:
            found.append(int(entry.name))
    return found


@pytest.fixture
def no_leftovers() -> Iterator[list[str]]:
    """Markers of sleepers a test starts; any still alive afterwards is killed (by pid)."""
    markers: list[str] = []
    yield markers
    for marker in markers:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)


HOSTILE = r"""
import json, os, subprocess, sys
db_abs, host_pid, outside, ro_grant = sys.argv[1:5]
report = {}

def attempt(name, action):
    try:
        report[name] = ["ok", action()]
    except Exception as exc:
        report[name] = ["failed", type(exc).__name__]

def read(path):
    with open(path, "rb") as handle:
        return handle.read().decode("latin-1")

def write(path):
    with open(path, "w") as handle:
        handle.write("planted")
    return path

attempt("proc1_environ", lambda: read("/proc/1/environ"))
attempt("parent_environ", lambda: read(f"/proc/{os.getppid()}/environ"))
attempt("server_environ", lambda: read(f"/proc/{host_pid}/environ"))
attempt("pids", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
for suffix in ("", "-wal", "-shm"):
    attempt("db_relative" + suffix, lambda: read("../../db/db.sqlite" + suffix))
    attempt("db_absolute" + suffix, lambda: read(db_abs + suffix))
attempt("migrations", lambda: sorted(os.listdir("../../db/migrations")))
attempt("backups", lambda: sorted(os.listdir("../../db/migrations/.backups")))
attempt("write_outside", lambda: write(outside))
attempt("write_db_folder", lambda: write("../../db/planted"))
attempt("write_usr", lambda: write("/usr/planted"))
attempt("write_ro_grant", lambda: write(os.path.join(ro_grant, "planted")))
attempt("read_ro_grant", lambda: read(os.path.join(ro_grant, "rules.txt")))
subprocess.Popen(["setsid", "sleep", "3217"], stdout=subprocess.DEVNULL)
with open("report.json", "w") as handle:
    json.dump(report, handle)
print("[]")
"""


async def test_a_hostile_reviewer_reaches_no_secret_no_database_and_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leftovers: list[str]
) -> None:
    no_leftovers.append("sleep 3217")
    monkeypatch.setenv("FORGE_DEPLOY_TOKEN", SERVER_SECRET)
    paths, run = workflow(tmp_path)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "rules.txt").write_text("no print()")
    outside = tmp_path / "outside.txt"
    hostile = script(tmp_path, "hostile.py", HOSTILE)
    command = py(hostile, str(paths.db_file.resolve()), str(os.getpid()), str(outside), str(rules))
    entry = ReviewerRule(command=command, grants=[GrantRule(path=str(rules), mode="ro")])

    outcome = await review(paths, run, [entry])

    assert outcome.errors == ()
    report = json.loads((run.path / "report.json").read_text())
    # /proc is the sandbox's own: its init and the reviewer, no server, no secrets.
    assert report["pids"][0] == "ok" and max(report["pids"][1]) < 10
    for name in ("proc1_environ", "parent_environ"):
        assert SERVER_SECRET not in str(report[name][1])
        assert "REVIEWBOT_SESSION_TOKEN" in str(report[name][1])  # only the reviewer's own
    assert report["server_environ"][0] == "failed"
    # Database files: unreachable by every path; the migrations are there, the backups not.
    for suffix in ("", "-wal", "-shm"):
        assert report["db_relative" + suffix] == ["failed", "FileNotFoundError"]
        assert report["db_absolute" + suffix] == ["failed", "FileNotFoundError"]
    assert report["migrations"] == ["ok", [".backups", "0001_init.sql"]]
    assert report["backups"] == ["ok", []]
    # Writes outside the run folder and its writable grants never reach the host.
    assert report["write_usr"][0] == "failed"
    assert report["write_ro_grant"] == ["failed", "OSError"]
    assert report["read_ro_grant"] == ["ok", "no print()"]
    assert not outside.exists()
    assert not (paths.db_dir / "planted").exists()
    assert not (rules / "planted").exists()
    with sqlite3.connect(paths.db_file) as db:
        assert db.execute("SELECT count(*) FROM sqlite_master").fetchone() == (1,)
    # The setsid sleeper died with the sandbox's PID namespace.
    assert processes_with("sleep 3217") == []


async def test_the_timeout_ends_the_whole_namespace(
    tmp_path: Path, no_leftovers: list[str]
) -> None:
    no_leftovers.append("sleep 3219")
    paths, run = workflow(tmp_path)
    stuck = script(
        tmp_path,
        "stuck.py",
        "import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '3219'])\ntime.sleep(60)\n",
    )
    started = time.monotonic()
    outcome = await review(paths, run, [py(stuck)], limits=ReviewerLimits(timeout_s=1.5))
    (result,) = outcome.results
    assert result.error is not None and result.error.kind is ReviewerErrorKind.TIMEOUT
    assert time.monotonic() - started < 15
    assert processes_with("sleep 3219") == []


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "sandbox-off"])
async def test_an_exit_within_the_timeout_is_never_a_timeout(
    tmp_path: Path, no_leftovers: list[str], sandboxed: bool
) -> None:
    """A descendant holding stdout open does not keep a finished reviewer running."""
    no_leftovers.append("sleep 3218")
    paths, run = workflow(tmp_path)
    leaves_a_child = script(
        tmp_path,
        "leaves.py",
        "import subprocess, sys\n"
        "subprocess.Popen(['setsid', 'sleep', '3218'])  # inherits stdout\n"
        "print('[]'); sys.stdout.flush()\n",
    )
    sandbox = Sandbox(STATE) if sandboxed else Sandbox(probe("off"))
    started = time.monotonic()
    outcome = await review(
        paths, run, [py(leaves_a_child)], sandbox=sandbox, limits=ReviewerLimits(timeout_s=20)
    )
    assert outcome.errors == ()
    assert time.monotonic() - started < 15


async def test_a_flood_of_output_is_capped_and_recorded(tmp_path: Path) -> None:
    paths, run = workflow(tmp_path)
    flood = script(
        tmp_path, "flood.py", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    )
    limits = ReviewerLimits(timeout_s=20, max_stdout_bytes=256 * 1024)
    started = time.monotonic()
    outcome = await review(paths, run, [py(flood)], limits=limits)
    (result,) = outcome.results
    assert result.error is not None and result.error.kind is ReviewerErrorKind.OUTPUT_TOO_LARGE
    assert time.monotonic() - started < 15


UNPARSABLE = [
    ("nested", "sys.stdout.write('[' * 100000 + ']' * 100000)", "nests"),
    ("huge number", "sys.stdout.write('[' + '9' * 5000 + ']')", "not usable JSON"),
    ("bad utf-8", "sys.stdout.buffer.write(b'[\\xff\\xfe]')", "not UTF-8"),
    ("wrong shape", "sys.stdout.write('{\"findings\": 3}')", "findings"),
    (
        "float line",
        'sys.stdout.write(\'[{"path": "a", "line": 1e999, "message": "m", "severity": "info"}]\')',
        "line",
    ),
]


@pytest.mark.parametrize(
    ("body", "expected"), [u[1:] for u in UNPARSABLE], ids=[u[0] for u in UNPARSABLE]
)
async def test_unparsable_output_is_a_recorded_malformed_output(
    tmp_path: Path, body: str, expected: str
) -> None:
    paths, run = workflow(tmp_path)
    reviewer = script(tmp_path, "bad.py", f"import sys\n{body}\n")
    outcome = await review(paths, run, [py(reviewer)])
    (result,) = outcome.results
    assert result.error is not None
    assert result.error.kind is ReviewerErrorKind.MALFORMED_OUTPUT
    assert expected in result.error.detail


async def test_grants_follow_the_folder_rules(tmp_path: Path, caplog: Any) -> None:
    paths, run = workflow(tmp_path)
    lister = script(
        tmp_path,
        "lister.py",
        "import json, os, sys\n"
        "seen = {p: os.path.isdir(p) for p in sys.argv[1:]}\n"
        "open(os.path.join(sys.argv[2], 'written'), 'w').write('ok')\n"
        "json.dump(seen, open('seen.json', 'w')); print('[]')\n",
    )
    missing_ro = paths.data_dir / "shared" / "missing"
    made_rw = paths.data_dir / "shared" / "cache"
    entry = ReviewerRule(
        command=py(lister, str(missing_ro), str(made_rw)),
        grants=[
            GrantRule(path="shared/missing", mode="ro"),
            GrantRule(path="shared/cache", mode="rw"),
        ],
    )
    with caplog.at_level(logging.WARNING, logger="reviewbot.runtime.reviewers.sandbox"):
        outcome = await review(paths, run, [entry])
    assert outcome.errors == ()
    seen = json.loads((run.path / "seen.json").read_text())
    assert seen == {str(missing_ro): False, str(made_rw): True}
    assert (made_rw / "written").read_text() == "ok"  # created when granted, and writable
    assert not missing_ro.exists()  # a missing read-only grant grants nothing...
    assert "does not exist and grants nothing" in caplog.text  # ...and says so


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder; run as a user")
async def test_a_folder_that_cannot_be_read_fails_closed(tmp_path: Path) -> None:
    paths, run = workflow(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o000)
    marker = tmp_path / "ran"
    reviewer = script(tmp_path, "r.py", f"open({str(marker)!r}, 'w'); print('[]')")
    entry = ReviewerRule(command=py(reviewer), grants=[GrantRule(path=str(locked))])
    outcome = await review(paths, run, [entry])
    (result,) = outcome.results
    assert result.error is not None and result.error.kind is ReviewerErrorKind.GRANT_REFUSED
    assert "cannot be read" in result.error.detail


SHOW_SECRETS = """
import json, os
folder = "secrets"
files = {}
if os.path.isdir(folder):
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        files[name] = [open(path).read(), oct(os.stat(path).st_mode & 0o777)]
env = {k: v for k, v in os.environ.items() if k.startswith("SECRET_")}
json.dump({"files": files, "env": env}, open(os.environ["VAR_NAME"] + ".json", "w"))
print("[]")
"""


async def test_secrets_reach_their_reviewer_alone_and_are_never_logged(
    tmp_path: Path, caplog: Any
) -> None:
    paths, run = workflow(tmp_path)
    key_file = tmp_path / "signing.key"
    key_file.write_text("file-held-signing-key\n")
    show = script(tmp_path, "show.py", SHOW_SECRETS)
    sandbox = Sandbox(
        STATE,
        secrets={
            "lint": ReviewerSettings(
                secrets={
                    "api_token": SecretSource(env="LINT_TOKEN"),
                    "signing_key": SecretSource(file=key_file),
                }
            )
        },
        environ={**os.environ, "LINT_TOKEN": "env-held-lint-token"},
    )
    # The same program, once as "lint" (with secrets), then as "other" (without).
    entries: list[str | ReviewerRule] = [
        ReviewerRule(command=f"env VAR_NAME=lint {py(show)}", name="lint"),
        ReviewerRule(command=f"env VAR_NAME=other {py(show)}", name="other"),
    ]
    with caplog.at_level(logging.DEBUG):
        outcome = await review(paths, run, entries, sandbox=sandbox)

    assert outcome.errors == ()
    lint = json.loads((run.path / "lint.json").read_text())
    other = json.loads((run.path / "other.json").read_text())
    assert lint == {
        "files": {
            "api_token": ["env-held-lint-token", "0o400"],
            "signing_key": ["file-held-signing-key", "0o400"],
        },
        "env": {
            "SECRET_API_TOKEN": "env-held-lint-token",
            "SECRET_SIGNING_KEY": "file-held-signing-key",
        },
    }
    assert other == {"files": {}, "env": {}}
    assert not (run.path / "secrets").exists()  # gone once their reviewer finished
    assert "env-held-lint-token" not in caplog.text
    assert "file-held-signing-key" not in caplog.text


async def test_a_secret_without_a_value_stops_its_reviewer(tmp_path: Path) -> None:
    paths, run = workflow(tmp_path)
    marker = tmp_path / "ran"
    reviewer = script(tmp_path, "r.py", f"open({str(marker)!r}, 'w'); print('[]')")
    sandbox = Sandbox(
        STATE,
        secrets={"lint": ReviewerSettings(secrets={"token": SecretSource(env="UNSET_X")})},
        environ={},
    )
    outcome = await review(
        paths, run, [ReviewerRule(command=py(reviewer), name="lint")], sandbox=sandbox
    )
    (result,) = outcome.results
    assert result.error is not None
    assert result.error.kind is ReviewerErrorKind.SECRET_UNAVAILABLE
    assert "UNSET_X is not set" in result.error.detail
    assert not marker.exists()


async def test_without_bwrap_no_reviewer_runs_unless_the_sandbox_is_off(
    tmp_path: Path, caplog: Any
) -> None:
    paths, run = workflow(tmp_path)
    marker = tmp_path / "ran"
    reviewer = script(tmp_path, "r.py", f"open({str(marker)!r}, 'w'); print('[]')")

    missing = probe("on", bwrap=str(tmp_path / "no-bwrap"))
    assert missing.describe()["status"] == "unavailable"
    outcome = await review(paths, run, [py(reviewer)], sandbox=Sandbox(missing))
    assert outcome.sandbox_unavailable
    (result,) = outcome.results
    assert result.error is not None
    assert "is not installed" in result.error.detail
    assert not marker.exists()

    off = probe("off")
    assert off.describe()["status"] == "off"
    outcome = await review(paths, run, [py(reviewer)], sandbox=Sandbox(off))
    assert outcome.errors == ()
    assert marker.exists()  # explicitly off: it ran, uncontained


# -- through a real server and the forge simulator ------------------------------------------

SERVE_HOSTILE = r"""
import json, os, sys
report = {}
for name, path in [("proc1", "/proc/1/environ"), ("parent", f"/proc/{os.getppid()}/environ"),
                   ("db", "../../db/db.sqlite"), ("db_wal", "../../db/db.sqlite-wal")]:
    try:
        with open(path, "rb") as handle:
            report[name] = handle.read().decode("latin-1")
    except OSError as exc:
        report[name] = type(exc).__name__
with open(os.path.join(sys.argv[1], "report.json"), "w") as handle:
    json.dump(report, handle)
print(json.dumps([{"path": "src/app.py", "line": 1, "message": "seen", "severity": "warning"}]))
"""


async def test_through_serve_a_reviewer_sees_no_server_secret_and_no_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.integration.test_review_external import open_green_pr
    from tests.integration.test_review_pipeline import APPROVED, REPO, SECRET, running_bot

    monkeypatch.setenv("FORGE_DEPLOY_TOKEN", SERVER_SECRET)
    out = tmp_path / "out"
    hostile = script(tmp_path, "hostile.py", SERVE_HOSTILE)
    entry = {"command": py(hostile, str(out)), "grants": [{"path": str(out), "mode": "rw"}]}
    rules = {"reviewers": [entry]}
    repos = {f"github:{REPO}": rules, f"gitea:{REPO}": rules}
    async with running_bot(tmp_path, repos=repos) as bot:
        assert bot.service.review is not None
        sandbox = bot.service.review.pipeline.external.sandbox
        assert sandbox.state.describe()["status"] == "enforced"
        pr = await open_green_pr(bot, "gitea")
        reviews = bot.bot_reviews("gitea", pr.number)
        assert [(r.state, r.commit_id) for r in reviews] == [(APPROVED["gitea"], pr.head_sha)]
        tokens = [bot.settings.gitea.token, bot.settings.github.token]
    report = json.loads((out / "report.json").read_text())
    seen = report["proc1"] + report["parent"]
    assert "REVIEWBOT_SESSION_TOKEN" in seen  # the reviewer's own environment, nothing more
    for secret in [SERVER_SECRET, SECRET] + [t.get_secret_value() for t in tokens if t]:
        assert secret not in seen
    assert (report["db"], report["db_wal"]) == ("FileNotFoundError", "FileNotFoundError")


async def test_through_serve_no_sandbox_means_no_review_and_sandbox_unavailable(
    tmp_path: Path,
) -> None:
    from tests.integration.test_review_external import open_green_pr, reviewer, runs_of
    from tests.integration.test_review_pipeline import REPO, running_bot

    command, runs = reviewer(tmp_path, "never", "print('[]')\n")
    rules = {"reviewers": [command]}
    repos = {f"github:{REPO}": rules, f"gitea:{REPO}": rules}
    async with running_bot(tmp_path, repos=repos, bwrap=str(tmp_path / "no-bwrap")) as bot:
        pr = await open_green_pr(bot, "github")
        assert bot.bot_reviews("github", pr.number) == []
        latest = bot.store.latest_verdict("github", REPO, pr.number)
        assert latest is not None
        assert (latest.decision, latest.reason_code) == ("error", "sandbox_unavailable")
        assert "no-bwrap" in latest.detail and "is not installed" in latest.detail
        assert runs_of(runs) == []  # the reviewer never ran
