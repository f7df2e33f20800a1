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

import httpx
import pytest

from reviewbot.config import GrantRule, ReviewerRule, ReviewerSettings, SecretSource
from reviewbot.core.sandbox import MIB, SandboxLimits
from reviewbot.runtime.reviewers.runner import (
    ReviewerErrorKind,
    ReviewerLimits,
    ReviewersOutcome,
    run_external_reviewers,
)
from reviewbot.runtime.reviewers.runs import RunFolder, start_run
from reviewbot.runtime.reviewers.sandbox import Sandbox, contained, host_tasks, probe
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


HOSTILE = Path(__file__).with_name("hostile_reviewer.py")


def hostile_entry(
    paths: WorkflowPaths, out: Path, outside: Path, ro_grant: Path | None
) -> ReviewerRule:
    """The hostile reviewer, granted ``out`` (writable, made for it) and ``ro_grant``."""
    command = shlex.join(
        [
            sys.executable,
            str(HOSTILE),
            str(out),
            str(paths.db_file.resolve()),
            str(outside),
            str(ro_grant) if ro_grant else "-",
        ]
    )
    grants = [GrantRule(path=str(out), mode="rw")]
    if ro_grant is not None:
        grants.append(GrantRule(path=str(ro_grant), mode="ro"))
    return ReviewerRule(command=command, grants=grants)


def assert_contained(report: dict[str, Any]) -> None:
    """Everything the hostile reviewer reports shows the sandbox held."""
    status = report["status"][1]
    for key in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert int(status[key], 16) == 0, (key, status)  # no capability at all
    assert (status["Seccomp"], status["NoNewPrivs"]) == ("2", "1")
    assert status["Uid"].split() == ["65534"] * 4
    assert report["hostname"] == ["ok", "reviewer"]
    # /proc is the sandbox's own: its init and the reviewer, nothing of the host.
    assert report["pids"][0] == "ok" and max(report["pids"][1]) < 10
    for name in ("proc1_environ", "parent_environ"):
        assert SERVER_SECRET not in str(report[name][1])
    # The database: not by its path, not relative to the run folder, not through a /proc
    # root, not anywhere on the sandbox's filesystem.
    for suffix in ("", "-wal", "-shm"):
        assert report["db" + suffix] == ["failed", "FileNotFoundError:ENOENT"]
        assert report["db_relative" + suffix] == ["failed", "FileNotFoundError:ENOENT"]
    for name in ("db_proc1_root", "db_self_root", "db_parent_root"):
        assert report[name][0] == "failed", (name, report[name])
    assert report["db_anywhere"] == ["ok", []]
    assert report["backups"] == ["ok", []]
    # Every privileged call is refused by the filter (or by having no capability).
    for name in (
        "open_by_handle_at",
        "name_to_handle_at",
        "remount_usr",
        "mount_tmpfs",
        "umount_backups",
        "unshare_user_then_remount",
        "clone_user_namespace",
        "setns_pid1_mnt",
        "ptrace_pid1",
        "ptrace_parent",
        "keyctl",
        "bpf",
        "perf_event_open",
    ):
        assert report[name] == ["failed", "PermissionError:EPERM"], (name, report[name])
    if "remount_ro_grant" in report:
        assert report["remount_ro_grant"] == ["failed", "PermissionError:EPERM"]
        assert report["write_ro_grant"][0] == "failed"
    # The system, the sandbox's root and /dev are read-only. (Writes elsewhere may land on a
    # private tmpfs, such as /tmp, where the folders leading to a grant may be: the callers
    # check that none reached the host.)
    for name in ("write_usr", "write_etc", "write_root", "write_dev"):
        assert report[name][0] == "failed", (name, report[name])
    assert report["write_run_folder"][0] == "ok"


async def test_a_hostile_reviewer_reaches_no_secret_no_database_and_holds_no_privilege(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leftovers: list[str]
) -> None:
    no_leftovers.append("sleep 3217")
    monkeypatch.setenv("FORGE_DEPLOY_TOKEN", SERVER_SECRET)
    paths, run = workflow(tmp_path)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "rules.txt").write_text("no print()")
    out, outside = paths.data_dir / "out", tmp_path / "outside.txt"
    leaves = script(
        tmp_path,
        "leaves.py",
        "import subprocess\nsubprocess.Popen(['setsid', 'sleep', '3217'])\nprint('[]')\n",
    )
    entries = [hostile_entry(paths, out, outside, rules), py(leaves)]

    outcome = await review(paths, run, entries)

    assert outcome.errors == ()
    report = json.loads((out / "report.json").read_text())
    assert_contained(report)
    assert report["proc1_environ"][0] == "ok"  # its own init: only the reviewer's variables
    assert "REVIEWBOT_SESSION_TOKEN" in report["proc1_environ"][1]
    assert not outside.exists()
    assert not (paths.db_dir / "planted").exists()
    assert not (rules / "planted").exists()
    assert not (paths.data_dir / "planted").exists()
    assert not (run.path / "planted").exists()  # the run folder inside is its own tmpfs
    with sqlite3.connect(paths.db_file) as db:
        assert db.execute("SELECT count(*) FROM sqlite_master").fetchone() == (1,)
    # The setsid sleeper died with the sandbox's PID namespace.
    assert processes_with("sleep 3217") == []


GREEDY = r"""
import json, os, signal, subprocess, sys, time
out = sys.argv[1]
report = {}

def fill(path, chunk=1024 * 1024):
    written = 0
    try:
        with open(path, "wb") as handle:
            while written < 1024 * chunk:
                handle.write(b"x" * chunk)
                handle.flush()
                written += chunk
    except OSError as exc:
        return [written, exc.strerror]
    return [written, "no limit"]

children, error = [], "no limit"
for _ in range(200):
    try:
        pid = os.fork()
    except OSError as exc:
        error = exc.strerror
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    children.append(pid)
report["processes"] = [len(children), error]
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)

blocks = []
try:
    while len(blocks) < 4096:
        blocks.append(bytearray(1024 * 1024))
    report["memory"] = [len(blocks), "no limit"]
except MemoryError:
    report["memory"] = [len(blocks), "MemoryError"]
del blocks
report["run_folder"] = fill("big")
report["tmp"] = fill("/tmp/big")
os.remove("/tmp/big")
report["shm"] = fill("/dev/shm/big")
os.remove("/dev/shm/big")
report["file_in_grant"] = fill(os.path.join(out, "big"))
files = []
try:
    while len(files) < 100000:
        files.append(open("/dev/null"))
    report["open_files"] = [len(files), "no limit"]
except OSError as exc:
    report["open_files"] = [len(files), exc.strerror]
for handle in files:
    handle.close()
spin = subprocess.run([sys.executable, "-c", "while True: pass"], timeout=60)
report["cpu"] = [spin.returncode]
with open(os.path.join(out, "report.json"), "w") as handle:
    json.dump(report, handle)
print("[]")
"""


async def test_a_reviewer_is_bounded_in_processes_memory_cpu_files_and_disk(
    tmp_path: Path,
) -> None:
    paths, run = workflow(tmp_path)
    limits = SandboxLimits(
        processes=32,
        memory_bytes=256 * MIB,
        cpu_s=1,
        open_files=64,
        file_bytes=12 * MIB,
        folder_bytes=8 * MIB,
    )
    state = probe("on", limits=limits)
    assert state.enforced, state.reason
    out = paths.data_dir / "out"
    greedy = script(tmp_path, "greedy.py", GREEDY)
    entry = ReviewerRule(command=py(greedy, str(out)), grants=[GrantRule(path=str(out), mode="rw")])

    # The limit is over what the reviewers' host user runs when it starts; what of that
    # ends meanwhile (another test's processes) leaves room for more.
    others = host_tasks(state.drop_to.uid if state.drop_to else os.getuid())
    outcome = await review(paths, run, [entry], sandbox=Sandbox(state))

    assert outcome.errors == ()
    report = json.loads((out / "report.json").read_text())
    assert_bounded(report, others=others)
    # The run folder was the sandbox's own tmpfs: nothing it wrote is on the host's disk.
    assert sorted(p.name for p in run.path.iterdir()) == ["delivery.json"]
    assert (out / "big").stat().st_size == 12 * MIB


def assert_bounded(report: dict[str, Any], *, others: int = 0) -> None:
    """What GREEDY measured under 32 processes, 256 MiB, 1 CPU second, 64 open files,
    12 MiB files and 8 MiB folders; ``others``: processes of its host user that may have
    ended while it ran."""
    print("measured:", report)  # shown with -s: what the bounds let through
    processes, why = report["processes"]
    assert 16 <= processes < 32 + others and why == "Resource temporarily unavailable"
    blocks, why = report["memory"]
    assert 64 <= blocks < 256 and why == "MemoryError"
    assert report["run_folder"] == [8 * MIB, "No space left on device"]
    assert report["tmp"] == [8 * MIB, "No space left on device"]
    assert report["shm"] == [8 * MIB, "No space left on device"]
    assert report["file_in_grant"] == [12 * MIB, "File too large"]
    assert report["open_files"][0] < 64 and report["open_files"][1] == "Too many open files"
    assert report["cpu"] == [-signal.SIGXCPU]


def test_the_probe_refuses_a_sandbox_that_would_not_contain_its_reviewer() -> None:
    jailed = "CapInh:\t0\nCapPrm:\t0\nCapEff:\t0\nCapBnd:\t0\nCapAmb:\t0\nNoNewPrivs:\t1\n"
    assert contained(jailed + "Seccomp:\t2\n") == ""
    root = jailed.replace("CapEff:\t0", "CapEff:\t000001fffeffffff")
    assert "CapEff '000001fffeffffff'" in contained(root + "Seccomp:\t0\n")
    assert "Seccomp '0'" in contained(jailed + "Seccomp:\t0\n")
    assert "NoNewPrivs" in contained(jailed.replace("NoNewPrivs:\t1", "NoNewPrivs:\t0"))


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
        "json.dump(seen, open(os.path.join(sys.argv[2], 'seen.json'), 'w')); print('[]')\n",
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
    seen = json.loads((made_rw / "seen.json").read_text())
    assert seen == {str(missing_ro): False, str(made_rw): True}
    assert (made_rw / "written").read_text() == "ok"  # created when granted, and writable
    assert not missing_ro.exists()  # a missing read-only grant grants nothing...
    assert "does not exist and grants nothing" in caplog.text  # ...and says so


async def test_a_folder_that_cannot_be_read_fails_closed(tmp_path: Path) -> None:
    """By the user reviewers run as: the bot's own, or sandbox_uid under a root bot (which
    itself could read every folder)."""
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
    assert ("uid 65534" in result.error.detail) is (os.geteuid() == 0)
    assert not marker.exists()


SHOW_SECRETS = """
import json, os, sys
folder = "secrets"
files = {}
if os.path.isdir(folder):
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        files[name] = [open(path).read(), oct(os.stat(path).st_mode & 0o777)]
env = {k: v for k, v in os.environ.items() if k.startswith("SECRET_")}
out = os.path.join(sys.argv[1], os.environ["VAR_NAME"] + ".json")
json.dump({"files": files, "env": env}, open(out, "w"))
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
    out = paths.data_dir / "out"
    grants = [GrantRule(path=str(out), mode="rw")]
    entries: list[str | ReviewerRule] = [
        ReviewerRule(command=f"env VAR_NAME=lint {py(show, str(out))}", name="lint", grants=grants),
        ReviewerRule(
            command=f"env VAR_NAME=other {py(show, str(out))}", name="other", grants=grants
        ),
    ]
    with caplog.at_level(logging.DEBUG):
        outcome = await review(paths, run, entries, sandbox=sandbox)

    assert outcome.errors == ()
    lint = json.loads((out / "lint.json").read_text())
    other = json.loads((out / "other.json").read_text())
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
    from tests.integration.review_support import (
        APPROVED,
        REPO,
        SECRET,
        running_bot,
    )
    from tests.integration.runtime.review.test_review_external import open_green_pr

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
        async with httpx.AsyncClient() as client:
            health = (await client.get(f"{bot.base_url}/healthz")).json()
        assert health["sandbox"]["status"] == "enforced"
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
    from tests.integration.review_support import REPO, running_bot
    from tests.integration.runtime.review.test_review_external import (
        open_green_pr,
        reviewer,
        runs_of,
    )

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
        # An operator sees it without reading the log: /healthz names the sandbox state.
        async with httpx.AsyncClient() as client:
            health = (await client.get(f"{bot.base_url}/healthz")).json()
        assert health["sandbox"]["status"] == "unavailable"
        assert "no-bwrap" in health["sandbox"]["reason"]
